//! The repository's test apps (`tests/apps`): Node, Python and Go services as their users
//! write them, installed by `./run setup` (npm ci in `tests/apps/node`, a venv of
//! `tests/apps/python/requirements.txt` in `$CARGO_TARGET_DIR/apps/venv`); Go ones built
//! by the test that runs them.

use std::path::{Path, PathBuf};

/// `tests/apps` of the repository.
pub fn test_apps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/apps")
        .canonicalize()
        .expect("tests/apps exists")
}

/// `tests/apps/node`, its packages installed.
pub fn node_apps() -> PathBuf {
    let dir = test_apps().join("node");
    assert!(
        dir.join("node_modules/express").is_dir(),
        "{}/node_modules is missing: run ./run setup (npm ci in tests/apps/node)",
        dir.display()
    );
    dir
}

/// A program of the test apps' Python environment (`./run setup` makes it in the build's
/// target directory: `apps/venv`).
pub fn venv_bin(name: &str) -> PathBuf {
    let target = crate::process::profile_dir()
        .parent()
        .expect("the target directory")
        .to_path_buf();
    let bin = target.join("apps/venv/bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run ./run setup (it installs tests/apps/python/requirements.txt)",
        bin.display()
    );
    bin
}

/// `tests/apps/go/NAME/main.go` built into `dir` (standard library only).
pub fn go_build(name: &str, dir: &Path) -> PathBuf {
    let bin = dir.join(name);
    let src = test_apps().join("go").join(name).join("main.go");
    let built = std::process::Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .env("GO111MODULE", "off")
        .status();
    assert!(
        matches!(built, Ok(s) if s.success()),
        "go build {}: {built:?}",
        src.display()
    );
    bin
}

//! One real PostgreSQL cluster per test binary and a fresh database per test.
//!
//! The cluster comes from `scripts/lib/pg.sh` (Debian's package: initdb as the postgres
//! user, a unix socket only, fsync off) on first use. It is stopped by pg.sh's watcher
//! once this test binary has exited — whether the tests passed, failed, panicked or the
//! binary was killed — so no server outlives a run; a static never runs `Drop`, so the
//! watcher is the one stop. No PostgreSQL fails the test (never a silent skip).

use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use super::workspace_root;

struct Cluster {
    dir: String,
    url: String,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

fn cluster() -> &'static Cluster {
    let started = CLUSTER.get_or_init(|| {
        let script = workspace_root().join("scripts/lib/pg.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["start", "--watch", &std::process::id().to_string()])
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        match (out.status.success(), lines.as_slice()) {
            (true, [dir, url]) => Ok(Cluster {
                dir: dir.to_string(),
                url: url.to_string(),
            }),
            _ => Err(format!(
                "starting PostgreSQL with scripts/lib/pg.sh failed ({}; ./run setup installs \
                 it): {text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    match started {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// The URL of a new, empty database on the binary's cluster.
pub fn database() -> String {
    let c = cluster();
    let name = format!("t{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    psql(&c.url, &format!("CREATE DATABASE {name}"));
    c.url.replacen("/postgres?", &format!("/{name}?"), 1)
}

/// Runs `sql` with psql (unaligned, tuples only) and returns its output; panics on an error.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql])
        .output()
        .expect("running psql (./run setup installs it)");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

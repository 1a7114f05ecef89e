//! Issue 25 — coming from pm2 in one command: `scalpel serve --from-pm2` on a real pm2
//! ecosystem file (tests/apps/node/ecosystem.config.js, run by the real pm2 too), and the
//! `--check` lines about worker ports in the kernel's ephemeral range and what each app's
//! workers must do.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scalpel_testkit::apps::node_apps;

use crate::serve_cli::{free_base, free_port, http, poll, signal};

const BIN: &str = env!("CARGO_BIN_EXE_scalpel");

/// `scalpel serve --from-pm2` with `APP_PORT`; its stdout.
fn from_pm2(eco: &Path, app_port: u16) -> String {
    let out = Command::new(BIN)
        .args(["serve", "--from-pm2"])
        .arg(eco)
        .env("APP_PORT", app_port.to_string())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The ecosystem file runs under pm2 (the same app files, unchanged), and the printed
/// config says each app's keys — what has no equivalent as a comment line — passes
/// `--check`, and runs the Express app on the port pm2 gave it.
#[test]
fn from_pm2_prints_a_config_that_passes_check_and_runs_the_same_app_files() {
    let eco = node_apps().join("ecosystem.config.js");
    let pm2 =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo/pm2/node_modules/.bin/pm2");
    assert!(
        pm2.exists(),
        "{} is missing: run ./run setup",
        pm2.display()
    );

    // Under pm2 first: the same file, the same app.
    let home = tempfile::tempdir().unwrap();
    let pm2_port = free_port();
    let pm2_cmd = |args: &[&str]| {
        // As its users run it: from the folder of the ecosystem file, against which pm2
        // resolves `script`.
        Command::new(&pm2)
            .args(args)
            .current_dir(node_apps())
            .env("PM2_HOME", home.path())
            .env("APP_PORT", pm2_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    assert!(pm2_cmd(&["start", eco.to_str().unwrap(), "--only", "web"]).success());
    let under_pm2 = poll(Duration::from_secs(30), || {
        http(pm2_port, "GET", "/").is_ok_and(|(s, b)| s == 200 && b.contains("\"express\""))
    });
    pm2_cmd(&["kill"]);
    assert!(under_pm2, "the app did not answer under pm2");

    let port = free_port();
    let toml = from_pm2(&eco, port);
    for want in [
        "name = \"web\"\ncommand = [\"node\", \"./express.js\"]\nworkers = 2\nport_base = 3001",
        "mode = \"direct\"",
        &format!("listen = \"0.0.0.0:{port}\""),
        "max_memory_mb = 300",
        "stop_grace = \"3000ms\"",
        "env = { NODE_ENV = \"production\" }",
        "# pm2 env_staging (pm2 --env staging): not applied",
        "# pm2 merge_logs true: workers' output goes to serve's stdout/stderr",
        "# pm2 exec_mode \"cluster\"",
        "name = \"jobs\"\ncommand = [\"node\", \"queue.js\", \"--verbose\"]\nworkers = 1\nport_base = 3101",
        "# pm2 cron_restart = \"0 * * * *\": no equivalent in scalpel serve",
        "[app.restart]\nmax_restarts = 5",
    ] {
        assert!(toml.contains(want), "{want:?} not in:\n{toml}");
    }
    assert!(
        !toml.contains("PORT ="),
        "PORT is each worker's own:\n{toml}"
    );

    // This test's ports, then --check and a real start.
    let dir = tempfile::tempdir().unwrap();
    let (admin, web, jobs) = (free_port(), free_base(4), free_base(2));
    let toml = toml
        .replace("127.0.0.1:9090", &format!("127.0.0.1:{admin}"))
        .replace(&format!("0.0.0.0:{port}"), &format!("127.0.0.1:{port}"))
        .replace("port_base = 3001", &format!("port_base = {web}"))
        .replace("port_base = 3101", &format!("port_base = {jobs}"));
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, &toml).unwrap();
    let check = Command::new(BIN)
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}\n{toml}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(stdout.contains(": ok"), "{stdout}");
    assert!(
        stdout.contains("app `web` (direct, health: heartbeat): each worker must listen on $PORT"),
        "{stdout}"
    );
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut last = None;
    let served = poll(Duration::from_secs(60), || {
        last = Some(http(port, "GET", "/"));
        matches!(&last, Some(Ok((200, b))) if b.contains("\"express\""))
    });
    signal(&child, "TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(served, "the converted config did not serve: {last:?}");
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
}

/// What `node` cannot evaluate, and what is not an ecosystem file: one line, exit 2.
#[test]
fn from_pm2_refuses_a_file_node_cannot_evaluate_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, want) in [
        (
            "broken.config.js",
            "module.exports = {",
            "node could not evaluate it",
        ),
        (
            "empty.config.js",
            "module.exports = { apps: [] };",
            "has no apps",
        ),
        ("missing.config.js", "", "no such file"),
    ] {
        let path = dir.path().join(name);
        if !text.is_empty() {
            std::fs::write(&path, text).unwrap();
        }
        let out = Command::new(BIN)
            .args(["serve", "--from-pm2"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {want:?} not in {err:?}");
    }
}

/// `--check` warns (exit 0) when an app's worker ports reach into the kernel's ephemeral
/// range, where an outgoing connection can hold the port a replacement needs — the
/// restart that failed with "held by a connection, not a listener" in the issue.
#[test]
fn check_warns_when_worker_ports_overlap_the_ephemeral_range() {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let lo: u32 = text.split_whitespace().next().unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let write = |base: u32| {
        std::fs::write(
            &path,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"app.js\"]\nworkers = 2\nport_base = {base}\n"
            ),
        )
        .unwrap();
    };
    let check = || {
        Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    // The last port (base + 3) is the range's first.
    write(lo - 3);
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "warning: app `web`: worker ports {}..={} (port_base … port_base + 2 × workers − 1) overlap the kernel's ephemeral ports {lo}..",
            lo - 3,
            lo
        )) && err.contains(&format!("choose port_base below {lo}")),
        "{err}"
    );
    write(lo - 4);
    let out = check();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

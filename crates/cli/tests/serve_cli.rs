//! `scalpel serve` as a process: bad configs exit 2 with one line naming file and line;
//! SIGHUP reloads; SIGTERM drains an in-flight request, stops the workers, exits 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_scalpel");

fn app_js() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../serve/tests/apps/app.js")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_base(count: u16) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..500 {
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        // Below the ephemeral range (32768+): see crates/serve/tests/util free_base.
        let base = 20_000 + (r % 12_000) as u16;
        if (0..count).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no free port range");
}

/// A raw HTTP/1.1 exchange with `Connection: close`; (status, body).
fn http(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn poll(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} failed");
}

fn pids(body: &str) -> Vec<u64> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["apps"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["pid"].as_u64())
        .collect()
}

#[test]
fn bad_config_exits_2_with_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:8080\"\n\n[[app]]\nname = \"web\"\ncommand = [\"node\"]\nworkers = 0\nport_base = 3001\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let want = format!(
        "{}:7: app `web`: workers must be between 1 and 1024, not 0",
        path.display()
    );
    assert!(err.contains(&want), "expected {want:?}\n     got {err:?}");

    let out = Command::new(BIN)
        .args(["serve", "--config", "/nonexistent/serve.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/serve.toml: cannot read"));
}

#[test]
fn the_example_config_passes_check() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serve/serve.toml");
    let out = Command::new(BIN)
        .args(["serve", "--check", "--config"])
        .arg(&example)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
}

/// Writes a config with two workers of the test Node app and starts `scalpel serve` on it
/// with piped stdout and stderr; (temp dir to keep alive, child, listen port, admin port).
fn spawn_two_node_workers() -> (tempfile::TempDir, Child, u16, u16) {
    let dir = tempfile::tempdir().unwrap();
    let (listen, admin, base) = (free_port(), free_port(), free_base(4));
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin = \"127.0.0.1:{admin}\"\n\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"{}\"]\nworkers = 2\nport_base = {base}\n\n[app.health]\npath = \"/healthz\"\n",
            app_js().display()
        ),
    )
    .unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .env("SCALPEL_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (dir, child, listen, admin)
}

/// Polls `/status` until both workers are ready; the last body.
fn wait_both_ready(admin: u16) -> String {
    let mut status = String::new();
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            status.matches("\"state\": \"ready\"").count() == 2
        }),
        "not ready: {status}"
    );
    status
}

#[test]
fn sighup_reloads_and_sigterm_drains_then_exits_0() {
    let (_dir, mut child, listen, admin) = spawn_two_node_workers();
    let stdout = child.stdout.take().unwrap();
    let out_lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let stderr = child.stderr.take().unwrap();
    let err_lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let ready = |body: &str| body.matches("\"state\": \"ready\"").count() == 2;
    let mut status = wait_both_ready(admin);
    let before = pids(&status);
    assert_eq!(http(listen, "GET", "/").unwrap().0, 200);

    signal(&child, "HUP");
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            let now = pids(&status);
            ready(&status) && now.len() == 2 && now.iter().all(|p| !before.contains(p))
        }),
        "SIGHUP did not replace both workers: {status}"
    );
    let after = pids(&status);

    let slow = std::thread::spawn(move || http(listen, "GET", "/slow?ms=1500"));
    assert!(poll(Duration::from_secs(30), || {
        http(admin, "GET", "/status").is_ok_and(|r| r.1.contains("\"in_flight\": 1"))
    }));
    signal(&child, "TERM");
    let (code, body) = slow.join().unwrap().expect("slow request answered");
    assert_eq!(code, 200, "{body}");
    let exit = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "scalpel serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(exit.code(), Some(0));
    for pid in after {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} outlived serve"
        );
    }
    let out = out_lines.join().unwrap();
    assert!(
        out.iter()
            .any(|l| l.starts_with("[web#0] worker 0 listening on ")),
        "no prefixed worker output: {out:?}"
    );
    let err = err_lines.join().unwrap();
    assert!(err.iter().any(|l| l.contains("worker reloaded")), "{err:?}");
    assert!(
        err.iter().any(|l| l.contains("all workers stopped")),
        "{err:?}"
    );
}

/// A balancer killed with SIGKILL cannot stop its workers; the kernel does
/// (PR_SET_PDEATHSIG): no worker is left holding its port.
#[test]
fn workers_die_with_a_sigkilled_balancer() {
    let (_dir, mut child, _listen, admin) = spawn_two_node_workers();
    // Drain the pipes (closed, the workers' forwarded output would fail with EPIPE).
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let drains = [
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink())),
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink())),
    ];
    let status = wait_both_ready(admin);
    let workers = pids(&status);
    assert_eq!(workers.len(), 2, "{status}");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    drop(drains); // detached: they end with the pipes, closed by the kill
    assert!(
        poll(Duration::from_secs(10), || {
            // Gone, or a zombie waiting for whoever inherited it to reap it.
            workers.iter().all(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                    s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
                })
            })
        }),
        "workers {workers:?} outlived a SIGKILLed balancer"
    );
}

//! `scalpel serve` as a process: bad configs exit 2 with one line naming file and line;
//! SIGHUP reloads (re-reading the config; a typo is refused with its line); SIGTERM
//! drains an in-flight request, stops the workers, exits 0.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_scalpel");

pub(crate) use scalpel_testkit::peers::app_js;
pub(crate) use scalpel_testkit::raw::http;
pub(crate) use scalpel_testkit::{
    KillOnDrop as Running, free_base, free_port, metric, poll, process_alive, wait_exit,
};

/// Sends signal `sig` (`"HUP"`, `"TERM"`, …) to `child`.
pub(crate) fn signal(child: &Child, sig: &str) {
    scalpel_testkit::signal(child.id(), sig);
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
fn the_example_configs_pass_check() {
    for name in ["serve.toml", "direct.toml"] {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/serve")
            .join(name);
        let out = Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&example)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
    }
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

/// Issue 14 — a config with a typo sent by SIGHUP is refused: the log names the file and
/// line, `POST /reload` answers 422 with the same, and the running config keeps serving
/// with the same workers. Fixed, the next SIGHUP applies it (two workers become three).
#[test]
fn sighup_with_a_typo_is_refused_with_file_and_line_and_the_old_config_serves() {
    let (listen, admin, base) = (free_port(), free_port(), free_base(6));
    let good = app_toml(listen, admin, base, 2, "");
    let (dir, child, err) = spawn_serve(&good, &[]);
    let before = pids(&wait_both_ready_n(admin, 2));
    let path = dir.path().join("serve.toml");
    let typo = good.replace("workers = 2", "workers = 3\nport_bass = 1");
    let line = typo
        .lines()
        .position(|l| l.starts_with("port_bass"))
        .unwrap()
        + 1;
    let at = format!("{}:{line}", path.display());
    std::fs::write(&path, &typo).unwrap();
    signal(&child, "HUP");
    assert!(
        poll(Duration::from_secs(30), || {
            err.lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("reload refused") && l.contains(&at) && l.contains("port_bass"))
        }),
        "no log line names {at}: {:?}",
        err.lock().unwrap()
    );
    let (code, body) = http(admin, "POST", "/reload").unwrap();
    assert_eq!(code, 422, "{body}");
    let (kind, detail) = scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the toolkit's error body: {body}"));
    assert_eq!(kind, "config_invalid");
    assert!(
        detail.contains(&at) && detail.contains("port_bass"),
        "{body}"
    );
    let status = http(admin, "GET", "/status").unwrap().1;
    assert_eq!(pids(&status), before, "workers changed: {status}");
    assert_eq!(http(listen, "GET", "/").unwrap().0, 200);

    std::fs::write(&path, good.replace("workers = 2", "workers = 3")).unwrap();
    signal(&child, "HUP");
    let mut status = String::new();
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            let now = if status.is_empty() {
                Vec::new()
            } else {
                pids(&status)
            };
            status.matches("\"state\": \"ready\"").count() == 3
                && now.len() == 3
                && now.iter().all(|p| !before.contains(p))
        }),
        "the fixed config was not applied: {status}"
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
            workers.iter().all(|&pid| !process_alive(pid as u32))
        }),
        "workers {workers:?} outlived a SIGKILLed balancer"
    );
}

/// Starts `scalpel serve` on `toml` (written to a temp dir) with stdout and stderr
/// piped; stderr is collected by a thread (its lines so far in the returned buffer).
pub(crate) fn spawn_serve(
    toml: &str,
    env: &[(&str, &str)],
) -> (
    tempfile::TempDir,
    Running,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = Running(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&path)
            .env("SCALPEL_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = scalpel_testkit::collect_lines(child.stderr.take().unwrap());
    (dir, child, lines)
}

pub(crate) fn app_toml(listen: u16, admin: u16, base: u16, workers: u16, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin = \"127.0.0.1:{admin}\"\n{extra}\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"{}\"]\nworkers = {workers}\nport_base = {base}\n",
        app_js().display()
    )
}

/// Issue 18, item 16 — serve's stdout and stderr go to readers that stopped (full
/// pipes), a worker prints 100,000 lines and serve logs at trace level: supervision and
/// the admin endpoints go on (before, `/status` hung and a killed worker was noticed only
/// seconds later), the lines past the buffers are dropped and counted.
#[test]
fn a_stalled_stdout_reader_never_freezes_supervision() {
    let (listen, admin, base) = (free_port(), free_port(), free_base(4));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, app_toml(listen, admin, base, 2, "")).unwrap();
    let mut child = Running(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&path)
            .env("SCALPEL_LOG", "trace")
            .env("FLOOD", "100000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Both piped, never read.
    let _stdout = child.stdout.take().unwrap();
    let _stderr = child.stderr.take().unwrap();
    let status = wait_both_ready(admin);
    let victim = pids(&status)[0];
    // Log volume: every request is dozens of trace lines.
    for _ in 0..300 {
        assert_eq!(http(listen, "GET", "/").unwrap().0, 200);
    }
    Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap();
    let mut status = String::new();
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            let now = pids(&status);
            now.len() == 2
                && !now.contains(&victim)
                && status.matches("\"state\": \"ready\"").count() == 2
        }),
        "the killed worker was not replaced: {status}"
    );
    let (_, metrics) = http(admin, "GET", "/metrics").unwrap();
    let dropped = metric(
        &metrics,
        "scalpel_serve_worker_log_lines_dropped_total{app=\"web\"}",
    );
    assert!(dropped > 0.0, "{metrics}");
    signal(&child, "KILL");
    let _ = child.wait();
}

/// Issue 18, item 20 — a second SIGTERM cuts the drain short: a request that would hold
/// the drain for ten minutes, and a worker that would take ten minutes to stop, do not
/// hold scalpel once the signal comes again.
#[test]
fn a_second_signal_cuts_the_drain_short() {
    let (listen, admin, base) = (free_port(), free_port(), free_base(4));
    let toml = app_toml(
        listen,
        admin,
        base,
        1,
        "drain_timeout = \"10m\"\nupstream_timeout = \"20m\"\n",
    ) + "stop_grace = \"10m\"\n";
    let (_dir, mut child, err) = spawn_serve(&toml, &[]);
    let mut out = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let status = wait_both_ready_n(admin, 1);
    let worker = pids(&status)[0];
    let slow = std::thread::spawn(move || http(listen, "GET", "/slow?ms=600000"));
    assert!(poll(Duration::from_secs(30), || {
        http(admin, "GET", "/status").is_ok_and(|r| r.1.contains("\"in_flight\": 1"))
    }));
    signal(&child, "TERM");
    assert!(
        poll(Duration::from_secs(30), || err
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("draining"))),
        "{:?}",
        err.lock().unwrap()
    );
    signal(&child, "TERM");
    let exit = wait_exit(&mut child, Duration::from_secs(60));
    assert!(exit.is_some(), "still draining after a second SIGTERM");
    assert_eq!(exit.unwrap().code(), Some(0));
    assert!(
        poll(Duration::from_secs(10), || !Path::new(&format!(
            "/proc/{worker}"
        ))
        .exists()
            || std::fs::read_to_string(format!("/proc/{worker}/stat"))
                .is_ok_and(|s| s
                    .rsplit_once(") ")
                    .is_some_and(|(_, r)| r.starts_with('Z')))),
        "worker {worker} outlived serve"
    );
    let err = err.lock().unwrap().clone();
    assert!(err.iter().any(|l| l.contains("second signal")), "{err:?}");
    // Logs to a pipe: no colour codes (issue 18, item 20).
    assert!(err.iter().all(|l| !l.contains('\u{1b}')), "{err:?}");
    drop(slow);
}

/// Polls `/status` until `n` workers are ready; the last body.
fn wait_both_ready_n(admin: u16, n: usize) -> String {
    let mut status = String::new();
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            status.matches("\"state\": \"ready\"").count() == n
        }),
        "not ready: {status}"
    );
    status
}

/// Issue 18, item 18 — `--check` refuses what would fail at start, in one line naming
/// the file and line: a missing cwd, a program that does not exist. And a start with a
/// missing cwd blames the cwd, not the program.
#[test]
fn check_refuses_a_missing_cwd_or_program_and_start_blames_the_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let base = "[server]\nlisten = \"127.0.0.1:18080\"\nadmin = \"127.0.0.1:18090\"\n\n[[app]]\nname = \"web\"\n";
    for (app, want) in [
        (
            "command = [\"python3\", \"app.py\"]\ncwd = \"missing-dir\"\nport_base = 3001\n",
            ":8: app `web`: cwd",
        ),
        (
            "command = [\"no-such-program-xyz\"]\nport_base = 3001\n",
            ":7: app `web`: program `no-such-program-xyz` not found on PATH",
        ),
    ] {
        std::fs::write(&path, format!("{base}{app}")).unwrap();
        for check in [true, false] {
            let mut cmd = Command::new(BIN);
            cmd.arg("serve");
            if check {
                cmd.arg("--check");
            }
            let out = cmd.arg("--config").arg(&path).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "check={check}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(want),
                "check={check}: expected {want:?} in {err:?}"
            );
            assert!(!err.contains("python3\": No such file"), "{err}");
        }
    }
}

/// Issue 18, item 20 — an error says its cause once (before: "Address already in use
/// (os error 98): Address already in use (os error 98)"), and logs written to a pipe or
/// a file carry no colour codes.
#[test]
fn errors_name_their_cause_once_and_logs_have_no_colour_codes() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, app_toml(port, free_port(), free_base(2), 1, "")).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .env("SCALPEL_LOG", "info")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("cannot listen"))
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(line.matches("in use").count(), 1, "{line}");
    assert!(!err.contains('\u{1b}'), "colour codes on a pipe: {err:?}");
}

/// Issue 18, item 15 (first reproduction) — a grandchild of a SIGKILLed serve (a `sh -c`
/// command's child) still holds a worker's port. The next serve names it and does not
/// take it for its worker (before: "ready" 3 ms after the spawn, and every request went
/// to the leftover).
#[test]
fn a_leftover_grandchild_on_a_port_is_named_not_served() {
    let (listen, admin, base) = (free_port(), free_port(), free_base(2));
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin = \"127.0.0.1:{admin}\"\n\n[[app]]\nname = \"web\"\ncommand = [\"sh\", \"-c\", \"node {} ; true\"]\nworkers = 1\nport_base = {base}\n[app.restart]\nbackoff_ms = 10\n",
        app_js().display()
    );
    let (_dir, mut child, _err) = spawn_serve(&toml, &[]);
    let mut out = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    wait_both_ready_n(admin, 1);
    signal(&child, "KILL");
    let _ = child.wait();
    // sh died with serve (PR_SET_PDEATHSIG); its node child did not.
    let leftover = {
        let mut pid = None;
        assert!(poll(Duration::from_secs(10), || {
            pid = pid_on(base);
            pid.is_some()
        }));
        pid.unwrap()
    };
    let _leftover_killed_at_the_end = KillPid(leftover);
    let (_dir2, mut second, err) = spawn_serve(&toml, &[]);
    let mut out = second.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let status = wait_both_ready_n(admin, 1);
    let served: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        served["apps"][0]["workers"][0]["port"],
        base + 1,
        "{status}"
    );
    let (_, body) = http(listen, "GET", "/pid").unwrap();
    assert_ne!(
        body.trim(),
        leftover.to_string(),
        "a request reached the leftover"
    );
    let err_lines = err.lock().unwrap().clone();
    assert!(
        err_lines
            .iter()
            .any(|l| l.contains(&format!("port {base} is already in use"))
                && l.contains(&format!("pid {leftover}"))),
        "{err_lines:?}"
    );
    signal(&second, "TERM");
    let _ = wait_exit(&mut second, Duration::from_secs(60));
}

/// A process the test did not start itself (a leftover it provoked), killed at the end.
struct KillPid(u64);

impl Drop for KillPid {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}

/// Issue 18, item 15 (second reproduction) — a second serve with the same port_base: its
/// workers never count the first one's as their own. They start on the ports the first
/// does not hold; and a reload of the first, whose next ports the second now holds,
/// fails saying so, the first's workers serving on.
#[test]
fn two_serves_with_the_same_ports_never_serve_each_others_workers() {
    let base = free_base(4);
    let (l1, a1, l2, a2) = (free_port(), free_port(), free_port(), free_port());
    let (_d1, mut first, _e1) = spawn_serve(&app_toml(l1, a1, base, 1, ""), &[]);
    let mut out = first.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let s1 = wait_both_ready_n(a1, 1);
    let (_d2, mut second, _e2) = spawn_serve(
        &(app_toml(l2, a2, base, 1, "") + "[app.restart]\nbackoff_ms = 10\n"),
        &[],
    );
    let mut out = second.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let s2 = wait_both_ready_n(a2, 1);
    let (p1, p2) = (pids(&s1)[0], pids(&s2)[0]);
    assert_ne!(p1, p2);
    assert_eq!(http(l1, "GET", "/pid").unwrap().1.trim(), p1.to_string());
    assert_eq!(http(l2, "GET", "/pid").unwrap().1.trim(), p2.to_string());
    let (code, body) = http(a1, "POST", "/reload").unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("\"reloaded\": false") && body.contains("already in use"),
        "{body}"
    );
    // The toolkit's one error body, with the per-slot errors beside it.
    let (kind, _) = scalpel_http::parse_error_body(body.as_bytes()).expect("the one error body");
    assert_eq!(kind, "reload_failed", "{body}");
    assert_eq!(
        http(l1, "GET", "/pid").unwrap().1.trim(),
        p1.to_string(),
        "the first's worker serves on"
    );
    for c in [&first, &second] {
        signal(c, "TERM");
    }
    let _ = wait_exit(&mut first, Duration::from_secs(60));
    let _ = wait_exit(&mut second, Duration::from_secs(60));
}

/// The pid of the test app listening on `port` (it answers `/pid`).
fn pid_on(port: u16) -> Option<u64> {
    http(port, "GET", "/pid")
        .ok()
        .and_then(|(_, b)| b.trim().parse().ok())
}

/// A self-signed certificate for `localhost` with common name `cn`, written to
/// `dir/cert.pem` and `dir/key.pem`.
fn write_cert(dir: &Path, cn: &str) {
    scalpel_testkit::write_self_signed(dir, cn);
}

/// `--check` reads the TLS files: a key that does not match its certificate, a missing
/// certificate and a key file without a key are each one line, exit 2; good files pass.
/// Paths are relative to the config's directory.
#[test]
fn tls_check_reports_each_bad_file_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "one");
    let stray = tempfile::tempdir().unwrap();
    write_cert(stray.path(), "stray");
    std::fs::copy(stray.path().join("key.pem"), dir.path().join("stray.pem")).unwrap();
    std::fs::write(dir.path().join("garbage.pem"), "not a key\n").unwrap();
    let path = dir.path().join("serve.toml");
    let check = |tls: &str, admin_tls: &str| {
        let mut extra = format!("[server.tls]\n{tls}\n");
        if !admin_tls.is_empty() {
            extra.push_str(&format!("[server.admin_tls]\n{admin_tls}\n"));
        }
        std::fs::write(&path, app_toml(8443, 9090, 3001, 1, &extra)).unwrap();
        let out = Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = check("cert = \"cert.pem\"\nkey = \"key.pem\"", "");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("tls"), "{out}");

    let (code, _, err) = check("cert = \"cert.pem\"\nkey = \"stray.pem\"", "");
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("server.tls: the key") && err.contains("does not belong to the certificate"),
        "{err}"
    );

    let (code, _, err) = check(
        "cert = \"cert.pem\"\nkey = \"key.pem\"",
        "cert = \"missing.pem\"\nkey = \"garbage.pem\"",
    );
    assert_eq!(code, Some(2));
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.contains("server.admin_tls: cannot use") && err.contains("missing.pem: No such file"),
        "{err}"
    );
    assert!(
        err.contains("server.admin_tls: cannot use")
            && err.contains("garbage.pem: no usable PRIVATE KEY block"),
        "{err}"
    );
}

/// One loader for every TLS listener (`scalpel_http::server_tls`): the same bad files
/// given to `scalpel serve --check` (`[server.tls]`) and to `scalpel shadow proxy`
/// (`--tls-cert`/`--tls-key`) read the same — a key that is not the certificate's, an
/// empty certificate file, a key file without a key. Each names the file and the reason.
#[test]
fn serve_and_shadow_report_a_bad_tls_file_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "one");
    let stray = tempfile::tempdir().unwrap();
    write_cert(stray.path(), "stray");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let stray_key = stray.path().join("key.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let cases = [
        (&cert, &stray_key, "does not belong to the certificate"),
        (&empty, &key, "no CERTIFICATE block"),
        (&cert, &cert, "no usable PRIVATE KEY block"),
    ];
    let config = dir.path().join("serve.toml");
    for (c, k, why) in cases {
        let tls = format!(
            "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            c.display(),
            k.display()
        );
        std::fs::write(&config, app_toml(8443, 9090, 3001, 1, &tls)).unwrap();
        let serve = Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let serve_err = String::from_utf8_lossy(&serve.stderr).into_owned();
        assert_eq!(serve.status.code(), Some(2), "{serve_err}");
        // Port 9 (discard) is never dialled: the files are refused before listening.
        let shadow = Command::new(BIN)
            .args(["shadow", "proxy", "--listen", "127.0.0.1:0"])
            .args(["--primary", "http://127.0.0.1:9"])
            .args(["--candidate", "http://127.0.0.1:9"])
            .arg("--tls-cert")
            .arg(c)
            .arg("--tls-key")
            .arg(k)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let shadow_err = String::from_utf8_lossy(&shadow.stderr).into_owned();
        assert_eq!(shadow.status.code(), Some(2), "{shadow_err}");
        let said = |err: &str, after: &str| -> String {
            let line = err.lines().next().unwrap_or_default();
            line.split_once(after)
                .map(|(_, p)| p.to_string())
                .unwrap_or_else(|| panic!("no `{after}` in {err}"))
        };
        let by_serve = said(&serve_err, "server.tls: ");
        let by_shadow = said(&shadow_err, "scalpel: ");
        assert_eq!(
            by_serve, by_shadow,
            "serve: {serve_err}\nshadow: {shadow_err}"
        );
        let named = if why.contains("CERTIFICATE") { c } else { k };
        assert!(
            by_serve.contains(why) && by_serve.contains(&*named.to_string_lossy()),
            "{by_serve}"
        );
    }
}

/// SIGHUP swaps the certificate: a TLS connection opened before it (curl, HTTP/2, a
/// slow request in flight at the signal) carries a second request after it, and a new
/// handshake (openssl s_client) shows the new certificate's common name.
#[test]
fn sighup_swaps_the_certificate_without_dropping_open_connections() {
    let certs = tempfile::tempdir().unwrap();
    write_cert(certs.path(), "serve-one");
    let (listen, admin, base) = (free_port(), free_port(), free_base(4));
    let tls = format!(
        "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        certs.path().join("cert.pem").display(),
        certs.path().join("key.pem").display()
    );
    let (_dir, child, _err) = spawn_serve(&app_toml(listen, admin, base, 1, &tls), &[]);
    let mut status = String::new();
    assert!(
        poll(Duration::from_secs(60), || {
            status = http(admin, "GET", "/status")
                .map(|r| r.1)
                .unwrap_or_default();
            status.contains("\"state\": \"ready\"")
        }),
        "not ready: {status}"
    );
    let subject = || {
        let out = Command::new("openssl")
            .args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{listen}"))
            .args(["-servername", "localhost"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(subject().contains("CN = serve-one"), "{}", subject());

    // One connection, two requests: the first in flight when the signal comes.
    let resolve = format!("localhost:{listen}:127.0.0.1");
    let base_url = format!("https://localhost:{listen}");
    let ca = certs.path().join("cert.pem");
    let curl = Command::new("curl")
        .args([
            "-sS",
            "--http2",
            "--max-time",
            "60",
            "--resolve",
            &resolve,
            "--cacert",
        ])
        .arg(&ca)
        .args(["-w", "\n%{http_code} %{num_connects} %{http_version}\n"])
        .arg(format!("{base_url}/slow?ms=3000"))
        .arg(format!("{base_url}/echo"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        poll(Duration::from_secs(30), || {
            http(admin, "GET", "/status")
                .map(|r| r.1.contains("\"in_flight\": 1"))
                .unwrap_or(false)
        }),
        "the slow request never arrived"
    );
    write_cert(certs.path(), "serve-two");
    signal(&child, "HUP");
    let out = curl.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summaries: Vec<&str> = text.lines().filter(|l| l.ends_with(" 2")).collect();
    // 200, one new connection for the first request, none (reused) for the second.
    assert_eq!(summaries, ["200 1 2", "200 0 2"], "{text}");
    assert!(
        poll(Duration::from_secs(10), || subject()
            .contains("CN = serve-two")),
        "{}",
        subject()
    );
}

/// Issue 14 — `--check` refuses what a direct app cannot do (a route, split or mirror to
/// it, a per-request setting, no `listen`), in one line with the file, line and reason.
#[test]
fn check_refuses_routes_and_per_request_settings_on_a_direct_app() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let base = "[server]\nlisten = \"127.0.0.1:18080\"\nadmin = \"127.0.0.1:18090\"\n\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"app.js\"]\nport_base = 3001\nmode = \"direct\"\n";
    for (rest, want) in [
        (
            "listen = \"127.0.0.1:18081\"\n\n[[route]]\nprefix = \"/\"\napp = \"web\"\n",
            ":14: route names app `web`, which is mode = \"direct\": its clients connect to its own listen address and never pass the balancer",
        ),
        (
            "listen = \"127.0.0.1:18081\"\nbalance = \"round_robin\"\n",
            ":11: app `web`: balance is a per-request setting",
        ),
        (
            "listen = \"127.0.0.1:18081\"\navoid_stalled = \"1s\"\n",
            ":11: app `web`: avoid_stalled is a per-request setting",
        ),
        ("", "app `web`: mode = \"direct\" needs `listen`"),
    ] {
        std::fs::write(&path, format!("{base}{rest}")).unwrap();
        let out = Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "expected {want:?} in {err:?}");
    }
    // The same app with its listen address and nothing per-request passes.
    std::fs::write(&path, format!("{base}listen = \"127.0.0.1:18081\"\n")).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 14 (sticky to a worker) — `--check` refuses `sticky_worker` on a direct app (its
/// requests never pass the balancer) and a malformed key, in one line with the file, line
/// and reason; a well-formed key on a proxy app passes.
#[test]
fn check_refuses_sticky_worker_on_a_direct_app_and_a_malformed_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let base = "[server]\nlisten = \"127.0.0.1:18080\"\nadmin = \"127.0.0.1:18090\"\n\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"app.js\"]\nport_base = 3001\n";
    let check = |text: String| {
        std::fs::write(&path, text).unwrap();
        Command::new(BIN)
            .args(["serve", "--check", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    for (rest, want) in [
        (
            "mode = \"direct\"\nlisten = \"127.0.0.1:18081\"\nsticky_worker = \"ip\"\n",
            ":11: app `web`: sticky_worker is a per-request setting, and a direct app's requests never pass through the balancer",
        ),
        (
            "sticky_worker = \"cookie:\"\n",
            ":9: app `web`: bad sticky_worker `cookie:`: expected header:NAME, cookie:NAME, path:N (N ≥ 1) or ip",
        ),
        (
            "sticky_worker = \"session\"\n",
            ":9: app `web`: bad sticky_worker `session`",
        ),
    ] {
        let out = check(format!("{base}{rest}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let want = format!("{}{want}", path.display());
        assert!(err.contains(&want), "expected {want:?}\n     got {err:?}");
    }
    for key in ["cookie:sid", "header:x-user", "ip", "path:2"] {
        let out = check(format!("{base}sticky_worker = \"{key}\"\n"));
        assert!(
            out.status.success(),
            "{key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

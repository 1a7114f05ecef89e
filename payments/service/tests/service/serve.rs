//! The `payments serve` process: signals and logs, on a real ledger file.

use crate::util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use util::heads::{CODES, request_heads};
use util::{Client, Service, exchange, exchange_pipelined, generate, payments_bin};

fn ledger(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("ledger.db");
    let (_, err, status) =
        generate(&["--users", "30", "--seed", "5", "--db", db.to_str().unwrap()]);
    assert!(status.success(), "{err}");
    db
}

/// Waits until process `pid` has `path` open: the service has begun loading (it opens
/// the ledger only after installing its signal handlers).
fn wait_open_file(pid: u32, path: &Path) {
    let dir = format!("/proc/{pid}/fd");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if std::fs::read_link(e.path()).is_ok_and(|t| t == path) {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("pid {pid} never opened {}", path.display());
}

/// Before the fix the handlers were installed after loading: SIGTERM during a long load
/// killed the process by signal instead of the SPEC's exit 0.
#[test]
fn sigterm_while_loading_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path());
    // Hold the ledger exclusively, as a long write by another process would: the
    // service's first read waits in SQLite's busy handler, in the middle of loading.
    let lock = Connection::open(&db).unwrap();
    lock.execute_batch("PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT;")
        .unwrap();

    let child = Command::new(payments_bin())
        .args(["serve", "--db", db.to_str().unwrap(), "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_open_file(child.id(), &db.canonicalize().unwrap());
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        stderr,
        "payments: stopped by a signal while loading the ledger\n"
    );
    assert!(
        out.stdout.is_empty(),
        "it never became ready: {:?}",
        out.stdout
    );
    drop(lock);
}

/// Log lines went to files with ANSI colour codes (`\x1b[32m INFO\x1b[0m`).
#[test]
fn logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path());
    let service = Service::start(
        "rust",
        payments_bin().as_ref(),
        &["serve", "--db", db.to_str().unwrap(), "--port", "0"],
        dir.path(),
    );
    assert_eq!(Client::new(&service.addr).get("/healthz").status, 200);
    let log = dir.path().join("rust.stderr");
    let status = service.stop();
    assert!(status.success());
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.contains("shutting down"),
        "the shutdown is logged: {text:?}"
    );
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file: {text:?}"
    );
}

/// Every case of the request-head table against the real binary: hyper answered some of
/// them with empty 400/414/431 bodies and silently dropped a `#fragment` (a 200 for
/// `/balance#x`). The Go service gets the same table (and the cross test compares both).
#[test]
fn every_request_head_of_the_table_gets_its_json_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let ids = dir.path().join("ids.txt");
    let (_, err, status) = generate(&[
        "--users",
        "20",
        "--seed",
        "5",
        "--db",
        db.to_str().unwrap(),
        "--ids-out",
        ids.to_str().unwrap(),
    ]);
    assert!(status.success(), "{err}");
    let id = std::fs::read_to_string(&ids)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let service = Service::start(
        "rust",
        payments_bin().as_ref(),
        &["serve", "--db", db.to_str().unwrap(), "--port", "0"],
        dir.path(),
    );
    for case in request_heads(&id) {
        let answer = exchange(&service.addr, &case.raw);
        let text = answer.text();
        assert_eq!(
            answer.content_type.as_deref(),
            Some("application/json"),
            "line {}: {text}",
            case.line
        );
        match &case.expect {
            Some((status, code)) => {
                assert_eq!(answer.status, *status, "line {}: {text}", case.line);
                let head = case.raw.starts_with(b"HEAD ");
                let prefix = format!(r#"{{"error":{{"code":"{code}","#);
                assert_eq!(
                    !head,
                    text.starts_with(&prefix),
                    "line {}: {text}",
                    case.line
                );
            }
            None => assert!(
                !CODES
                    .iter()
                    .any(|c| text.contains(&format!(r#""code":"{c}""#))),
                "line {}: refused: {text}",
                case.line
            ),
        }
    }
    // Requests pipelined before a refused head are answered first, then the refusal.
    let raw = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz#x HTTP/1.1\r\nHost: x\r\n\r\n";
    let answers = exchange_pipelined(&service.addr, raw, 2);
    assert_eq!((answers[0].status, answers[1].status), (200, 400));
    assert!(service.stop().success());
}

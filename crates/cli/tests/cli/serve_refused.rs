//! Issue 14 — direct mode on a machine whose kernel refuses `pidfd_getfd(2)` (a container
//! runtime's seccomp profile, Yama) or `pidfd_open(2)` (older seccomp profiles answer
//! `EPERM` to every system call they do not know): the real `scalpel serve` runs under a
//! seccomp filter that answers `EPERM` to that one system call, two real Node workers serve a keep-alive
//! load, and one freezes (its event loop blocked). serve cannot take the frozen worker's
//! accepted connections over, and must fall back to what it did before the rescue: replace
//! the worker, send new connections to the live one, say so in one log line and count the
//! connections it could not take, without a hang or a panic — and the only requests that
//! fail are those on the frozen worker's own connections.
//!
//! The filter is written by hand (seven classic-BPF instructions through `libc`, installed
//! in the child between fork and exec): a crate such as `seccompiler` would bring a rule
//! compiler and a dependency for one rule that this file states in full.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scalpel_testkit::raw::split_response;

use crate::serve_cli::{Running, app_js, free_base, free_port, http, poll, wait_exit};

/// `pidfd_open`'s and `pidfd_getfd`'s numbers: the same in the generic table (aarch64)
/// and on x86_64.
const SYS_PIDFD_OPEN: u32 = 434;
const SYS_PIDFD_GETFD: u32 = 438;
/// `AUDIT_ARCH_*` of this build's system-call table: the filter judges only it.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// A classic-BPF seccomp program: system call `nr` → `EPERM`, everything else allowed.
/// `seccomp_data` begins with `nr` (offset 0) and `arch` (offset 4).
fn deny(nr: u32) -> Vec<libc::sock_filter> {
    let op = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let (ld, jeq, ret) = (
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        libc::BPF_RET | libc::BPF_K,
    );
    vec![
        op(ld, 4, 0, 0),
        op(jeq, AUDIT_ARCH, 1, 0),
        op(ret, libc::SECCOMP_RET_ALLOW, 0, 0), // another ABI's numbers: not judged
        op(ld, 0, 0, 0),
        op(jeq, nr, 0, 1),
        op(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32, 0, 0),
        op(ret, libc::SECCOMP_RET_ALLOW, 0, 0),
    ]
}

/// `scalpel serve --config PATH` under the filter denying system call `nr` (inherited by
/// its workers, which never call it), stderr collected by a thread.
fn spawn_filtered(path: &std::path::Path, nr: u32) -> (Running, Arc<Mutex<Vec<String>>>) {
    let filter = deny(nr);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scalpel"));
    cmd.args(["serve", "--config"])
        .arg(path)
        .env("SCALPEL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: runs in the forked child before exec: two `prctl` calls (async-signal-safe)
    // on a program built before the fork and borrowed, not allocated, here.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = Running(cmd.spawn().expect("spawn scalpel serve under seccomp"));
    let lines = scalpel_testkit::collect_lines(child.0.stderr.take().unwrap());
    (child, lines)
}

/// One `GET /pid` on a kept-alive connection: the answering pid.
fn get_pid(c: &mut TcpStream, close: bool) -> Result<u32, String> {
    let close = if close { "Connection: close\r\n" } else { "" };
    c.write_all(format!("GET /pid HTTP/1.1\r\nHost: t\r\n{close}\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(response) = split_response(&buf) {
            let (head, body) = response?;
            if !head.to_ascii_lowercase().starts_with("http/1.1 200") {
                return Err(format!("status: {head:?}"));
            }
            return body.trim().parse().map_err(|_| format!("body {body:?}"));
        }
        match c.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

/// A failed request of the load: the connection's local port and the pid that had
/// answered on it last.
#[derive(Debug, Clone)]
struct Failure {
    local_port: u16,
    last_pid: u32,
    error: String,
}

fn status(admin: u16) -> serde_json::Value {
    http(admin, "GET", "/status")
        .ok()
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or_default()
}

#[test]
fn direct_mode_a_refused_pidfd_getfd_still_replaces_the_frozen_worker_and_fails_only_its_connections()
 {
    refused(SYS_PIDFD_GETFD, "pidfd_getfd");
}

/// Refused earlier, before the worker is stopped: the same for the user.
#[test]
fn direct_mode_a_refused_pidfd_open_still_replaces_the_frozen_worker_and_fails_only_its_connections()
 {
    refused(SYS_PIDFD_OPEN, "pidfd_open");
}

/// Freezes a worker of a direct app under load with system call `nr` (`name`) refused,
/// and checks what a user must get (see the module doc).
fn refused(nr: u32, name: &str) {
    let (listen, admin, base) = (free_port(), free_port(), free_base(4));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nadmin = \"127.0.0.1:{admin}\"\n\n[[app]]\n\
             name = \"web\"\ncommand = [\"node\", \"{}\"]\nworkers = 2\nport_base = {base}\n\
             mode = \"direct\"\nlisten = \"127.0.0.1:{listen}\"\nstart_timeout = \"60s\"\n\
             stop_grace = \"2s\"\n",
            free_port(),
            app_js().display()
        ),
    )
    .unwrap();
    let (mut child, stderr) = spawn_filtered(&path, nr);
    let mut st = serde_json::Value::Null;
    assert!(
        poll(Duration::from_secs(60), || {
            st = status(admin);
            st["apps"][0]["workers"]
                .as_array()
                .is_some_and(|w| w.len() == 2 && w.iter().all(|w| w["state"] == "ready"))
        }),
        "not ready: {st}\n{}",
        stderr.lock().unwrap().join("\n")
    );
    let worker = |i: usize| {
        let w = &st["apps"][0]["workers"][i];
        (
            w["pid"].as_u64().unwrap() as u32,
            w["port"].as_u64().unwrap() as u16,
        )
    };
    let ((victim, victim_port), (other, _)) = (worker(0), worker(1));

    // Kept-alive load connections, at least two on each worker (the kernel picks).
    let mut conns: Vec<(TcpStream, u32)> = Vec::new();
    for _ in 0..200 {
        let on = |p: u32| conns.iter().filter(|c| c.1 == p).count();
        if on(victim) >= 2 && on(other) >= 2 {
            break;
        }
        let mut c = connect(listen);
        let pid = get_pid(&mut c, false).expect("a first request");
        conns.push((c, pid));
    }
    let on_victim = conns.iter().filter(|c| c.1 == victim).count();
    assert!(on_victim >= 2, "no load connection reached the victim");

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<Failure>::new()));
    // New connections: (begun after the freeze, local port, answering pid or the error).
    let fresh = Arc::new(Mutex::new(Vec::<(bool, u16, Result<u32, String>)>::new()));
    let frozen = Arc::new(AtomicBool::new(false));
    // Successes per load connection (by index) once the worker was replaced.
    let after = Arc::new(Mutex::new(HashMap::<usize, u64>::new()));
    let replaced = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, (mut c, mut last_pid)) in conns.into_iter().enumerate() {
        let (stop, failures, after, replaced) = (
            stop.clone(),
            failures.clone(),
            after.clone(),
            replaced.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match get_pid(&mut c, false) {
                    Ok(pid) => {
                        last_pid = pid;
                        if replaced.load(Ordering::Relaxed) {
                            *after.lock().unwrap().entry(i).or_default() += 1;
                        }
                    }
                    Err(error) => {
                        failures.lock().unwrap().push(Failure {
                            local_port: c.local_addr().map(|a| a.port()).unwrap_or(0),
                            last_pid,
                            error,
                        });
                        c = connect(listen);
                        last_pid = 0;
                    }
                }
            }
        }));
    }
    {
        let (stop, fresh, frozen) = (stop.clone(), fresh.clone(), frozen.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let began_frozen = frozen.load(Ordering::Relaxed);
                let mut c = connect(listen);
                let port = c.local_addr().map(|a| a.port()).unwrap_or(0);
                let r = get_pid(&mut c, true);
                fresh.lock().unwrap().push((began_frozen, port, r));
            }
        }));
    }

    // Freeze the victim: a request on its health port blocks its event loop. Once the
    // victim has read it — acknowledged by its kernel (nothing in our send queue) and
    // nothing left in its receive queue: Node runs the handler from that read — it
    // accepts nothing more, and the connections it holds are the ones that close with it.
    let mut block = connect(victim_port);
    block
        .write_all(b"GET /block?ms=600000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let block_port = block.local_addr().unwrap().port();
    assert!(
        poll(Duration::from_secs(30), || {
            scalpel_procstat::tcp_queues(victim_port).is_ok_and(|q| {
                let read = q.iter().any(|q| {
                    q.local_port == victim_port && q.remote_port == block_port && q.rx_queue == 0
                });
                let delivered = q.iter().any(|q| {
                    q.local_port == block_port && q.remote_port == victim_port && q.tx_queue == 0
                });
                read && delivered
            })
        }),
        "the victim did not read the blocking request"
    );
    std::thread::sleep(Duration::from_millis(300)); // the handler runs on from the read
    let held: HashSet<u16> = scalpel_procstat::connections_held(victim, listen)
        .expect("the victim's connections")
        .iter()
        .map(|h| h.remote_port)
        .collect();
    frozen.store(true, Ordering::Relaxed);
    assert!(!held.is_empty(), "the frozen victim holds no connection");

    // Replaced: a new process in its slot, ready, and the victim gone.
    let replaced_ok = poll(Duration::from_secs(60), || {
        let st = status(admin);
        let w = &st["apps"][0]["workers"][0];
        w["state"] == "ready"
            && w["pid"].as_u64().is_some_and(|p| p as u32 != victim)
            && !std::path::Path::new(&format!("/proc/{victim}")).exists()
    });
    replaced.store(true, Ordering::Relaxed);
    let log = || stderr.lock().unwrap().join("\n");
    assert!(
        replaced_ok,
        "the frozen worker was not replaced:\n{}",
        log()
    );
    // The load goes on: every load connection answered again after the replacement.
    let n = threads.len() - 1;
    let all_again = poll(Duration::from_secs(30), || {
        let a = after.lock().unwrap();
        a.len() == n && a.values().all(|&k| k >= 3)
    });
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        all_again,
        "the load stalled after the replacement: {:?}",
        after.lock().unwrap()
    );

    // One log line names the refusal; the restart line counts what was not taken.
    let lines = stderr.lock().unwrap().clone();
    let refusals: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("cannot take over the stuck worker's accepted connections"))
        .collect();
    assert_eq!(refusals.len(), 1, "{}", lines.join("\n"));
    assert!(
        refusals[0].contains(&format!("{name}: ")) && refusals[0].contains("os error 1"),
        "the line does not name the refused call: {}",
        refusals[0]
    );
    assert!(
        lines.iter().any(|l| l.contains("worker restart")
            && l.contains(&format!("pid={victim}"))
            && l.contains(&format!("{} not taken", held.len()))),
        "no restart line with the count:\n{}",
        lines.join("\n")
    );
    assert!(
        !lines.iter().any(|l| l.contains("panicked")),
        "{}",
        lines.join("\n")
    );
    // /metrics counts the connections that could not be taken.
    let (_, m) = http(admin, "GET", "/metrics").expect("/metrics");
    let at = |outcome: &str| {
        let key = format!(
            "scalpel_serve_direct_connections_at_replacement_total{{app=\"web\",outcome=\"{outcome}\"}}"
        );
        scalpel_testkit::metric_value(&m, &key).unwrap_or(-1.0)
    };
    assert_eq!(at("not_taken"), held.len() as f64, "{m}");
    assert_eq!(
        at("rescued") + at("half_read") + at("read_after_answer"),
        0.0,
        "{m}"
    );

    // The failed requests were the frozen worker's own connections, one each at most.
    let failures = failures.lock().unwrap().clone();
    assert!(
        !failures.is_empty(),
        "no request failed on the frozen worker's connections"
    );
    for f in &failures {
        // A close or a reset when the worker is killed, never a wrong answer.
        assert!(
            held.contains(&f.local_port) && f.last_pid == victim && !f.error.starts_with("status"),
            "a request failed off the frozen worker's connections: {f:?}\nheld: {held:?}"
        );
    }
    let ports: HashSet<u16> = failures.iter().map(|f| f.local_port).collect();
    assert_eq!(ports.len(), failures.len(), "{failures:?}");
    // New connections: one begun after the freeze neither failed nor reached the frozen
    // worker; one begun before may have been among its own.
    let fresh = fresh.lock().unwrap().clone();
    assert!(
        fresh.iter().any(|f| f.0),
        "no connection was begun after the freeze"
    );
    for (after_freeze, port, r) in &fresh {
        let ok = if *after_freeze {
            r.as_ref().is_ok_and(|&p| p != victim)
        } else {
            r.is_ok() || held.contains(port)
        };
        assert!(
            ok,
            "a new connection: {r:?} (victim {victim}, after the freeze: {after_freeze})"
        );
    }

    // No hang: it still stops on SIGTERM, with exit 0.
    crate::serve_cli::signal(&child.0, "TERM");
    let exit = wait_exit(&mut child.0, Duration::from_secs(60));
    assert!(
        exit.is_some_and(|s| s.success()),
        "{exit:?}\n{}",
        stderr.lock().unwrap().join("\n")
    );
    drop(block);
}

//! Shared helpers for the process tests: run the real binaries, a tiny HTTP/1.1 client.

// Each test binary uses a different subset; these are test helpers, not an API.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod heads;
pub mod pg;

/// Generous: the machine running the tests may be busy.
pub const START_DEADLINE: Duration = Duration::from_secs(120);

pub fn payments_bin() -> &'static str {
    env!("CARGO_BIN_EXE_payments")
}

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `${PAYMENTS_GO_BIN:-${CARGO_TARGET_DIR:-<workspace>/target}/payments-go}`.
pub fn go_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PAYMENTS_GO_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let target = if target.is_relative() {
        workspace_root().join(target)
    } else {
        target
    };
    target.join("payments-go")
}

/// Runs `payments generate` and returns (stdout, stderr, status).
pub fn generate(args: &[&str]) -> (String, String, ExitStatus) {
    let out = Command::new(payments_bin())
        .arg("generate")
        .args(args)
        .output()
        .expect("running payments generate");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status,
    )
}

/// The user ids `payments generate --ids-out` wrote, one per line.
pub fn read_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// A service process on a free port; SIGTERM on drop.
#[derive(Debug)]
pub struct Service {
    pub name: &'static str,
    pub addr: String,
    child: Option<Child>,
    stderr_path: PathBuf,
}

impl Service {
    pub fn start(name: &'static str, program: &Path, args: &[&str], log_dir: &Path) -> Service {
        let stderr_path = log_dir.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({}): {e}", program.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {} // keep draining so the child never blocks on a full pipe
        });
        let line = match rx.recv_timeout(START_DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "{name} printed no listening line; stderr:\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        };
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{name}: unexpected listening line {line:?}"))
            .to_string();
        Service {
            name,
            addr,
            child: Some(child),
            stderr_path,
        }
    }

    /// SIGTERM, then wait for the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        terminate(&child);
        wait_with_deadline(&mut child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{} did not exit after SIGTERM", self.name))
    }

    /// SIGKILL, then wait: no chance to finish anything.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&child);
            if wait_with_deadline(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A keep-alive HTTP/1.1 client that sends the request target byte for byte (no
/// normalization) and understands Content-Length and chunked bodies.
#[derive(Debug)]
pub struct Client {
    addr: String,
    conn: Option<BufReader<TcpStream>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Client {
    pub fn new(addr: &str) -> Client {
        Client {
            addr: addr.to_string(),
            conn: None,
        }
    }

    pub fn get(&mut self, target: &str) -> Answer {
        self.send("GET", target, &[], b"")
    }

    pub fn send(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        // One retry on a fresh connection: a server may close an idle keep-alive.
        match self.try_send(method, target, headers, body) {
            Ok(a) => a,
            Err(_) => {
                self.conn = None;
                self.try_send(method, target, headers, body)
                    .unwrap_or_else(|e| panic!("{method} {target} to {}: {e}", self.addr))
            }
        }
    }

    fn try_send(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Answer> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.set_nodelay(true)?;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut().unwrap();
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        conn.get_mut().write_all(&bytes)?;

        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        let mut content_type = None;
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            let (k, v) = (k.to_ascii_lowercase(), v.trim());
            match k.as_str() {
                "content-length" => length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "connection" => close = v.eq_ignore_ascii_case("close"),
                "content-type" => content_type = Some(v.to_string()),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if method == "HEAD" {
            // No body follows a HEAD answer, whatever its headers say.
        } else if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| std::io::Error::other("bad chunk size"))?;
                let mut chunk = vec![0; size + 2];
                conn.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        }
        if close {
            self.conn = None;
        }
        Ok(Answer {
            status,
            content_type,
            body,
        })
    }
}

/// Polls `f` until it returns `Some`, or panics with `what` after `limit`.
pub fn poll_until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The number after `"key":` in a JSON text (our answers are flat enough for this).
pub fn json_int(body: &str, key: &str) -> Option<i64> {
    let at = body.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = body[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// Sends `raw` on a new connection, byte for byte, and reads one answer (no body after a
/// `HEAD`). The server may answer and close before it has read everything: a failed
/// write is not an error here.
pub fn exchange(addr: &str, raw: &[u8]) -> Answer {
    let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let raw_owned = raw.to_vec();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&raw_owned);
    });
    let head_request = raw
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .is_some_and(|i| raw[i..].starts_with(b"HEAD "));
    let mut conn = BufReader::new(stream);
    let answer = read_answer(&mut conn, head_request).unwrap_or_else(|e| {
        panic!(
            "{:?}: {e}",
            String::from_utf8_lossy(&raw[..raw.len().min(80)])
        )
    });
    drop(conn); // closing lets a refusing server stop lingering
    let _ = sender.join();
    answer
}

/// One HTTP/1.1 answer with a Content-Length (or none) body.
fn read_answer(conn: &mut BufReader<TcpStream>, head_request: bool) -> std::io::Result<Answer> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without an answer",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut length = 0;
    let mut content_type = None;
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((h, ""));
        match k.to_ascii_lowercase().as_str() {
            "content-length" => length = v.trim().parse().unwrap_or(0),
            "content-type" => content_type = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; if head_request { 0 } else { length }];
    conn.read_exact(&mut body)?;
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

/// Sends `raw` (several pipelined requests) on one connection and reads `n` answers.
pub fn exchange_pipelined(addr: &str, raw: &[u8], n: usize) -> Vec<Answer> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut conn = BufReader::new(stream);
    (0..n)
        .map(|i| read_answer(&mut conn, false).unwrap_or_else(|e| panic!("answer {i}: {e}")))
        .collect()
}

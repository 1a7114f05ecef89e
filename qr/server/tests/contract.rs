//! The real `qr-server` binary on an ephemeral port, driven over loopback with plain
//! HTTP/1.1: every line of the contract, byte-identical PNGs, clean SIGTERM/SIGINT exit.
#![allow(unsafe_code)] // libc::kill to send SIGTERM/SIGINT to the child

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_qr-server"))
            .args(["--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn qr-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("qr-server listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        assert!(!addr.ends_with(":0"), "real port printed: {addr}");
        Server { child, addr }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0);
    }

    /// Waits (generously: shared CI box) for the exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "qr-server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

fn request(addr: &str, method: &str, target: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    Reply {
        status,
        content_type,
        body: raw[split + 4..].to_vec(),
    }
}

fn decode_qr(png_bytes: &[u8]) -> String {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let w = info.width as usize;
    let mut img =
        rqrr::PreparedImage::prepare_from_greyscale(w, info.height as usize, |x, y| buf[y * w + x]);
    img.detect_grids()[0].decode().unwrap().1
}

fn assert_json_error(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status);
    assert_eq!(reply.content_type, "application/json");
    let v: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON body");
    assert!(v["error"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
}

#[test]
fn qrcode_returns_the_qr_core_png() {
    let server = Server::start();
    let cases = [
        ("hello", "hello"),
        ("a+b%20c", "a b c"),
        ("za%C5%BC%C3%B3%C5%82%C4%87+%F0%9F%9A%80", "zażółć 🚀"),
        (
            "https%3A%2F%2Fexample.com%2F%3Fq%3D1%26r%3D2",
            "https://example.com/?q=1&r=2",
        ),
    ];
    for (query, text) in cases {
        let reply = request(&server.addr, "GET", &format!("/qrcode?text={query}"));
        assert_eq!(reply.status, 200, "{query}");
        assert_eq!(reply.content_type, "image/png");
        assert_eq!(reply.body, qr_core::png(text).unwrap(), "{query}");
        assert_eq!(decode_qr(&reply.body), text);
    }
    // 512 bytes is the limit, inclusive.
    let text = "q".repeat(512);
    let reply = request(&server.addr, "GET", &format!("/qrcode?x=1&text={text}"));
    assert_eq!(reply.status, 200);
    assert_eq!(decode_qr(&reply.body), text);
}

/// Texts on both sides of the inline limit (rendered on the connection's thread up to 128
/// bytes, on the blocking pool above), many clients at once, on two connection threads and
/// with every render forced to one side: each answer is qr_core's PNG and decodes (rqrr, an
/// independent decoder) to the text asked for.
#[test]
fn short_and_long_texts_render_correctly_inline_and_on_the_pool() {
    let lengths = [1usize, 64, 127, 128, 129, 200, 300, 511, 512];
    for extra in [
        &["--threads", "2"][..],
        &["--threads", "1", "--inline-max", "0"][..],
        &["--threads", "1", "--inline-max", "512"][..],
    ] {
        let server = Server::start_with(extra);
        std::thread::scope(|scope| {
            for client in 0..6 {
                let addr = &server.addr;
                scope.spawn(move || {
                    for (i, len) in lengths.iter().enumerate() {
                        // Distinct texts per client, mixed case and digits: byte mode either way.
                        let text: String = (0..*len)
                            .map(|k| char::from(b"aZ9-x"[(k + client + i) % 5]))
                            .collect();
                        let reply = request(addr, "GET", &format!("/qrcode?text={text}"));
                        assert_eq!(reply.status, 200, "{extra:?} len {len}");
                        assert_eq!(
                            reply.body,
                            qr_core::png(&text).unwrap(),
                            "{extra:?} len {len}"
                        );
                        assert_eq!(decode_qr(&reply.body), text, "{extra:?} len {len}");
                    }
                });
            }
        });
    }
}

#[test]
fn bad_requests_get_json_errors() {
    let server = Server::start();
    let a = &server.addr;
    assert_json_error(&request(a, "GET", "/qrcode"), 400);
    assert_json_error(&request(a, "GET", "/qrcode?text="), 400);
    assert_json_error(&request(a, "GET", "/qrcode?other=1"), 400);
    assert_json_error(&request(a, "GET", "/qrcode?text=%FF%FE"), 400);
    assert_json_error(
        &request(a, "GET", &format!("/qrcode?text={}", "q".repeat(513))),
        413,
    );
    // 171 × "ż" (2 bytes each, percent-encoded) = 342 bytes: fine; 257 = 514 bytes: too long.
    assert_eq!(
        request(a, "GET", &format!("/qrcode?text={}", "%C5%BC".repeat(171))).status,
        200
    );
    assert_json_error(
        &request(a, "GET", &format!("/qrcode?text={}", "%C5%BC".repeat(257))),
        413,
    );
    for method in ["POST", "PUT", "DELETE", "HEAD"] {
        let reply = request(a, method, "/qrcode?text=hi");
        assert_eq!(reply.status, 405, "{method}");
        if method != "HEAD" {
            assert_json_error(&reply, 405);
        }
    }
    assert_json_error(&request(a, "GET", "/nope"), 404);
    assert_json_error(&request(a, "GET", "/qrcode/extra?text=hi"), 404);
}

#[test]
fn healthz_is_ok() {
    let server = Server::start();
    let reply = request(&server.addr, "GET", "/healthz");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/json");
    let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(v["status"], "ok");
}

#[test]
fn sigterm_exits_zero_even_with_an_idle_keepalive_connection() {
    let mut server = Server::start();
    assert_eq!(request(&server.addr, "GET", "/healthz").status, 200);
    // An idle keep-alive client must not hold the shutdown up.
    let mut idle = TcpStream::connect(&server.addr).unwrap();
    write!(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(), Some(0));
    // Nothing listens any more.
    assert!(TcpStream::connect(&server.addr).is_err());
}

/// Every connection thread stops: idle keep-alive connections held on several threads do
/// not hold the exit up, and nothing listens afterwards.
#[test]
fn sigterm_with_several_connection_threads_exits_zero() {
    let mut server = Server::start_with(&["--threads", "3"]);
    let mut idle = Vec::new();
    for _ in 0..6 {
        let mut conn = TcpStream::connect(&server.addr).unwrap();
        write!(conn, "GET /qrcode?text=hi HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut first = [0u8; 12];
        conn.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        idle.push(conn);
    }
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(), Some(0));
    assert!(TcpStream::connect(&server.addr).is_err());
}

#[test]
fn sigint_exits_zero() {
    let mut server = Server::start();
    server.signal(libc::SIGINT);
    assert_eq!(server.wait_exit(), Some(0));
}

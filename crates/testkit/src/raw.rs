//! HTTP/1.1 on plain blocking sockets, written and read by hand: servers whose every byte
//! on the wire is the test's (a thread per connection), and a one-shot client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// One request as a raw server read it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRequest {
    /// The method, as sent.
    pub method: String,
    /// The request target, as sent.
    pub path: String,
    /// The header lines, in order, names as sent and values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes; chunked bodies are not read).
    pub body: Vec<u8>,
}

impl RawRequest {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the next request of a kept-alive connection: its head and its `Content-Length`
/// body. `None` when the client closed the connection (or broke off mid-request).
pub fn read_request(reader: &mut impl BufRead) -> Option<RawRequest> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').unwrap_or((h, ""));
        if n.eq_ignore_ascii_case("content-length") {
            length = v.trim().parse().expect("a numeric Content-Length");
        }
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(RawRequest {
        method,
        path,
        headers,
        body,
    })
}

/// A server on an ephemeral loopback port, `connection` run on a thread of its own for
/// every connection accepted, for as long as the test process lives; its port.
pub fn serve_connections(connection: impl Fn(TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("a bound address").port();
    let connection = std::sync::Arc::new(connection);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let connection = connection.clone();
            std::thread::spawn(move || connection(stream));
        }
    });
    port
}

/// [`serve_connections`] for keep-alive HTTP/1.1: every request of a connection is read
/// with [`read_request`] and given, with the connection's writer, to `answer`, which
/// writes the response itself and says whether to keep reading (`false`: the connection
/// is closed). Nagle is off, so a response written in pieces goes out at once.
pub fn serve_requests(
    answer: impl Fn(&RawRequest, &mut TcpStream) -> bool + Send + Sync + 'static,
) -> u16 {
    serve_connections(move |stream| {
        let _ = stream.set_nodelay(true);
        let Ok(mut writer) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        while let Some(request) = read_request(&mut reader) {
            if !answer(&request, &mut writer) {
                return;
            }
        }
    })
}

/// A whole HTTP/1.x answer read back: its status (0 when there is none) and its body.
pub fn status_and_body(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// One request on a fresh connection (`Connection: close`, no body), the answer read
/// to its end (60 s at most): (status, body). It names the address it connects to as
/// its `Host`, and types a `POST` as JSON, as the toolkit's admins require of a client.
pub fn http(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let json = if method == "GET" || method == "HEAD" {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{json}Content-Length: 0\r\nConnection: close\r\n\r\n"
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

/// A response with a `Content-Length` body at the start of `buf`, as (head, body):
/// `None` while it has not all arrived, an error when its head has no `Content-Length`.
pub fn split_response(buf: &[u8]) -> Option<Result<(String, String), String>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let Some(len) = len else {
        return Some(Err(format!("no content-length in {head:?}")));
    };
    (buf.len() >= end + 4 + len).then(|| {
        let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
        Ok((head, body))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_in_turn_with_their_bodies() {
        let wire = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /b?q=1 HTTP/1.1\r\nX-Y:  z \r\n\r\n";
        let mut r = BufReader::new(&wire[..]);
        let a = read_request(&mut r).unwrap();
        assert_eq!((a.method.as_str(), a.path.as_str()), ("POST", "/a"));
        assert_eq!((a.header("HOST"), &a.body[..]), (Some("x"), &b"abc"[..]));
        let b = read_request(&mut r).unwrap();
        assert_eq!((b.path.as_str(), b.header("x-y")), ("/b?q=1", Some("z")));
        assert_eq!(read_request(&mut r), None);
        // Cut short inside a body: no request.
        let mut cut = BufReader::new(&b"PUT / HTTP/1.1\r\nContent-Length: 9\r\n\r\nab"[..]);
        assert_eq!(read_request(&mut cut), None);
    }

    #[test]
    fn a_response_is_split_once_its_body_has_arrived() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n1234extra";
        assert_eq!(split_response(&whole[..30]), None);
        let (head, body) = split_response(whole).unwrap().unwrap();
        assert_eq!(
            (head.as_str(), body.as_str()),
            ("HTTP/1.1 200 OK\r\nContent-Length: 4", "1234")
        );
        assert!(split_response(b"HTTP/1.1 200 OK\r\n\r\n").unwrap().is_err());
    }

    #[test]
    fn a_raw_server_answers_the_raw_client() {
        let port = serve_requests(|req, w| {
            let body = format!("{} {}", req.method, req.path);
            let _ = write!(
                w,
                "HTTP/1.1 201 Made\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            req.header("connection") != Some("close")
        });
        assert_eq!(
            http(port, "PUT", "/x").unwrap(),
            (201, "PUT /x".to_string())
        );
    }
}

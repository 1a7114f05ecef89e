//! Raw bytes on async (tokio) streams, for tests that must see exactly what a server
//! wrote: read until a marker, read one response, one exchange on a fresh connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Reads from `s` into `got` until it holds `want`; `false` when the stream closed, failed
/// or `limit` passed first (what arrived is in `got`).
pub async fn read_until<S: AsyncRead + Unpin>(
    s: &mut S,
    got: &mut Vec<u8>,
    want: &str,
    limit: Duration,
) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        while !String::from_utf8_lossy(got).contains(want) {
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return false,
            }
        }
        true
    })
    .await
    .unwrap_or(false)
}

/// Reads one response with a `Content-Length` body from `s` (a kept-alive connection):
/// (head, body), or what went wrong with what had arrived. No deadline of its own.
pub async fn read_response<S: AsyncRead + Unpin>(s: &mut S) -> Result<(String, String), String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(done) = crate::raw::split_response(&buf) {
            return done;
        }
        match s.read(&mut chunk).await {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&buf))),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("{e} after {:?}", String::from_utf8_lossy(&buf))),
        }
    }
}

/// Writes `request` on a fresh connection to `addr` and reads until the server closes
/// it or `limit` passes: (the bytes received, whether the server closed).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> (Vec<u8>, bool) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.write_all(request).await.expect("request written");
    let mut out = Vec::new();
    let closed = matches!(
        tokio::time::timeout(limit, s.read_to_end(&mut out)).await,
        Ok(Ok(_))
    );
    (out, closed)
}

//! A small, fast HTTP service for `scripts/bench-shadow.sh`: `GET /v1/users/{id}/stats`
//! answers a deterministic ~2 KB JSON document built from the id.
//!
//! Usage: `bench_target PORT` (binds 127.0.0.1:PORT, one runtime thread).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

fn document(id: u64) -> String {
    let days: Vec<String> = (0..40)
        .map(|d| {
            format!(
                r#"{{"day":"2025-{:02}-01","count":{},"amount":{}}}"#,
                d % 12 + 1,
                d * 3,
                id * 31 + d * 7
            )
        })
        .collect();
    format!(
        r#"{{"user_id":"u{id:012x}","currency":"IDR","balance":{},"frozen":false,"tier":"silver","stats":[{}]}}"#,
        id * 1000,
        days.join(",")
    )
}

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let id = req
                        .uri()
                        .path()
                        .split('/')
                        .nth(3)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    let mut resp = Response::new(Full::new(Bytes::from(document(id))));
                    resp.headers_mut().insert(
                        "content-type",
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

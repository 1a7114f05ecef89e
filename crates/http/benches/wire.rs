//! The HTTP/1.1 head parsers on the heads the toolkit meets most: the load generator's
//! path (`parse_head`, status and framing only) on nginx's small answer, and a proxy's
//! (`parse_response`, a header map) on a worker's answer and on a head with more headers
//! than the stack holds.
//!
//! `cargo bench -p scalpel-http --bench wire`

use bytes::BytesMut;
use criterion::{Criterion, criterion_group, criterion_main};
use scalpel_http::h1::{Expect, parse_head, parse_response};
use std::hint::black_box;

const NGINX: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.24.0 (Ubuntu)\r\nDate: Thu, 04 Dec 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: keep-alive\r\n\r\n";

const WORKER: &[u8] = b"HTTP/1.1 200 OK\r\nX-Powered-By: Express\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 57\r\nETag: W/\"39-9cdeGkLJ5ZRAbnZX8w5fPyrbVhI\"\r\nVary: Accept-Encoding\r\nCache-Control: no-store\r\nDate: Thu, 04 Dec 2026 10:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n";

fn many_headers() -> Vec<u8> {
    let mut head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n".to_vec();
    for i in 0..100 {
        head.extend_from_slice(format!("X-Header-{i}: value {i}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn heads(c: &mut Criterion) {
    let expect = Expect::default();
    c.bench_function("parse_head nginx", |b| {
        b.iter(|| parse_head(black_box(NGINX), &expect).unwrap().unwrap())
    });
    c.bench_function("parse_response worker", |b| {
        b.iter_batched_ref(
            || BytesMut::from(WORKER),
            |buf| parse_response(buf, &expect).unwrap().unwrap(),
            criterion::BatchSize::SmallInput,
        )
    });
    let many = many_headers();
    c.bench_function("parse_response 100 headers", |b| {
        b.iter_batched_ref(
            || BytesMut::from(&many[..]),
            |buf| parse_response(buf, &expect).unwrap().unwrap(),
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, heads);
criterion_main!(benches);

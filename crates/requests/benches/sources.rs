//! How fast recorded traffic is read: access-log lines per second on one core, counted at
//! open (the pass that checks the file) and read as full requests by a reader.
//!
//! `cargo bench -p scalpel-requests --bench sources`; figures go in docs/BENCHMARKS.md.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use scalpel_requests::{RecordedSource, RenderedRequest, SourceOptions};

const LINES: u64 = 200_000;

/// nginx "combined" plus `$request_time`, about 1,000 requests a second, realistic lengths.
fn access_log() -> String {
    let agents = [
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
        "curl/8.5.0",
        "okhttp/4.12.0",
    ];
    let mut text = String::new();
    for i in 0..LINES {
        let second = i / 1_000;
        let (m, s) = (second / 60 % 60, second % 60);
        let path = match i % 4 {
            0 => format!("/v1/users/u{:05}/stats?days=30", i % 16_000),
            1 => format!("/v1/accounts/acc-{}/balance?currency=EUR", i % 977),
            2 => "/health".to_owned(),
            _ => format!("/static/app.{:x}.js", i % 31),
        };
        let _ = writeln!(
            text,
            "10.1.{}.{} - - [12/Mar/2026:14:{m:02}:{s:02} +0000] \"GET {path} HTTP/1.1\" 200 {} \"https://shop.example.com/\" \"{}\" 0.{:03}",
            i % 200,
            i % 251,
            200 + i % 5_000,
            agents[(i % 3) as usize],
            i % 1_000
        );
    }
    text
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("access.log");
    std::fs::write(&path, access_log()).expect("write log");
    let mut group = c.benchmark_group("access_log");
    group.throughput(Throughput::Elements(LINES));
    group.sample_size(20);

    group.bench_function("open (count every line)", |b| {
        b.iter(|| {
            let s = RecordedSource::open(black_box(Path::new(&path)), SourceOptions::new())
                .expect("open");
            black_box(s.len())
        });
    });

    let source = RecordedSource::open(&path, SourceOptions::new()).expect("open");
    group.bench_function("read every request", |b| {
        let mut out = RenderedRequest::default();
        b.iter(|| {
            let mut reader = source.reader();
            let mut n = 0u64;
            while let Some(r) = reader.next_into(&mut out).expect("read") {
                n += r.index & 1;
            }
            black_box(n)
        });
    });

    let filtered = SourceOptions::new()
        .include_path("^/v1/")
        .expect("regex")
        .exclude_path("/health$")
        .expect("regex");
    group.bench_function("open with include/exclude regexes", |b| {
        b.iter(|| {
            let s = RecordedSource::open(&path, filtered.clone()).expect("open");
            black_box(s.len())
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Comparison throughput on ~2 KB JSON bodies: equal pairs (the common case) and pairs
//! with a few planted differences.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use http::header::{CONTENT_TYPE, HeaderValue};
use scalpel_diff::{Comparer, Response};

fn body(seed: u64, changed: bool) -> Vec<u8> {
    let days: Vec<String> = (0..40)
        .map(|d| {
            let amount = seed * 31 + d * 7 + if changed && d == 3 { 1 } else { 0 };
            format!(
                r#"{{"day":"2025-{:02}-01","count":{},"amount":{amount}}}"#,
                d + 1,
                d * 3
            )
        })
        .collect();
    format!(
        r#"{{"user_id":"u{seed:012x}","currency":"IDR","balance":{},"frozen":false,"tier":"{}","generated_at":"2025-01-01T00:00:0{}Z","stats":[{}]}}"#,
        seed * 1000,
        if changed { "gold" } else { "silver" },
        u8::from(changed),
        days.join(",")
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let a = body(7, false);
    let b_same = body(7, false);
    let b_diff = body(7, true);
    assert!((1800..2600).contains(&a.len()), "body is {} bytes", a.len());
    let plain = Comparer::new();
    let ignoring = Comparer::new()
        .ignore("$.generated_at")
        .unwrap()
        .ignore("$.stats[*].count")
        .unwrap();
    let mut g = c.benchmark_group("compare_2kb_json");
    g.throughput(Throughput::Elements(1));
    g.bench_function("equal", |bn| {
        bn.iter(|| {
            plain.compare(
                &Response::new(200, &h, black_box(&a)),
                &Response::new(200, &h, black_box(&b_same)),
            )
        })
    });
    g.bench_function("differing", |bn| {
        bn.iter(|| {
            plain.compare(
                &Response::new(200, &h, black_box(&a)),
                &Response::new(200, &h, black_box(&b_diff)),
            )
        })
    });
    g.bench_function("differing_with_ignore_rules", |bn| {
        bn.iter(|| {
            ignoring.compare(
                &Response::new(200, &h, black_box(&a)),
                &Response::new(200, &h, black_box(&b_diff)),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! CPU time of one answer, without HTTP: decides whether stats may run inline on the async
//! runtime (it may if even the heaviest answer is far below a millisecond).
//!
//! `cargo bench -p payments-core --bench respond` (generates a 16,000-user ledger first).

#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use payments_core::{GenerateOptions, Scratch, generate, open, respond};

fn answers(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let summary = generate(&db, &GenerateOptions::new(16_000, 1)).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let top: String = conn
        .query_row(
            "SELECT user_id FROM transactions GROUP BY user_id ORDER BY count(*) DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let typical = &summary.user_ids()[summary.user_ids().len() / 2];
    let (model, _tailer) = open(&db).unwrap();
    let snapshot = model.snapshot();
    let mut scratch = Scratch::new();
    for (name, id, tail, query) in [
        ("balance/typical", typical.as_str(), "balance", None),
        ("stats30/typical", typical, "stats", None),
        ("balance/top_creator", &top, "balance", None),
        ("stats30/top_creator", &top, "stats", None),
        ("stats365/top_creator", &top, "stats", Some("days=365")),
    ] {
        let path = format!("/v1/users/{id}/{tail}");
        c.bench_function(name, |b| {
            b.iter(|| {
                let reply = respond(&snapshot, "GET", &path, query, &mut scratch);
                assert_eq!(reply.status, 200);
                reply.body.len()
            })
        });
    }
}

criterion_group!(benches, answers);
criterion_main!(benches);

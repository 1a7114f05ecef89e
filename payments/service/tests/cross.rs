//! The cross-service test: the real Rust and Go binaries on one generated ledger must give
//! the same status and body bytes for every user and window, for every error case, and
//! still after transfers written through Go.
//!
//! Needs the Go binary: `bash scripts/build-go.sh` (or `PAYMENTS_GO_BIN=...`).

mod util;

use std::collections::BTreeSet;
use std::time::Duration;

use rusqlite::Connection;
use util::{Client, Service, generate, go_bin, json_int, poll_until};

const WINDOWS: [&str; 6] = [
    "?days=1",
    "?days=7",
    "?days=30",
    "?days=90",
    "?days=365",
    "",
];

#[derive(Debug)]
struct Pair {
    rust: Service,
    go: Service,
    rc: Client,
    gc: Client,
}

impl Pair {
    /// GETs `target` from both; asserts equal status, content type and bytes.
    fn same(&mut self, method: &str, target: &str) -> util::Answer {
        let r = self.rc.send(method, target, &[], b"");
        let g = self.gc.send(method, target, &[], b"");
        assert_eq!(
            (r.status, r.text()),
            (g.status, g.text()),
            "{method} {target}: Rust (left) and Go (right) differ"
        );
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/json"),
            "{target}"
        );
        assert_eq!(
            g.content_type.as_deref(),
            Some("application/json"),
            "{target}"
        );
        r
    }

    fn seqs(&mut self) -> (i64, i64) {
        let r = self.rc.get("/healthz").text();
        let g = self.gc.get("/healthz").text();
        (json_int(&r, "seq").unwrap(), json_int(&g, "seq").unwrap())
    }
}

#[test]
fn rust_and_go_answer_byte_for_byte_before_and_after_transfers() {
    let go = go_bin();
    assert!(
        go.exists(),
        "the Go service is not built at {}: run `bash scripts/build-go.sh` first \
         (or set PAYMENTS_GO_BIN)",
        go.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let ids = dir.path().join("ids.txt");
    let (_, err, status) = generate(&[
        "--users",
        "400",
        "--seed",
        "2026",
        "--db",
        db.to_str().unwrap(),
        "--ids-out",
        ids.to_str().unwrap(),
    ]);
    assert!(status.success(), "{err}");
    let users: Vec<String> = std::fs::read_to_string(&ids)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(users.len(), 400);

    let db_arg = db.to_str().unwrap();
    let rust = Service::start(
        "rust",
        util::payments_bin().as_ref(),
        &["serve", "--db", db_arg, "--port", "0"],
        dir.path(),
    );
    let go = Service::start("go", &go, &["--db", db_arg, "--port", "0"], dir.path());
    let mut p = Pair {
        rc: Client::new(&rust.addr),
        gc: Client::new(&go.addr),
        rust,
        go,
    };
    let (rs, gs) = p.seqs();
    assert_eq!(rs, gs, "both loaded the same ledger");
    assert!(rs > 1000);

    // Every user x every window, and every balance.
    for id in &users {
        p.same("GET", &format!("/v1/users/{id}/balance"));
        for w in WINDOWS {
            p.same("GET", &format!("/v1/users/{id}/stats{w}"));
        }
    }

    // Every error case of the SPEC, plus the matching edge cases.
    let known = &users[0];
    let unknown = "u0123456789ab";
    assert!(!users.iter().any(|u| u == unknown));
    let mut targets: Vec<(&str, String)> = Vec::new();
    for bad_id in [
        "U0123456789AB",
        "u0123456789a",
        "u0123456789abc",
        "u0123456789ag",
        "nope",
        "u%30123456789a",
        "u0123456789AB",
    ] {
        targets.push(("GET", format!("/v1/users/{bad_id}/balance")));
        targets.push(("GET", format!("/v1/users/{bad_id}/stats")));
        targets.push(("GET", format!("/v1/users/{bad_id}/stats?days=0")));
    }
    for days in [
        "0", "366", "1000", "-1", "1.5", "abc", "", "+7", "%2B7", "7%20", "0x1", "1e2", "007",
        "%37", "365", "1", "9999", "00", "01",
    ] {
        targets.push(("GET", format!("/v1/users/{known}/stats?days={days}")));
        targets.push(("GET", format!("/v1/users/{unknown}/stats?days={days}")));
    }
    for query in [
        "days",
        "days=5;x&days=9",
        "days=%zz&days=9",
        "da%79s=9",
        "&&days=9&days=x",
        "days=2&days=3",
        "x=1",
        "DAYS=2",
        "days=2&x",
        "days=2;",
        "%=1&days=4",
    ] {
        targets.push(("GET", format!("/v1/users/{known}/stats?{query}")));
    }
    targets.push(("GET", format!("/v1/users/{unknown}/balance")));
    targets.push(("GET", format!("/v1/users/{unknown}/stats")));
    for path in [
        "/".to_string(),
        "/nope".into(),
        "/v1".into(),
        "/v1/users".into(),
        "/v1/users/".into(),
        "/v1/users//balance".into(),
        "/v1/users//stats".into(),
        format!("/v1/users/{known}"),
        format!("/v1/users/{known}/"),
        format!("/v1/users/{known}/balance/"),
        format!("/v1/users/{known}/stats/"),
        format!("/v1/users/{known}/balances"),
        format!("/v1/users/{known}/balance/x"),
        format!("//v1/users/{known}/balance"),
        format!("/v1//users/{known}/balance"),
        format!("/v1/users/{known}/../{known}/balance"),
        format!("/v1/users/{known}%2Fbalance"),
        format!("/V1/users/{known}/balance"),
        "/healthz/".into(),
        "/healthz/x".into(),
    ] {
        targets.push(("GET", path));
    }
    for method in ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
        targets.push((method, format!("/v1/users/{known}/balance")));
        targets.push((method, format!("/v1/users/{known}/stats?days=0")));
        targets.push((method, format!("/v1/users/{unknown}/stats")));
        targets.push((method, "/v1/users/nope/balance".into()));
        targets.push((method, "/healthz".into()));
        targets.push((method, "/nope".into()));
    }
    for (method, target) in &targets {
        if *method == "HEAD" {
            // A HEAD answer carries no body: compare the status only.
            let r = p.rc.send(method, target, &[], b"").status;
            let g = p.gc.send(method, target, &[], b"").status;
            assert_eq!(r, g, "HEAD {target}");
            continue;
        }
        let a = p.same(method, target);
        assert!(
            a.status == 200 || a.text().starts_with(r#"{"error":{"code":""#),
            "{target}"
        );
    }

    // Transfers through Go: pick senders with money and receivers holding the currency.
    let conn = Connection::open(&db).unwrap();
    let mut candidates = conn
        .prepare(
            "SELECT s.user_id, r.user_id, s.currency FROM accounts s JOIN accounts r \
             ON r.currency = s.currency AND r.user_id != s.user_id \
             WHERE s.settled + min(s.pending, 0) >= 5000 ORDER BY s.user_id, r.user_id LIMIT 2000",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>();
    drop(conn);
    candidates.dedup_by(|a, b| a.0 == b.0);
    assert!(candidates.len() >= 5, "not enough funded senders");
    let before: Vec<String> = candidates[..5]
        .iter()
        .map(|(from, _, _)| p.rc.get(&format!("/v1/users/{from}/balance")).text())
        .collect();
    let mut affected = BTreeSet::new();
    let mut last_seq = 0;
    for (i, (from, to, currency)) in candidates[..5].iter().enumerate() {
        let body = format!(
            r#"{{"from":"{from}","to":"{to}","currency":"{currency}","amount":{}}}"#,
            100 + i
        );
        let key = format!("cross-test-{i}");
        let headers = [
            ("Idempotency-Key", key.as_str()),
            ("Content-Type", "application/json"),
        ];
        let answer =
            p.gc.send("POST", "/v1/transfers", &headers, body.as_bytes());
        assert_eq!(answer.status, 201, "transfer {body}: {}", answer.text());
        last_seq = json_int(&answer.text(), "seq").unwrap();
        // A retry with the same key applies nothing and answers the same bytes.
        let again =
            p.gc.send("POST", "/v1/transfers", &headers, body.as_bytes());
        assert_eq!(again, answer);
        affected.insert(from.clone());
        affected.insert(to.clone());
    }
    assert_eq!(last_seq, rs + 10, "two rows per transfer");
    poll_until(
        Duration::from_secs(30),
        "both services to reach the new seq",
        || {
            let (r, g) = p.seqs();
            (r == last_seq && g == last_seq).then_some(())
        },
    );
    for id in &affected {
        p.same("GET", &format!("/v1/users/{id}/balance"));
        for w in WINDOWS {
            p.same("GET", &format!("/v1/users/{id}/stats{w}"));
        }
    }
    for (i, (from, _, _)) in candidates[..5].iter().enumerate() {
        let now = p.rc.get(&format!("/v1/users/{from}/balance")).text();
        assert_ne!(now, before[i], "the sender's balance did not change");
    }

    // Both exit 0 on SIGTERM.
    let Pair { rust, go, .. } = p;
    let rust_stderr = rust.stderr();
    let status = rust.stop();
    assert!(
        status.success(),
        "rust exit {status:?}; stderr:\n{rust_stderr}"
    );
    let status = go.stop();
    assert!(status.success(), "go exit {status:?}");
}

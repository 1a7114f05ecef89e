//! The cross-service test: the real Rust and Go binaries on one generated ledger must give
//! the same status and body bytes for every user and window, for every error case, and
//! still after transfers written through Go.
//!
//! Needs the Go binary: `bash scripts/build-go.sh` (or `PAYMENTS_GO_BIN=...`).

use crate::util;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rusqlite::Connection;
use util::heads::{CODES, request_heads};
use util::{Client, Service, exchange, exchange_pipelined, generate, go_bin, json_int, poll_until};

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

    /// Sends `raw` to both on new connections; asserts equal status, content type and
    /// bytes (a JSON body, or none after a HEAD).
    fn same_raw(&self, raw: &[u8]) -> util::Answer {
        let r = exchange(&self.rust.addr, raw);
        let g = exchange(&self.go.addr, raw);
        let shown = String::from_utf8_lossy(&raw[..raw.len().min(120)]);
        assert_eq!(
            (r.status, r.content_type.as_deref(), r.text()),
            (g.status, g.content_type.as_deref(), g.text()),
            "{shown:?}: Rust (left) and Go (right) differ"
        );
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/json"),
            "{shown:?}"
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
    let users = util::read_ids(&ids);
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

    request_heads_get_one_answer(&p, known);
    pipelined_requests_before_a_refused_head_are_answered_alike(&p);
    random_targets_get_one_answer(&p, &users);

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
    assert!(candidates.len() >= 10, "not enough funded senders");
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

    let pairs: Vec<(String, String, String)> = candidates[5..10].to_vec();
    assert_eq!(pairs.len(), 5, "not enough funded senders");
    bodies_the_spec_rejects_move_no_money(&mut p, &db, &pairs[0]);
    random_transfer_bodies_follow_the_spec(&mut p, &db, &pairs);

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

/// Every case of the request-head table shared with the Go service (SPEC "Request
/// heads"): the same bytes from both, and the table's answer. Before the head check, a
/// raw `#` was a 404 or 400 in Go and a 200 in Rust (hyper drops the fragment), a 100 KB
/// target a text/plain 431 in Go and an empty 414 in Rust, and so on.
fn request_heads_get_one_answer(p: &Pair, known: &str) {
    for case in request_heads(known) {
        let answer = p.same_raw(&case.raw);
        let text = answer.text();
        match &case.expect {
            Some((status, code)) => {
                assert_eq!(answer.status, *status, "line {}: {text}", case.line);
                let head = case.raw.starts_with(b"HEAD ");
                let prefix = format!(r#"{{"error":{{"code":"{code}","message":""#);
                assert_eq!(
                    !head,
                    text.starts_with(&prefix),
                    "line {}: {text}",
                    case.line
                );
            }
            None => {
                for code in CODES {
                    let refused = format!(r#""code":"{code}""#);
                    assert!(
                        !text.contains(&refused),
                        "line {}: refused: {text}",
                        case.line
                    );
                }
            }
        }
    }
}

fn pipelined_requests_before_a_refused_head_are_answered_alike(p: &Pair) {
    let raw = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
                POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n#x#x\
                GET /healthz#x HTTP/1.1\r\nHost: x\r\n\r\n\
                GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let r = exchange_pipelined(&p.rust.addr, raw, 3);
    let g = exchange_pipelined(&p.go.addr, raw, 3);
    let statuses: Vec<u16> = r.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 405, 400]);
    assert_eq!(r, g, "pipelined: Rust (left) and Go (right) differ");
}

/// A small deterministic generator (no dependency): xorshift.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A few hundred random request targets (ids, paths, queries, stray characters) from
/// both services: the same bytes for each.
fn random_targets_get_one_answer(p: &Pair, users: &[String]) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let strays = [
        "#", "%", "%2", "%zz", "%41", "<", "`", "\"", "{", "|", "^", "~", "!", "'", "(", "*", ",",
        "@", ":", "=", "&", "?", "/", ".", ";", "+", "\x7f", "\u{e9}", " ", "\t", "[",
    ];
    for _ in 0..400 {
        let known = &users[rng.below(users.len())];
        let mut id = match rng.below(6) {
            0 => "u0123456789ab".to_string(),
            1 => known.to_uppercase(),
            2 => format!("u%{:02x}{}", known.as_bytes()[1], &known[2..]),
            3 => String::new(),
            _ => known.clone(),
        };
        if rng.chance(10) {
            let at = rng.below(id.len() + 1);
            id.insert_str(at, rng.pick(&["0", "g", "A", "-"]));
        }
        let prefix = rng.pick(&[
            "/v1/users/",
            "/v1/users/",
            "/v1/users/",
            "//v1/users/",
            "/V1/users/",
            "http://x/v1/users/",
        ]);
        let tail = rng.pick(&[
            "/balance",
            "/stats",
            "/stats",
            "/balance/",
            "/statsx",
            "",
            "/",
        ]);
        let mut target = format!("{prefix}{id}{tail}");
        if rng.chance(70) {
            let pairs: Vec<String> = (0..=rng.below(3))
                .map(|_| match rng.below(12) {
                    0 => "days".to_string(),
                    1 => "days=".to_string(),
                    2 => "DAYS=7".to_string(),
                    3 => format!("days=%3{}", rng.below(10)),
                    4 => "days=%zz".to_string(),
                    5 => ";".to_string(),
                    6 => "days=7;x".to_string(),
                    7 => "days=+7".to_string(),
                    8 => String::new(),
                    9 => format!("x={}", rng.below(100)),
                    _ => format!("days={}", rng.below(2000)),
                })
                .collect();
            target.push('?');
            target.push_str(&pairs.join("&"));
        }
        if rng.chance(25) {
            let mut at = 1 + rng.below(target.len());
            while !target.is_char_boundary(at) {
                at -= 1;
            }
            target.insert_str(at, rng.pick(&strays));
        }
        let method = match rng.below(20) {
            0 => "HEAD",
            1 => "POST",
            2 => "OPTIONS",
            _ => "GET",
        };
        let raw = format!("{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n");
        p.same_raw(raw.as_bytes());
    }
}

fn transfer(p: &mut Pair, key: &str, body: &str) -> util::Answer {
    let headers = [
        ("Idempotency-Key", key),
        ("Content-Type", "application/json"),
    ];
    p.gc.send("POST", "/v1/transfers", &headers, body.as_bytes())
}

fn transfer_rows(db: &std::path::Path) -> i64 {
    let conn = Connection::open(db).unwrap();
    conn.query_row(
        "SELECT count(*) FROM transactions WHERE category = 'transfer'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

const INVALID_JSON: &str = r#"{"error":{"code":"invalid_json","message":"body must be a JSON object with from, to, currency and amount"}}"#;

/// Go's encoding/json folded key case and kept the last of two duplicates: these bodies
/// moved money (`{"amount":1,"Amount":2}` transferred 2). Each must be 400 invalid_json,
/// and both services must still show the same, unchanged balances.
fn bodies_the_spec_rejects_move_no_money(
    p: &mut Pair,
    db: &std::path::Path,
    (from, to, currency): &(String, String, String),
) {
    let rows = transfer_rows(db);
    let seq = p.seqs().0;
    let before = (
        p.same("GET", &format!("/v1/users/{from}/balance")),
        p.same("GET", &format!("/v1/users/{to}/balance")),
    );
    let bodies = [
        format!(r#"{{"from":"{from}","to":"{to}","currency":"{currency}","amount":1,"Amount":2}}"#),
        format!(
            r#"{{"from":"{to}","FROM":"{from}","to":"{to}","currency":"{currency}","amount":1}}"#
        ),
        format!(r#"{{"FROM":"{from}","To":"{to}","CURRENCY":"{currency}","AMOUNT":1}}"#),
        format!(r#"{{"from":"{from}","to":"{to}","currency":"{currency}","amount":1,"amount":2}}"#),
        format!(
            r#"{{"from":"{from}","to":"{to}","currency":"{currency}","currency":"{currency}","amount":1}}"#
        ),
        format!(r#"{{"from":"{from}","to":"{to}","amount":1}}"#),
        format!(r#"{{"from":"{from}","to":"{to}","currency":null,"amount":1}}"#),
        "null".to_string(),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let answer = transfer(p, &format!("rejected-{i}"), body);
        assert_eq!(
            (answer.status, answer.text().as_str()),
            (400, INVALID_JSON),
            "{body}"
        );
    }
    assert_eq!(
        transfer_rows(db),
        rows,
        "a rejected body wrote transfer rows"
    );
    // Let a tail pass; nothing new may appear in either service.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(p.seqs(), (seq, seq));
    let after = (
        p.same("GET", &format!("/v1/users/{from}/balance")),
        p.same("GET", &format!("/v1/users/{to}/balance")),
    );
    assert_eq!(after, before);
}

/// Expected outcome of a generated transfer body (SPEC check order).
#[derive(Debug, PartialEq)]
enum Outcome {
    Created(i64),
    Refused(u16, &'static str),
}

/// A transfer body built from random members with known flaws, and what the SPEC says
/// it gets.
fn random_body(rng: &mut Rng, from: &str, to: &str, currency: &str) -> (String, Outcome) {
    // (key, raw JSON value, kind) where kind says what the value is.
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Good,
        Null,
        WrongType,
        Other, // a string that is not the good one: bad id, unknown currency, same user
        Fraction,
        Zero,
    }
    let mut members: Vec<(String, String, Kind)> = Vec::new();
    let mut bad_key = false;
    for field in ["from", "to", "currency", "amount"] {
        if rng.chance(6) {
            continue; // absent
        }
        let (value, kind) = match (field, rng.below(20)) {
            (_, 0) => ("null".to_string(), Kind::Null),
            ("amount", 1) => (r#""5""#.to_string(), Kind::WrongType),
            ("amount", 2) => ("true".to_string(), Kind::WrongType),
            ("amount", 3) => ("1.5".to_string(), Kind::Fraction),
            ("amount", 4) => ("0".to_string(), Kind::Zero),
            ("amount", _) => ((1 + rng.below(50)).to_string(), Kind::Good),
            (_, 1) => ("7".to_string(), Kind::WrongType),
            ("currency", 2) => (r#""XYZ""#.to_string(), Kind::Other),
            ("from", 2) => (r#""nope""#.to_string(), Kind::Other),
            ("to", 2) => (format!(r#""{from}""#), Kind::Other), // same user
            ("from", _) => (format!(r#""{from}""#), Kind::Good),
            ("to", _) => (format!(r#""{to}""#), Kind::Good),
            (_, _) => (format!(r#""{currency}""#), Kind::Good),
        };
        let key = match rng.below(50) {
            0 | 1 => {
                bad_key = true;
                field.to_uppercase()
            }
            2 => {
                bad_key = true;
                format!("{field} ")
            }
            3 | 4 => format!("\\u{:04x}{}", field.as_bytes()[0], &field[1..]), // the same key
            _ => field.to_string(),
        };
        members.push((key, value, kind));
    }
    if rng.chance(4) {
        members.push(("note".to_string(), r#""x""#.to_string(), Kind::Good));
        bad_key = true;
    }
    if !members.is_empty() && rng.chance(5) {
        let dup = members[rng.below(members.len())].clone();
        members.push(dup);
        bad_key = true;
    }
    for i in (1..members.len()).rev() {
        members.swap(i, rng.below(i + 1));
    }
    let space = |rng: &mut Rng| if rng.chance(20) { " " } else { "" };
    let mut body = String::from("{");
    for (i, (key, value, _)) in members.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{}"{key}"{}:{}{value}"#,
            space(rng),
            space(rng),
            space(rng)
        ));
    }
    body.push('}');

    let kind = |field: &str| {
        members
            .iter()
            .find(|(k, ..)| k == field || (k.starts_with("\\u") && k[6..] == field[1..]))
            .map(|m| m.2)
    };
    let (f, t, c, a) = (kind("from"), kind("to"), kind("currency"), kind("amount"));
    let invalid_json = Outcome::Refused(400, "invalid_json");
    let outcome = if bad_key
        || [f, t, c, a].contains(&Some(Kind::WrongType))
        || matches!(c, None | Some(Kind::Null))
    {
        invalid_json
    } else if f != Some(Kind::Good) || matches!(t, None | Some(Kind::Null)) {
        Outcome::Refused(400, "invalid_user_id")
    } else if t == Some(Kind::Other) {
        Outcome::Refused(400, "same_user")
    } else if a != Some(Kind::Good) {
        Outcome::Refused(400, "invalid_amount")
    } else if c == Some(Kind::Other) {
        Outcome::Refused(422, "currency_mismatch")
    } else {
        let (_, value, _) = members
            .iter()
            .find(|m| m.2 == Kind::Good && m.1.parse::<i64>().is_ok())
            .unwrap();
        Outcome::Created(value.parse().unwrap())
    };
    (body, outcome)
}

/// Three hundred generated transfer bodies through Go: each gets the SPEC's answer,
/// money moves exactly for the 201s, and both services then show the same balances.
fn random_transfer_bodies_follow_the_spec(
    p: &mut Pair,
    db: &std::path::Path,
    pairs: &[(String, String, String)],
) {
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    let settled = |from: &str, currency: &str| -> i64 {
        let conn = Connection::open(db).unwrap();
        conn.query_row(
            "SELECT settled FROM accounts WHERE user_id = ?1 AND currency = ?2",
            [from, currency],
            |r| r.get(0),
        )
        .unwrap()
    };
    // The settled balance each (user, currency) must end with: pairs may share users.
    let mut expected: BTreeMap<(String, String), i64> = pairs
        .iter()
        .flat_map(|(f, t, c)| [(f.clone(), c.clone()), (t.clone(), c.clone())])
        .map(|k| {
            let now = settled(&k.0, &k.1);
            (k, now)
        })
        .collect();
    let mut created = 0;
    let mut last_seq = p.seqs().1;
    for i in 0..300 {
        let which = i % pairs.len();
        let (from, to, currency) = &pairs[which];
        let (body, want) = random_body(&mut rng, from, to, currency);
        let answer = transfer(p, &format!("random-{i}"), &body);
        let text = answer.text();
        let got = if answer.status == 201 {
            assert!(
                text.contains(&format!(
                    r#""from":"{from}","to":"{to}","currency":"{currency}""#
                )),
                "{body}: {text}"
            );
            last_seq = json_int(&text, "seq").unwrap();
            Outcome::Created(json_int(&text, "amount").unwrap())
        } else {
            let code = [
                "invalid_json",
                "invalid_user_id",
                "same_user",
                "invalid_amount",
                "currency_mismatch",
            ]
            .into_iter()
            .find(|c| text.starts_with(&format!(r#"{{"error":{{"code":"{c}""#)))
            .unwrap_or("other");
            Outcome::Refused(answer.status, code)
        };
        assert_eq!(got, want, "{body}: {text}");
        if let Outcome::Created(amount) = got {
            *expected.get_mut(&(from.clone(), currency.clone())).unwrap() -= amount;
            *expected.get_mut(&(to.clone(), currency.clone())).unwrap() += amount;
            created += 1;
        }
    }
    assert!(
        (50..=250).contains(&created),
        "{created} of 300 bodies were good: a weak mix"
    );
    for ((user, currency), want) in &expected {
        assert_eq!(
            settled(user, currency),
            *want,
            "settled {currency} of {user}"
        );
    }
    poll_until(
        Duration::from_secs(30),
        "both services to reach the last transfer",
        || {
            let (r, g) = p.seqs();
            (r == last_seq && g == last_seq).then_some(())
        },
    );
    for (f, t, _) in pairs {
        p.same("GET", &format!("/v1/users/{f}/balance"));
        p.same("GET", &format!("/v1/users/{t}/balance"));
        p.same("GET", &format!("/v1/users/{f}/stats?days=1"));
    }
}

//! Canonical JSON against hand-computed bytes, on real SQLite files.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::{Scratch, StoreKind, open, respond, schema};

const A: &str = "u00000000000a";
const B: &str = "u00000000000b";
const C: &str = "u00000000000c";
/// 2026-06-30T00:00:00Z.
const DAY: i64 = 20_634 * 86_400;

struct Ledger {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

/// (ts, user, currency, amount, status, category, counterparty), in seq order.
type Row = (
    i64,
    &'static str,
    &'static str,
    i64,
    &'static str,
    &'static str,
    &'static str,
);

fn ledger(users: &[&str], accounts: &[(&str, &str)], rows: &[Row]) -> Ledger {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(&schema(StoreKind::Sqlite)).unwrap();
    for u in users {
        conn.execute("INSERT INTO users VALUES (?1, 0)", [u])
            .unwrap();
    }
    for (u, c) in accounts {
        conn.execute("INSERT INTO accounts VALUES (?1, ?2, 0, 0)", [u, c])
            .unwrap();
    }
    for r in rows {
        append(&path, *r);
    }
    Ledger { _dir: dir, path }
}

fn append(path: &Path, r: Row) {
    let conn = Connection::open(path).unwrap();
    // Lets a test write a row for a user the ledger does not know (the generator never does).
    conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    conn.execute(
        "INSERT INTO transactions (ts, user_id, currency, amount, status, category, counterparty) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![r.0, r.1, r.2, r.3, r.4, r.5, r.6],
    )
    .unwrap();
}

fn get(path: &Path, target: &str) -> (u16, String) {
    let (model, _tailer) = open(path).unwrap();
    get_from(&model.snapshot(), "GET", target)
}

fn get_from(snapshot: &crate::Snapshot, method: &str, target: &str) -> (u16, String) {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let mut scratch = Scratch::new();
    let reply = respond(snapshot, method, path, query, &mut scratch);
    (
        reply.status,
        String::from_utf8(reply.body.to_vec()).unwrap(),
    )
}

/// A: EUR (topup, gift to B, pending payout, refund from B) and an empty USD account;
/// B: EUR (gift from A, refund to A); C: an account, no transactions.
fn small() -> Ledger {
    ledger(
        &[A, B, C],
        &[(A, "EUR"), (A, "USD"), (B, "EUR"), (C, "IDR")],
        &[
            (
                DAY - 2 * 86_400 + 100,
                A,
                "EUR",
                2000,
                "settled",
                "topup",
                "ext:topup",
            ),
            (DAY - 86_400 + 50, A, "EUR", -500, "settled", "gift", B),
            (DAY - 86_400 + 50, B, "EUR", 500, "settled", "gift", A),
            (
                DAY - 86_400 + 60,
                A,
                "EUR",
                -200,
                "pending",
                "payout",
                "ext:payout",
            ),
            (DAY + 10, A, "EUR", 300, "settled", "refund", B),
            (DAY + 10, B, "EUR", -300, "settled", "refund", A),
        ],
    )
}

#[test]
fn balance_sums_settled_and_subtracts_outgoing_pending() {
    let l = small();
    assert_eq!(
        get(&l.path, &format!("/v1/users/{A}/balance")),
        (
            200,
            format!(
                r#"{{"user_id":"{A}","seq":6,"balances":[{{"currency":"EUR","settled":1800,"pending":-200,"available":1600}},{{"currency":"USD","settled":0,"pending":0,"available":0}}]}}"#
            )
        )
    );
    assert_eq!(
        get(&l.path, &format!("/v1/users/{C}/balance")).1,
        format!(
            r#"{{"user_id":"{C}","seq":6,"balances":[{{"currency":"IDR","settled":0,"pending":0,"available":0}}]}}"#
        )
    );
}

#[test]
fn pending_income_is_not_available() {
    let l = ledger(
        &[A],
        &[],
        &[
            (DAY, A, "USD", 1000, "settled", "topup", "ext:topup"),
            (DAY, A, "USD", 700, "pending", "refund", "ext:bank"),
            (DAY, A, "USD", -300, "pending", "payout", "ext:payout"),
        ],
    );
    assert_eq!(
        get(&l.path, &format!("/v1/users/{A}/balance")).1,
        format!(
            r#"{{"user_id":"{A}","seq":3,"balances":[{{"currency":"USD","settled":1000,"pending":400,"available":700}}]}}"#
        )
    );
}

#[test]
fn stats_two_days_hand_computed() {
    let l = small();
    let usd_empty = r#"{"currency":"USD","count":0,"total_in":0,"total_out":0,"by_category":[],"daily":[{"date":"2026-06-29","count":0,"in":0,"out":0},{"date":"2026-06-30","count":0,"in":0,"out":0}],"amounts":null,"top_counterparties":[]}"#;
    let want = format!(
        concat!(
            r#"{{"user_id":"{A}","seq":6,"days":2,"from":"2026-06-29","to":"2026-06-30","currencies":["#,
            r#"{{"currency":"EUR","count":3,"total_in":300,"total_out":700,"#,
            r#""by_category":[{{"category":"gift","count":1,"in":0,"out":500}},{{"category":"payout","count":1,"in":0,"out":200}},{{"category":"refund","count":1,"in":300,"out":0}}],"#,
            r#""daily":[{{"date":"2026-06-29","count":2,"in":0,"out":700}},{{"date":"2026-06-30","count":1,"in":300,"out":0}}],"#,
            r#""amounts":{{"p50":300,"p90":500,"p99":500,"max":500}},"#,
            r#""top_counterparties":[{{"counterparty":"{B}","count":2,"volume":800}},{{"counterparty":"ext:payout","count":1,"volume":200}}]}},"#,
            "{usd}]}}"
        ),
        A = A,
        B = B,
        usd = usd_empty
    );
    assert_eq!(
        get(&l.path, &format!("/v1/users/{A}/stats?days=2")),
        (200, want)
    );
}

#[test]
fn stats_one_day_and_leading_zeros() {
    let l = small();
    let want = format!(
        concat!(
            r#"{{"user_id":"{B}","seq":6,"days":1,"from":"2026-06-30","to":"2026-06-30","currencies":["#,
            r#"{{"currency":"EUR","count":1,"total_in":0,"total_out":300,"by_category":[{{"category":"refund","count":1,"in":0,"out":300}}],"#,
            r#""daily":[{{"date":"2026-06-30","count":1,"in":0,"out":300}}],"amounts":{{"p50":300,"p90":300,"p99":300,"max":300}},"#,
            r#""top_counterparties":[{{"counterparty":"{A}","count":1,"volume":300}}]}}]}}"#
        ),
        A = A,
        B = B
    );
    assert_eq!(get(&l.path, &format!("/v1/users/{B}/stats?days=1")).1, want);
    assert_eq!(
        get(&l.path, &format!("/v1/users/{B}/stats?days=001")).1,
        want
    );
    assert_eq!(
        get(&l.path, &format!("/v1/users/{B}/stats?x=1&days=%31&days=7")).1,
        want
    );
}

#[test]
fn stats_default_window_is_thirty_dense_days() {
    let l = small();
    let (status, body) = get(&l.path, &format!("/v1/users/{C}/stats"));
    assert_eq!(status, 200);
    let mut daily = String::new();
    for d in 1..=30 {
        if d > 1 {
            daily.push(',');
        }
        daily.push_str(&format!(
            r#"{{"date":"2026-06-{d:02}","count":0,"in":0,"out":0}}"#
        ));
    }
    assert_eq!(
        body,
        format!(
            r#"{{"user_id":"{C}","seq":6,"days":30,"from":"2026-06-01","to":"2026-06-30","currencies":[{{"currency":"IDR","count":0,"total_in":0,"total_out":0,"by_category":[],"daily":[{daily}],"amounts":null,"top_counterparties":[]}}]}}"#
        )
    );
}

#[test]
fn percentiles_use_integer_nearest_rank() {
    // Amounts 1..=200 (abs), shuffled in time; n = 200: p50 = a[99], p90 = a[179], p99 = a[197].
    let rows: Vec<Row> = (1..=200i64)
        .map(|i| {
            let amount = (i * 37) % 200 + 1;
            let signed = if i % 2 == 0 { amount } else { -amount };
            (DAY + i, A, "EUR", signed, "settled", "gift", "ext:bank")
        })
        .collect();
    let l = ledger(&[A], &[], &rows);
    let body = get(&l.path, &format!("/v1/users/{A}/stats?days=1")).1;
    assert!(
        body.contains(r#""amounts":{"p50":100,"p90":180,"p99":198,"max":200}"#),
        "{body}"
    );
    // n = 1 and n = 3 edge ranks.
    let l = ledger(
        &[A],
        &[],
        &[(DAY, A, "EUR", -7, "settled", "fee", "ext:fee")],
    );
    let body = get(&l.path, &format!("/v1/users/{A}/stats?days=1")).1;
    assert!(
        body.contains(r#""amounts":{"p50":7,"p90":7,"p99":7,"max":7}"#),
        "{body}"
    );
}

#[test]
fn top_counterparties_order_volume_then_count_then_name_and_cap_ten() {
    let mut rows: Vec<Row> = vec![
        // Same volume 100: ext:topup (1 tx) vs A (2 txs) vs B (1 tx) -> A, then ext:topup, B.
        (DAY, C, "EUR", 100, "settled", "topup", "ext:topup"),
        (DAY, C, "EUR", 60, "settled", "gift", A),
        (DAY, C, "EUR", -40, "settled", "gift", A),
        (DAY, C, "EUR", 100, "settled", "gift", B),
    ];
    // Ten bigger strangers push two of the three out.
    const BIG: [&str; 10] = [
        "u100000000000",
        "u100000000001",
        "u100000000002",
        "u100000000003",
        "u100000000004",
        "u100000000005",
        "u100000000006",
        "u100000000007",
        "u100000000008",
        "u100000000009",
    ];
    for (i, name) in BIG.iter().enumerate().take(8) {
        rows.push((DAY + 1, C, "EUR", 1000 + i as i64, "settled", "gift", name));
    }
    let l = ledger(&[A, B, C], &[], &rows);
    let body = get(&l.path, &format!("/v1/users/{C}/stats?days=1")).1;
    let top = body.split(r#""top_counterparties":"#).nth(1).unwrap();
    let mut want = String::from("[");
    for i in (0..8).rev() {
        want.push_str(&format!(
            r#"{{"counterparty":"{}","count":1,"volume":{}}},"#,
            BIG[i],
            1000 + i
        ));
    }
    want.push_str(&format!(
        r#"{{"counterparty":"{A}","count":2,"volume":100}},{{"counterparty":"ext:topup","count":1,"volume":100}}]}}]}}"#
    ));
    assert_eq!(top, want);
}

#[test]
fn errors_in_spec_order_with_exact_bytes() {
    let l = small();
    let (model, _t) = open(&l.path).unwrap();
    let s = model.snapshot();
    let bad_id = r#"{"error":{"code":"invalid_user_id","message":"user id must be 'u' followed by 12 lowercase hex digits"}}"#;
    let bad_days =
        r#"{"error":{"code":"invalid_days","message":"days must be an integer from 1 to 365"}}"#;
    let no_user = r#"{"error":{"code":"user_not_found","message":"user not found"}}"#;
    let not_found = r#"{"error":{"code":"not_found","message":"no such endpoint"}}"#;
    let bad_method = r#"{"error":{"code":"method_not_allowed","message":"method not allowed"}}"#;
    let unknown = "u0123456789ab";
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("GET", format!("/v1/users/{A}/balance/"), 404, not_found),
        ("GET", "/v1/users//balance".into(), 404, not_found),
        ("GET", "/v1/users/balance".into(), 404, not_found),
        ("GET", "/".into(), 404, not_found),
        ("GET", "/healthz/".into(), 404, not_found),
        ("GET", format!("/v1/users/{A}/transactions"), 404, not_found),
        ("POST", format!("/v1/users/{A}/balance"), 405, bad_method),
        (
            "HEAD",
            format!("/v1/users/{A}/stats?days=0"),
            405,
            bad_method,
        ),
        ("DELETE", "/healthz".into(), 405, bad_method),
        (
            "POST",
            "/v1/users/nope/stats?days=0".into(),
            405,
            bad_method,
        ),
        ("GET", "/v1/users/U00000000000A/balance".into(), 400, bad_id),
        (
            "GET",
            "/v1/users/u%300000000000a/balance".into(),
            400,
            bad_id,
        ),
        ("GET", "/v1/users/nope/stats?days=0".into(), 400, bad_id),
        ("GET", format!("/v1/users/{unknown}/balance"), 404, no_user),
        (
            "GET",
            format!("/v1/users/{unknown}/stats?days=0"),
            400,
            bad_days,
        ),
        (
            "GET",
            format!("/v1/users/{unknown}/stats?days=7"),
            404,
            no_user,
        ),
    ];
    for (method, target, status, body) in &cases {
        assert_eq!(
            get_from(&s, method, target),
            (*status, body.to_string()),
            "{method} {target}"
        );
    }
    for days in [
        "0", "366", "1000", "-1", "1.5", "abc", "", "+7", "%2B7", "7%20", "0x1", "1e2",
    ] {
        assert_eq!(
            get_from(&s, "GET", &format!("/v1/users/{A}/stats?days={days}")),
            (400, bad_days.to_string()),
            "days={days}"
        );
    }
    assert_eq!(
        get_from(&s, "GET", &format!("/v1/users/{A}/stats?days")).1,
        bad_days
    );
    // Ignored pairs: a `;` or a bad escape; the next well-formed `days` counts.
    for ok in [
        "days=5;x&days=365",
        "days=%zz&days=365",
        "da%79s=365",
        "&&days=365&days=x",
    ] {
        let (status, body) = get_from(&s, "GET", &format!("/v1/users/{A}/stats?{ok}"));
        assert_eq!(status, 200, "{ok}");
        assert!(body.contains(r#""days":365"#), "{ok}: {body}");
    }
    assert_eq!(
        get_from(&s, "GET", "/healthz"),
        (200, r#"{"status":"ok","seq":6}"#.into())
    );
}

#[test]
fn tailing_applies_new_rows_copy_on_write_and_skips_unknown_users() {
    let l = small();
    let (model, mut tailer) = open(&l.path).unwrap();
    let before = model.snapshot_owned();
    append(
        &l.path,
        (DAY + 86_400 + 5, B, "USD", 250, "settled", "transfer", A),
    );
    append(
        &l.path,
        (
            DAY + 86_400 + 6,
            "u0000000000ff",
            "EUR",
            1,
            "settled",
            "gift",
            A,
        ),
    );
    assert_eq!(tailer.poll(&model).unwrap(), 2);
    assert_eq!(tailer.poll(&model).unwrap(), 0);
    let after = model.snapshot();
    assert_eq!(after.seq(), 8);
    // B gained a USD account from the transfer; the old snapshot is unchanged.
    assert_eq!(
        get_from(&after, "GET", &format!("/v1/users/{B}/balance")).1,
        format!(
            r#"{{"user_id":"{B}","seq":8,"balances":[{{"currency":"EUR","settled":200,"pending":0,"available":200}},{{"currency":"USD","settled":250,"pending":0,"available":250}}]}}"#
        )
    );
    assert_eq!(
        get_from(&before, "GET", &format!("/v1/users/{B}/balance")).1,
        format!(
            r#"{{"user_id":"{B}","seq":6,"balances":[{{"currency":"EUR","settled":200,"pending":0,"available":200}}]}}"#
        )
    );
    // The ledger clock moved to the skipped row's day too: the window is 07-01.
    let (_, stats) = get_from(&after, "GET", &format!("/v1/users/{A}/stats?days=1"));
    assert!(
        stats.contains(r#""from":"2026-07-01","to":"2026-07-01""#),
        "{stats}"
    );
    assert_eq!(
        get_from(&after, "GET", "/v1/users/u0000000000ff/balance").0,
        404
    );
}

#[test]
fn empty_ledger_has_seq_zero_and_clock_zero() {
    let l = ledger(&[A], &[(A, "EUR")], &[]);
    assert_eq!(get(&l.path, "/healthz").1, r#"{"status":"ok","seq":0}"#);
    let body = get(&l.path, &format!("/v1/users/{A}/stats?days=2")).1;
    assert!(
        body.contains(r#""from":"1969-12-31","to":"1970-01-01""#),
        "{body}"
    );
}

#[test]
fn open_reports_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = open(&dir.path().join("missing.db")).unwrap_err();
    assert!(err.to_string().contains("missing.db"), "{err}");
}

//! `payments generate` as a process: determinism, the accounts invariant, the id list.

use crate::util;

use rusqlite::Connection;
use util::generate;

/// Every row of every table, in a fixed order, as text.
fn dump(path: &std::path::Path) -> String {
    let conn = Connection::open(path).unwrap();
    let mut out = String::new();
    for sql in [
        "SELECT id, created_at FROM users ORDER BY id",
        "SELECT user_id, currency, settled, pending FROM accounts ORDER BY user_id, currency",
        "SELECT seq, ts, user_id, currency, amount, status, category, counterparty, \
         coalesce(transfer_id, '') FROM transactions ORDER BY seq",
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..n {
                let v: rusqlite::types::Value = row.get(i).unwrap();
                out.push_str(&format!("{v:?}|"));
            }
            out.push('\n');
        }
    }
    out
}

#[test]
fn same_seed_same_rows_other_seed_other_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    for (file, seed) in [("a.db", "42"), ("b.db", "42"), ("c.db", "43")] {
        let (out, err, status) = generate(&["--users", "300", "--seed", seed, "--db", &path(file)]);
        assert!(status.success(), "{err}");
        assert!(out.starts_with("generated 300 users"), "{out}");
    }
    let (a, b, c) = (
        dump(path("a.db").as_ref()),
        dump(path("b.db").as_ref()),
        dump(path("c.db").as_ref()),
    );
    assert!(
        a.lines().count() > 1000,
        "a ledger of 300 users should have many rows"
    );
    assert!(a == b, "same seed gave different rows");
    assert!(a != c, "different seeds gave the same rows");
}

#[test]
fn accounts_equal_the_sums_and_the_shape_is_skewed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let ids = dir.path().join("ids.txt");
    let (_, err, status) = generate(&[
        "--users",
        "1000",
        "--seed",
        "5",
        "--db",
        db.to_str().unwrap(),
        "--ids-out",
        ids.to_str().unwrap(),
    ]);
    assert!(status.success(), "{err}");
    let conn = Connection::open(&db).unwrap();
    let mismatched: i64 = conn
        .query_row(
            "SELECT count(*) FROM accounts a LEFT JOIN (SELECT user_id, currency, \
               sum(CASE WHEN status = 'settled' THEN amount ELSE 0 END) AS s, \
               sum(CASE WHEN status = 'pending' THEN amount ELSE 0 END) AS p \
             FROM transactions GROUP BY 1, 2) t USING (user_id, currency) \
             WHERE a.settled != coalesce(t.s, 0) OR a.pending != coalesce(t.p, 0)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        mismatched, 0,
        "accounts differ from the sums of transactions"
    );
    let orphans: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT DISTINCT user_id, currency FROM transactions) t \
             LEFT JOIN accounts a USING (user_id, currency) WHERE a.user_id IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "a transaction without an account");
    let unordered: i64 = conn
        .query_row(
            "SELECT count(*) FROM transactions a JOIN transactions b ON b.seq = a.seq + 1 WHERE b.ts < a.ts",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unordered, 0, "seq order is not ts order");
    let (days, pending, categories): (i64, i64, i64) = conn
        .query_row(
            "SELECT (max(ts) - min(ts)) / 86400, sum(status = 'pending'), count(DISTINCT category) FROM transactions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(days >= 180, "spread over {days} days");
    assert!(pending > 0, "no pending payouts");
    assert_eq!(categories, 5, "gift, topup, payout, refund, fee");
    // Skew: the busiest user has far more transactions than the median one.
    let mut counts: Vec<i64> = conn
        .prepare("SELECT count(*) FROM transactions GROUP BY user_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    counts.sort_unstable();
    let (median, max) = (counts[counts.len() / 2], *counts.last().unwrap());
    assert!(median <= 20 && max >= 1000, "median {median}, max {max}");

    let listed: Vec<String> = std::fs::read_to_string(&ids)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(listed.len(), 1000);
    let stored: i64 = conn
        .query_row("SELECT count(*) FROM users", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 1000);
    for id in &listed {
        assert!(payments_core_like_id(id), "{id}");
        let n: i64 = conn
            .query_row("SELECT count(*) FROM users WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 1, "{id} listed but not stored");
    }
    let mut sorted = listed.clone();
    sorted.sort();
    assert_ne!(sorted, listed, "ids look sequential");
}

fn payments_core_like_id(id: &str) -> bool {
    id.len() == 13
        && id.starts_with('u')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn refuses_to_overwrite_without_force_and_bad_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let db = db.to_str().unwrap();
    assert!(generate(&["--users", "20", "--db", db]).2.success());
    let (_, err, status) = generate(&["--users", "20", "--db", db]);
    assert_eq!(status.code(), Some(2));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert!(
        generate(&["--users", "20", "--db", db, "--force"])
            .2
            .success()
    );
    let (_, err, status) = generate(&["--users", "0", "--db", db, "--force"]);
    assert_eq!(status.code(), Some(2), "{err}");
    let (_, _, status) = generate(&["--users", "many", "--db", db]);
    assert_eq!(status.code(), Some(2));
}

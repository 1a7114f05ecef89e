//! The ledger on PostgreSQL: the generator writes the same rows as into SQLite; the Rust
//! service on PostgreSQL answers byte for byte like the Go service on PostgreSQL and like
//! the Rust service on SQLite; it follows transfers written through Go, also after the
//! PostgreSQL backends serving it (the pool's and the LISTEN connection) were terminated
//! and after it was SIGKILLed itself.
//!
//! One cluster for the whole test binary (util::pg); each test makes its own database.

use crate::util;

use std::time::{Duration, Instant};

use rusqlite::Connection;
use util::pg::{database, psql};
use util::{Client, Service, generate, go_bin, json_int, poll_until};

const WINDOWS: [&str; 4] = ["?days=1", "?days=30", "?days=365", ""];

/// Every table of an SQLite ledger, one row per line, as `psql -At` prints them.
fn sqlite_dump(path: &std::path::Path) -> String {
    let conn = Connection::open(path).unwrap();
    let mut out = String::new();
    for query in [
        "SELECT id, created_at FROM users ORDER BY id",
        "SELECT user_id, currency, settled, pending FROM accounts ORDER BY user_id, currency",
        "SELECT seq, ts, user_id, currency, amount, status, category, counterparty, \
         coalesce(transfer_id, '') FROM transactions ORDER BY seq",
        "SELECT count(*) FROM transfers",
    ] {
        let mut stmt = conn.prepare(query).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let cells: Vec<String> = (0..n)
                .map(|i| match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                    other => panic!("unexpected {other:?}"),
                })
                .collect();
            out.push_str(&cells.join("|"));
            out.push('\n');
        }
    }
    out
}

/// The same tables of a PostgreSQL ledger.
fn pg_dump(url: &str) -> String {
    psql(
        url,
        "SELECT id, created_at FROM users ORDER BY id COLLATE \"C\"; \
         SELECT user_id, currency, settled, pending FROM accounts \
           ORDER BY user_id COLLATE \"C\", currency COLLATE \"C\"; \
         SELECT seq, ts, user_id, currency, amount, status, category, counterparty, \
           coalesce(transfer_id, '') FROM transactions ORDER BY seq; \
         SELECT count(*) FROM transfers",
    )
}

#[test]
fn generate_writes_the_same_ledger_into_postgres_as_into_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.db");
    let url = database();
    for db in [file.to_str().unwrap(), url.as_str()] {
        let (out, err, status) = generate(&["--users", "300", "--seed", "77", "--db", db]);
        assert!(status.success(), "{db}: {err}");
        assert!(out.starts_with("generated 300 users"), "{out}");
    }
    let sqlite = sqlite_dump(&file);
    assert!(sqlite.lines().count() > 10_000, "a real ledger");
    assert_eq!(pg_dump(&url), sqlite, "PostgreSQL and SQLite rows differ");

    // A database holding a ledger is not overwritten without --force: exit 2, one line.
    let (_, err, status) = generate(&["--users", "5", "--seed", "1", "--db", &url]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("already holds a ledger"), "{err}");
    assert!(!err.contains("password"), "{err}");
    // With --force it is replaced, and the same seed gives the same rows again.
    let (_, err, status) = generate(&["--users", "300", "--seed", "77", "--force", "--db", &url]);
    assert!(status.success(), "{err}");
    assert_eq!(pg_dump(&url), sqlite);

    // A database that cannot be reached: exit 2, one line; a URL that is not one: exit 2.
    let unreachable = "postgres://postgres@/nope?host=/nonexistent-dir&port=5432";
    let (_, err, status) = generate(&["--users", "5", "--db", unreachable]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let (_, err, status) = generate(&["--users", "5", "--db", "postgres://u@/db?port=x"]);
    assert_eq!(status.code(), Some(2), "{err}");

    // Serving a database that holds no ledger: exit 2, one line, nothing created.
    let empty = database();
    let out = std::process::Command::new(util::payments_bin())
        .args(["serve", "--db", &empty, "--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("users"), "{err}");
    assert_eq!(
        psql(
            &empty,
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        )
        .trim(),
        "0"
    );
}

/// Status and body from each client, which must all be equal.
fn same(clients: &mut [(&str, &mut Client)], target: &str) {
    let answers: Vec<(u16, String)> = clients
        .iter_mut()
        .map(|(_, c)| {
            let a = c.get(target);
            (a.status, a.text())
        })
        .collect();
    for (i, a) in answers.iter().enumerate().skip(1) {
        assert_eq!(
            &answers[0], a,
            "{target}: {} (left) and {} (right) differ",
            clients[0].0, clients[i].0
        );
    }
}

fn seq(c: &mut Client) -> i64 {
    json_int(&c.get("/healthz").text(), "seq").unwrap()
}

fn funded_pairs(url: &str) -> Vec<(String, String, String)> {
    psql(
        url,
        "SELECT s.user_id, min(r.user_id), s.currency FROM accounts s JOIN accounts r \
         ON r.currency = s.currency AND r.user_id <> s.user_id \
         WHERE s.settled + least(s.pending, 0) >= 100000 \
         GROUP BY s.user_id, s.currency ORDER BY s.user_id LIMIT 40",
    )
    .lines()
    .map(|l| {
        let v: Vec<&str> = l.split('|').collect();
        (v[0].to_string(), v[1].to_string(), v[2].to_string())
    })
    .collect()
}

fn transfer(go: &mut Client, key: &str, (from, to, currency): &(String, String, String)) -> i64 {
    let body = format!(r#"{{"from":"{from}","to":"{to}","currency":"{currency}","amount":7}}"#);
    let headers = [
        ("Idempotency-Key", key),
        ("Content-Type", "application/json"),
    ];
    let a = go.send("POST", "/v1/transfers", &headers, body.as_bytes());
    assert_eq!(a.status, 201, "{body}: {}", a.text());
    json_int(&a.text(), "seq").unwrap()
}

#[test]
fn on_postgres_rust_answers_like_go_and_like_sqlite_and_follows_transfers() {
    let go_path = go_bin();
    assert!(
        go_path.exists(),
        "the Go service is not built at {}: run `bash scripts/build-go.sh` first",
        go_path.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.db");
    let ids = dir.path().join("ids.txt");
    let url = database();
    for (db, extra) in [(file.to_str().unwrap(), true), (url.as_str(), false)] {
        let mut args = vec!["--users", "300", "--seed", "2026", "--db", db];
        if extra {
            args.extend(["--ids-out", ids.to_str().unwrap()]);
        }
        let (_, err, status) = generate(&args);
        assert!(status.success(), "{err}");
    }
    let users = util::read_ids(&ids);
    let pay = util::payments_bin().as_ref();
    let serve_pg = ["serve", "--db", url.as_str(), "--port", "0"];
    let rust_pg = Service::start("rust-pg", pay, &serve_pg, dir.path());
    let go_pg = Service::start(
        "go-pg",
        &go_path,
        &["--db", &url, "--port", "0"],
        dir.path(),
    );
    let file_arg = file.to_str().unwrap();
    let rust_sqlite = Service::start(
        "rust-sqlite",
        pay,
        &["serve", "--db", file_arg, "--port", "0"],
        dir.path(),
    );
    let (mut rc, mut gc, mut sc) = (
        Client::new(&rust_pg.addr),
        Client::new(&go_pg.addr),
        Client::new(&rust_sqlite.addr),
    );

    // Byte for byte: Rust on PostgreSQL, Go on PostgreSQL, Rust on SQLite, every user.
    {
        let mut all = [
            ("rust on postgres", &mut rc),
            ("go on postgres", &mut gc),
            ("rust on sqlite", &mut sc),
        ];
        same(&mut all, "/healthz");
        for id in &users {
            same(&mut all, &format!("/v1/users/{id}/balance"));
            for w in WINDOWS {
                same(&mut all, &format!("/v1/users/{id}/stats{w}"));
            }
        }
    }
    drop(rust_sqlite);

    // /metrics: both show their pools on the PostgreSQL store.
    for (name, c) in [("rust", &mut rc), ("go", &mut gc)] {
        let m = c.get("/metrics");
        assert_eq!(m.status, 200, "{name}");
        let text = m.text();
        for want in [
            "payments_db_pool_max{store=\"postgres\",pool=\"reader\"}",
            "payments_db_pool_open{store=\"postgres\"",
            "payments_ledger_seq{store=\"postgres\"}",
        ] {
            assert!(text.contains(want), "{name} /metrics lacks {want}:\n{text}");
        }
    }

    // Any other method on /metrics: the same JSON 405 from both.
    let (r, g) = (
        rc.send("POST", "/metrics", &[], b""),
        gc.send("POST", "/metrics", &[], b""),
    );
    assert_eq!((r.status, r.text()), (g.status, g.text()), "POST /metrics");
    assert_eq!(r.status, 405);

    // The backend serving the Rust service is terminated; its pool opens another and the
    // tail carries on.
    let pairs = funded_pairs(&url);
    assert!(
        pairs.len() >= 30,
        "not enough funded senders: {}",
        pairs.len()
    );
    let killed = psql(
        &url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'payments' AND datname = current_database()",
    );
    assert_ne!(
        killed.trim(),
        "0",
        "no backend of the Rust service to terminate"
    );
    let mut last = 0;
    for (i, pair) in pairs[..5].iter().enumerate() {
        last = transfer(&mut gc, &format!("after-backend-kill-{i}"), pair);
    }
    poll_until(
        Duration::from_secs(30),
        "rust to follow after its backend died",
        || (seq(&mut rc) == last).then_some(()),
    );

    // The tail's LISTEN connection was terminated too: it is made again (then a transfer
    // wakes the tail at once instead of at the next 100 ms poll).
    poll_until(
        Duration::from_secs(30),
        "the LISTEN connection to be back",
        || {
            rc.get("/metrics")
                .text()
                .contains("payments_db_listening{store=\"postgres\"} 1")
                .then_some(())
        },
    );

    // How long a transfer takes to show in the Rust read model (printed, not asserted).
    let mut lags = Vec::new();
    for (i, pair) in pairs[5..25].iter().enumerate() {
        // At a different moment of the 100 ms tail cycle each time.
        std::thread::sleep(Duration::from_millis((i as u64 * 37) % 100));
        let s = transfer(&mut gc, &format!("lag-{i}"), pair);
        let t0 = Instant::now();
        // Asked every millisecond (poll_until's 50 ms would round the lag up).
        while seq(&mut rc) < s {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "rust never saw seq {s}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        lags.push(t0.elapsed());
        last = s;
    }
    lags.sort();
    eprintln!(
        "transfer through Go to the Rust read model on PostgreSQL: min {:?}, median {:?}, \
         max {:?} over {} transfers",
        lags[0],
        lags[lags.len() / 2],
        lags[lags.len() - 1],
        lags.len()
    );

    // SIGKILL of the Rust service: restarted, it loads what Go acknowledged, no more.
    rust_pg.kill();
    for (i, pair) in pairs[25..30].iter().enumerate() {
        last = transfer(&mut gc, &format!("while-rust-down-{i}"), pair);
    }
    let rust_pg = Service::start("rust-pg-again", pay, &serve_pg, dir.path());
    let mut rc = Client::new(&rust_pg.addr);
    poll_until(Duration::from_secs(30), "go to reach the last seq", || {
        (seq(&mut gc) == last).then_some(())
    });
    assert_eq!(
        seq(&mut rc),
        last,
        "the restarted Rust service loaded every transfer"
    );
    let mut both = [("rust on postgres", &mut rc), ("go on postgres", &mut gc)];
    for (from, to, _) in &pairs[..30] {
        for id in [from, to] {
            same(&mut both, &format!("/v1/users/{id}/balance"));
            same(&mut both, &format!("/v1/users/{id}/stats?days=365"));
        }
    }
    let transfers = psql(&url, "SELECT count(*) FROM transfers");
    assert_eq!(
        transfers.trim(),
        "30",
        "each acknowledged transfer stored once"
    );

    for s in [rust_pg, go_pg] {
        let name = s.name;
        let status = s.stop();
        assert!(status.success(), "{name} exit {status:?}");
    }
}

/// scripts/lib/pg.sh's watcher (what stops every test binary's cluster, also after a panic
/// or a kill): once the owner process has exited, the server is stopped and its directory
/// removed.
#[test]
fn a_cluster_is_stopped_once_its_owner_exits() {
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let script = util::workspace_root().join("scripts/lib/pg.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(["start", "--watch", &owner.id().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (dir, url) = text.trim_end().split_once('\n').unwrap();
    assert_eq!(psql(url, "SELECT 1").trim(), "1");
    let pid_file = std::path::Path::new(dir).join("data/postmaster.pid");
    let postmaster = std::fs::read_to_string(&pid_file).unwrap();
    let postmaster = postmaster.lines().next().unwrap().trim().to_string();
    let _ = owner.kill();
    let _ = owner.wait();
    poll_until(
        Duration::from_secs(30),
        "the watcher to stop the cluster",
        || {
            let gone = !std::path::Path::new(dir).exists()
                && !std::path::Path::new(&format!("/proc/{postmaster}")).exists();
            gone.then_some(())
        },
    );
}

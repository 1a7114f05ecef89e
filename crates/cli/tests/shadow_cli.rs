//! `scalpel shadow` as a user runs it: the real binary against servers on loopback.

#[path = "../../shadow/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use support::{Answer, Asked, eventually, get, send, serve};

const BIN: &str = env!("CARGO_BIN_EXE_scalpel");

fn user_id(a: &Asked) -> u64 {
    a.path_and_query
        .split('/')
        .nth(3)
        .and_then(|s| s.split('?').next()?.parse().ok())
        .unwrap_or(0)
}

fn body(id: u64, balance: u64) -> String {
    format!(r#"{{"user":{id},"balance":{balance},"currency":"IDR"}}"#)
}

async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || Command::new(BIN).args(&args).output().unwrap())
        .await
        .unwrap()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_exits_by_consistency_writes_json_and_html_and_rejects_bad_input() {
    let primary = serve(|a| Answer::json(body(user_id(a), user_id(a) * 10))).await;
    let same = serve(|a| Answer::json(body(user_id(a), user_id(a) * 10))).await;
    let off = serve(|a| {
        let id = user_id(a);
        Answer::json(body(id, if id == 4 { 0 } else { id * 10 }))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, (1..=10).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
    let json = dir.path().join("out.json");
    let html = dir.path().join("out.html");
    let base = |cand: &str| {
        strings(&[
            "shadow",
            "replay",
            "--primary",
            &primary.url(),
            "--candidate",
            cand,
            "--template",
            "/v1/users/{id}/stats?days=30",
            "--data",
            ids.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
    };

    let out = run(base(&same.url())).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&json);
    for key in [
        "compared",
        "matched",
        "mismatched",
        "skipped",
        "consistency_percent",
        "endpoints",
        "noise",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["compared"], 10);
    assert_eq!(v["consistency_percent"], 100.0);
    assert_eq!(v["endpoints"][0]["endpoint"], "/v1/users/{id}/stats");

    let out = run(base(&off.url())).await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("/v1/users/{id}/stats") && stdout.contains("FAIL"),
        "{stdout}"
    );
    let v = read_json(&json);
    assert_eq!(
        (v["compared"].as_u64(), v["mismatched"].as_u64()),
        (Some(10), Some(1))
    );
    let ep = &v["endpoints"][0];
    assert_eq!(
        (ep["compared"].as_u64(), ep["mismatched"].as_u64()),
        (Some(10), Some(1))
    );
    assert_eq!(
        ep["fields"],
        serde_json::json!([{"path": "$.balance", "count": 1, "kind": "value_changed"}])
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("$.balance") && page.contains("<style>") && !page.contains("<script"));

    let mut lenient = base(&off.url());
    lenient.extend(strings(&["--min-consistency", "90"]));
    assert_eq!(run(lenient).await.status.code(), Some(0));

    // Bad input: one line on stderr, exit 2.
    let mut bad_cases = vec![];
    let mut missing = base(&same.url());
    missing[9] = dir.path().join("nope.txt").to_string_lossy().into_owned();
    bad_cases.push(missing);
    let mut bad_ignore = base(&same.url());
    bad_ignore.extend(strings(&["--ignore", "generated_at"]));
    bad_cases.push(bad_ignore);
    let mut bad_url = base(&same.url());
    bad_url[5] = "https://127.0.0.1:1".into();
    bad_cases.push(bad_url);
    for args in bad_cases {
        let out = run(args.clone()).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("scalpel: "), "{err}");
    }
}

/// A `scalpel shadow proxy` child process and the addresses it printed.
struct ProxyProc {
    child: Child,
    url: String,
    admin: Option<String>,
}

impl Drop for ProxyProc {
    /// A failing test must not leave a proxy running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// The child is returned inside `ProxyProc`, whose `Drop` kills and waits for it.
#[allow(clippy::zombie_processes)]
fn spawn_proxy(args: &[String]) -> ProxyProc {
    let mut child = Command::new(BIN)
        .args(["shadow", "proxy", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining so the child never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("proxy did not start");
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split([',', ';']).next().unwrap().trim().to_string();
            let admin = rest
                .split("admin on http://")
                .nth(1)
                .map(|a| format!("http://{}", a.split('/').next().unwrap()));
            return ProxyProc {
                child,
                url: format!("http://{addr}"),
                admin,
            };
        }
    }
}

async fn summary_json(c: &support::TestClient, admin: &str) -> Value {
    serde_json::from_slice(&get(c, &format!("{admin}/summary.json")).await.body).unwrap()
}

const SECRETS: [&str; 5] = [
    "SECRET-BEARER-1",
    "SECRET-COOKIE-2",
    "SECRET-SETCOOKIE-3",
    "SECRET-PW-4",
    "SECRET-APIKEY-5",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_survives_sigkill_holds_no_secret_and_rebuilds_the_same_report() {
    let answer = |a: &Asked, candidate: bool| {
        let id = user_id(a);
        let balance = if candidate && id.is_multiple_of(3) {
            1
        } else {
            id * 10
        };
        Answer::json(format!(
            r#"{{"user":{id},"balance":{balance},"password":"SECRET-PW-4","echo":{}}}"#,
            String::from_utf8_lossy(&a.body).len()
        ))
        .header("set-cookie", "session=SECRET-SETCOOKIE-3")
    };
    let primary = serve(move |a| answer(a, false)).await;
    let candidate = serve(move |a| answer(a, true)).await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shadow.db");
    let mut p = spawn_proxy(&strings(&[
        "--primary",
        &primary.url(),
        "--candidate",
        &candidate.url(),
        "--admin",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--flush-interval",
        "100ms",
        "--mirror-unsafe",
        "--redact",
        "password",
        "--redact",
        "x-api-key",
        "--compare-header",
        "set-cookie",
    ]));
    let admin = p.admin.clone().unwrap();
    let c = support::client();
    let n = 30u64;
    for id in 1..=n {
        let req_body = r#"{"user":"u","password":"SECRET-PW-4"}"#;
        let got = send(
            &c,
            "POST",
            &format!("{}/v1/users/{id}/stats?token=x", p.url),
            &[
                ("authorization", "Bearer SECRET-BEARER-1"),
                ("cookie", "sid=SECRET-COOKIE-2"),
                ("x-api-key", "SECRET-APIKEY-5"),
                ("content-type", "application/json"),
            ],
            req_body.as_bytes(),
        )
        .await;
        assert_eq!(got.status, 200);
    }
    let seen = eventually("all pairs compared", Duration::from_secs(60), async || {
        let v = summary_json(&c, &admin).await;
        (v["compared"] == n).then_some(v)
    })
    .await;
    assert_eq!(seen["mismatched"], 10);
    // Wait until the periodic flush has made those counters durable, then kill -9.
    eventually("counters flushed", Duration::from_secs(60), async || {
        let run = scalpel_shadow::Store::read(&store).ok()?;
        (run.summary(None).compared == n).then_some(())
    })
    .await;
    p.child.kill().unwrap();
    p.child.wait().unwrap();

    let json = dir.path().join("report.json");
    let out = run(strings(&[
        "shadow",
        "report",
        "--store",
        store.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rebuilt = read_json(&json);
    for key in [
        "compared",
        "matched",
        "mismatched",
        "skipped",
        "errors",
        "endpoints",
        "noise",
    ] {
        assert_eq!(rebuilt[key], seen[key], "{key} differs after the crash");
    }
    let samples = rebuilt["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    assert_eq!(samples[0]["differences"][0]["path"], "$.balance");

    // Not one secret byte anywhere in the store's files.
    let mut files = 0;
    let mut redactions = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("shadow.db")
        {
            continue;
        }
        files += 1;
        let bytes = std::fs::read(&path).unwrap();
        redactions += bytes.windows(10).filter(|w| *w == b"[REDACTED]").count();
        for secret in SECRETS {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} found in {}",
                path.display()
            );
        }
    }
    assert!(files >= 1);
    // The samples are there, secrets replaced (in the db file or still in its WAL).
    assert!(redactions > 0, "samples should show redactions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_candidate_process_leaves_every_client_answer_intact() {
    let primary = serve(|a| Answer::json(body(user_id(a), 7))).await;
    // The candidate is a real separate process: another scalpel proxy in front of a copy.
    let copy = serve(|a| Answer::json(body(user_id(a), 7))).await;
    let mut cand = spawn_proxy(&strings(&[
        "--primary",
        &copy.url(),
        "--candidate",
        &copy.url(),
    ]));
    let mut p = spawn_proxy(&strings(&[
        "--primary",
        &primary.url(),
        "--candidate",
        &cand.url,
        "--admin",
        "127.0.0.1:0",
        "--mirror-timeout",
        "2s",
    ]));
    let admin = p.admin.clone().unwrap();
    let c = support::client();
    for id in 1..=10 {
        let got = get(&c, &format!("{}/v1/users/{id}/stats", p.url)).await;
        assert_eq!(
            (got.status, String::from_utf8(got.body).unwrap()),
            (200, body(id, 7))
        );
    }
    eventually(
        "first pairs compared",
        Duration::from_secs(60),
        async || (summary_json(&c, &admin).await["compared"] == 10).then_some(()),
    )
    .await;
    cand.child.kill().unwrap();
    cand.child.wait().unwrap();
    for id in 11..=30 {
        let got = get(&c, &format!("{}/v1/users/{id}/stats", p.url)).await;
        assert_eq!(
            (got.status, String::from_utf8(got.body).unwrap()),
            (200, body(id, 7))
        );
    }
    let v = eventually("failures counted", Duration::from_secs(60), async || {
        let v = summary_json(&c, &admin).await;
        (v["errors"] == 20).then_some(v)
    })
    .await;
    assert_eq!(
        (v["compared"].as_u64(), v["mismatched"].as_u64()),
        (Some(10), Some(0))
    );
    assert_eq!(primary.hits(), 30);
    p.child.kill().unwrap();
    p.child.wait().unwrap();
}

/// Issue #11.8: `--timeout 99999999999999999999999` panicked (exit 101). Every duration and
/// size of `scalpel shadow` goes through the one grammar (scalpel-units): nonsense,
/// overflow and zero are one line and exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_durations_and_sizes_are_one_line_and_exit_2() {
    let replay = |flag: &str, value: &str| {
        strings(&[
            "shadow",
            "replay",
            "--primary",
            "http://127.0.0.1:1",
            "--candidate",
            "http://127.0.0.1:2",
            "--template",
            "/x",
            flag,
            value,
        ])
    };
    let proxy = |flag: &str, value: &str| {
        strings(&[
            "shadow",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--primary",
            "http://127.0.0.1:1",
            "--candidate",
            "http://127.0.0.1:2",
            flag,
            value,
        ])
    };
    let cases = [
        replay("--timeout", "99999999999999999999999"),
        replay("--timeout", "99999999999999999999999s"),
        replay("--timeout", "1e400s"),
        replay("--timeout", "5"),
        replay("--timeout", "0s"),
        replay("--timeout", "-1s"),
        replay("--max-body", "99999999999999999999999"),
        replay("--max-body", "1.5"),
        replay("--max-decoded-body", "lots"),
        proxy("--mirror-timeout", "NaNs"),
        proxy("--primary-timeout", "9999999h"),
        proxy("--mirror-budget", "1ZiB"),
        proxy("--mirror-max-age", "0ms"),
        proxy("--flush-interval", "∞"),
    ];
    for args in cases {
        let out = run(args.clone()).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("scalpel: "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

fn sigint(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for a child to exit (a hang guard, not a timing assertion) and returns its
/// stdout and exit code.
fn wait_out(mut child: Child) -> (String, Option<i32>) {
    use std::io::Read as _;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            return (out, status.code());
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not stop within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue #18.10: at SIGINT, 1,097 mirrored, 680 accounted for, and the table said
/// 100.00%. Now every chosen request is in exactly one counter (compared, errors, skipped
/// by reason, `abandoned_at_shutdown`), in the table and in the store, and the table shows
/// a range instead of 100 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_accounts_every_mirror_and_never_says_100_percent_over_uncompared_ones() {
    let primary = serve(|a| Answer::json(body(user_id(a), 1))).await;
    let candidate = serve(|a| {
        let id = user_id(a);
        Answer::json(body(id, 1)).delay(if id > 3 {
            Duration::from_secs(60)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.db");
    let mut child = Command::new(BIN)
        .args(strings(&[
            "shadow",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--primary",
            &primary.url(),
            "--candidate",
            &candidate.url(),
            "--admin",
            "127.0.0.1:0",
            "--mirror-concurrency",
            "2",
            "--mirror-timeout",
            "2s",
            "--store",
            store.to_str().unwrap(),
        ]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = loop {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("proxy did not start");
        if l.contains("listening on ") {
            break l;
        }
    };
    let rest = line.split("listening on ").nth(1).unwrap();
    let url = format!("http://{}", rest.split([',', ';']).next().unwrap().trim());
    let admin = format!(
        "http://{}",
        rest.split("admin on http://")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
    );
    let c = support::client();
    for id in 1..=3 {
        get(&c, &format!("{url}/v1/users/{id}/stats")).await;
    }
    eventually("3 compared", Duration::from_secs(30), async || {
        (summary_json(&c, &admin).await["compared"] == 3).then_some(())
    })
    .await;
    for id in 4..=10 {
        get(&c, &format!("{url}/v1/users/{id}/stats")).await;
    }
    drop(c);
    sigint(&child);
    let (stdout, code) = tokio::task::spawn_blocking(move || wait_out(child))
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("10 chosen for comparison"), "{stdout}");
    let total = stdout.lines().find(|l| l.starts_with("TOTAL")).unwrap();
    assert!(total.ends_with("30.00–100.00%"), "{stdout}");
    assert!(stdout.contains("not compared: 7 of 10 chosen"), "{stdout}");
    assert!(stdout.contains("abandoned_at_shutdown="), "{stdout}");

    // The store holds the same accounting.
    let json = dir.path().join("r.json");
    let out = run(strings(&[
        "shadow",
        "report",
        "--store",
        store.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]))
    .await;
    let v = read_json(&json);
    assert_eq!(v["compared"], 3, "{v}");
    assert_eq!(v["not_compared"], 7, "{v}");
    assert_eq!(
        v["compared"].as_u64().unwrap()
            + v["errors"].as_u64().unwrap()
            + v["skipped"].as_u64().unwrap(),
        10
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("not compared: 7 of 10"), "{report}");
}

/// A sibling of #18.10 in replay: Ctrl-C lost the whole run (nothing flushed, no table, no
/// JSON). Now sending stops, what was in flight is counted as abandoned, and the table,
/// JSON and store are written before exit 130.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_interrupted_by_sigint_still_writes_its_counts_and_exits_130() {
    let primary = serve(|a| Answer::json(body(user_id(a), 1))).await;
    let candidate = serve(|a| {
        let id = user_id(a);
        Answer::json(body(id, 1)).delay(if id > 4 {
            Duration::from_secs(60)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, (1..=50).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
    let json = dir.path().join("out.json");
    let store = dir.path().join("s.db");
    let child = Command::new(BIN)
        .args(strings(&[
            "shadow",
            "replay",
            "--primary",
            &primary.url(),
            "--candidate",
            &candidate.url(),
            "--template",
            "/v1/users/{id}/stats",
            "--data",
            ids.to_str().unwrap(),
            "-c",
            "2",
            "--timeout",
            "120s",
            "--json",
            json.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(
        "first 4 answered by the candidate",
        Duration::from_secs(30),
        async || (candidate.hits() >= 6).then_some(()),
    )
    .await;
    sigint(&child);
    let (stdout, code) = tokio::task::spawn_blocking(move || wait_out(child))
        .await
        .unwrap();
    assert_eq!(code, Some(130), "{stdout}");
    assert!(
        stdout.contains("INTERRUPTED: 44 of 50 requests not sent"),
        "{stdout}"
    );
    let v = read_json(&json);
    assert_eq!(v["compared"], 4, "{v}");
    assert_eq!(v["skipped_by_reason"]["abandoned_at_shutdown"], 2, "{v}");
    let stored = scalpel_shadow::Store::read(&store).unwrap().summary(None);
    assert_eq!((stored.compared, stored.skipped), (4, 2));
}

/// A sibling in the store: a write SQLite refused was only logged (the `failed` counter
/// was never counted), and the final flush was skipped when nothing had changed since the
/// failed write — a replay passed with its counters missing from the file. Now the final
/// counters are always written and waited for, and a store that could not be completed
/// is one line on stderr and a FAIL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_written_fails_the_run_loudly() {
    let primary = serve(|a| Answer::json(body(user_id(a), 1))).await;
    let candidate =
        serve(|a| Answer::json(body(user_id(a), 1)).delay(Duration::from_secs(1))).await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.db");
    let child = Command::new(BIN)
        .args(strings(&[
            "shadow",
            "replay",
            "--primary",
            &primary.url(),
            "--candidate",
            &candidate.url(),
            "--template",
            "/v1/users/7/stats",
            "--store",
            store.to_str().unwrap(),
        ]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        "the replay is running",
        Duration::from_secs(30),
        async || (candidate.hits() >= 1).then_some(()),
    )
    .await;
    // Another process holds the write lock for as long as the replay runs.
    let lock = rusqlite::Connection::open(&store).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    lock.execute_batch("ROLLBACK").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("FAIL: the store is incomplete"), "{stdout}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("scalpel: store ") && l.contains("the file is incomplete")),
        "{stderr}"
    );
}

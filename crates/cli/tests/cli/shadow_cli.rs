//! `scalpel shadow` as a user runs it: the real binary against servers on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

// The shadow tests' peers: TLS and h2 servers that all answer the same JSON document.
use scalpel_testkit::peers::json as peers;
use scalpel_testkit::{curl, read_json, signal};
use serde_json::Value;
use support::{Answer, Asked, eventually, get, send, serve};

/// Scripted test servers and a client, as the shadow tests use them.
pub(crate) mod support {
    pub(crate) use scalpel_testkit::eventually_some as eventually;
    pub(crate) use scalpel_testkit::scripted::*;
}

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
    bad_url[5] = "ftp://127.0.0.1:1".into();
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
pub(crate) struct ProxyProc {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) admin: Option<String>,
}

impl Drop for ProxyProc {
    /// A failing test must not leave a proxy running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scalpel shadow proxy --listen 127.0.0.1:0 ARGS`, under the usual umask (022), with
/// its summary on a pipe (`child.stdout`).
// The child is returned inside `ProxyProc`, whose `Drop` kills and waits for it.
#[allow(clippy::zombie_processes)]
pub(crate) fn spawn_proxy(args: &[String]) -> ProxyProc {
    // `exec`: the child is the proxy itself, so a signal reaches it.
    let mut child = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\"", BIN])
        .args(["shadow", "proxy", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
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
            // `ADDR, admin on …` or `ADDR (TLS: h2, http/1.1), admin on …`
            let addr = rest
                .split([',', ';', ' '])
                .next()
                .unwrap()
                .trim()
                .to_string();
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

pub(crate) fn sigint(child: &Child) {
    signal(child.id(), "INT");
}

/// Waits for a child to exit (a hang guard, not a timing assertion) and returns its
/// stdout and exit code.
fn wait_out(child: Child) -> (String, Option<i32>) {
    let out = scalpel_testkit::finish(child, Duration::from_secs(60), "the process after SIGINT");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
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

// ---------------------------------------------------------------------------------------
// TLS and HTTP/2 (issue #12)

/// The proxy listens with TLS (ALPN h2 and http/1.1); `curl --http2` and `curl
/// --http1.1` get the Node h2 primary's answers through it, while every request is
/// mirrored to an nginx TLS + h2 candidate and compared, each upstream with its own
/// flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http2_through_the_tls_proxy_to_https_and_h2_upstreams() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let p = spawn_proxy(&strings(&[
        "--tls-cert",
        certs.good.cert.to_str().unwrap(),
        "--tls-key",
        certs.good.key.to_str().unwrap(),
        "--cacert",
        certs.ca.to_str().unwrap(),
        "--primary",
        &format!("https://localhost:{}", node.ports[0]),
        "--primary-http2",
        "--candidate",
        &format!("https://localhost:{}", nginx.ports[0]),
        "--candidate-http2",
        "--admin",
        "127.0.0.1:0",
    ]));
    let port = p.url.rsplit(':').next().unwrap().to_string();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let ca = certs.ca.to_str().unwrap();
    for (id, version) in [(1, "--http2"), (2, "--http2"), (3, "--http1.1")] {
        let url = format!("https://localhost:{port}/v1/users/{id}?days=30");
        let out = curl(&[
            "-sS",
            version,
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "-w",
            "\n%{http_version}",
            &url,
        ]);
        let (body, proto) = out.rsplit_once('\n').unwrap();
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["path"], format!("/v1/users/{id}?days=30"));
        assert_eq!(proto, if version == "--http2" { "2" } else { "1.1" });
    }
    let c = support::client();
    let admin = p.admin.clone().unwrap();
    let v = eventually("3 compared", Duration::from_secs(60), async || {
        let v = summary_json(&c, &admin).await;
        (v["compared"] == 3).then_some(v)
    })
    .await;
    assert_eq!(
        (v["matched"].as_u64(), v["errors"].as_u64()),
        (Some(3), Some(0))
    );
    let m = String::from_utf8(get(&c, &format!("{admin}/metrics")).await.body).unwrap();
    assert!(
        m.contains("scalpel_shadow_client_connections_total{protocol=\"h2\"} 2"),
        "{m}"
    );
}

/// Bad TLS input before any traffic: an untrusted certificate, a wrong name (tested with
/// `--resolve` against loopback), a server that refuses `--http2`, an unreadable CA file,
/// a listener key that is not the certificate's. One line each, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_one_line_and_exit_2_before_any_traffic() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let primary = serve(|_| Answer::json("{}")).await;
    let ca = certs.ca.to_str().unwrap().to_string();
    let tls_port = nginx.ports[0];
    let replay = |more: &[&str]| {
        let mut v = strings(&[
            "shadow",
            "replay",
            "--primary",
            &primary.url(),
            "--template",
            "/x",
        ]);
        v.extend(strings(more));
        v
    };
    let proxy = |more: &[&str]| {
        let mut v = strings(&[
            "shadow",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--primary",
            &primary.url(),
        ]);
        v.extend(strings(more));
        v
    };
    let localhost = format!("https://localhost:{tls_port}");
    // A name the trusted certificate does not hold (it holds localhost and scalpel.test).
    let real_name = format!("https://unlisted.test:{tls_port}");
    let resolve = format!("unlisted.test:{tls_port}:127.0.0.1");
    let missing = certs.dir.path().join("nope.pem");
    let h1_only = format!("https://localhost:{}", node.ports[1]);
    let cases = [
        (
            replay(&["--candidate", &localhost]),
            "candidate https://localhost",
            "is not trusted",
        ),
        (
            replay(&[
                "--candidate",
                &real_name,
                "--candidate-resolve",
                &resolve,
                "--cacert",
                &ca,
            ]),
            "candidate https://unlisted.test",
            "not valid for the name unlisted.test",
        ),
        (
            proxy(&[
                "--candidate",
                &h1_only,
                "--candidate-http2",
                "--candidate-cacert",
                &ca,
            ]),
            "candidate https://localhost",
            "server does not speak h2",
        ),
        (
            replay(&[
                "--candidate",
                &localhost,
                "--cacert",
                missing.to_str().unwrap(),
            ]),
            "candidate https://localhost",
            "cannot use CA file",
        ),
        (
            proxy(&[
                "--candidate",
                &primary.url(),
                "--tls-cert",
                certs.good.cert.to_str().unwrap(),
                "--tls-key",
                certs.wrong_name.key.to_str().unwrap(),
            ]),
            "the key",
            "does not belong to the certificate",
        ),
    ];
    for (args, who, what) in cases {
        let out = run(args.clone()).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("scalpel: ") && err.contains(who) && err.contains(what),
            "{args:?}: {err}"
        );
        // Said once: the cause was repeated three times over its error chain.
        assert_eq!(err.matches(what).count(), 1, "{err}");
        assert!(!err.contains("DnsName("), "names as written: {err}");
    }
    assert_eq!(primary.hits(), 0, "no traffic before the checks");
}

// ---------------------------------------------------------------------------------------
// Recorded traffic (issue #15)

/// A server that records every request and answers a JSON document of it; the
/// candidate variant answers differently for paths containing `differ`.
async fn recording(differ: bool) -> (support::TestServer, Arc<Mutex<Vec<Asked>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = serve(move |a: &Asked| {
        log.lock().unwrap().push(a.clone());
        let changed = differ && a.path_and_query.contains("differ");
        Answer::json(
            serde_json::json!({
                "path": a.path_and_query,
                "method": a.method,
                "bytes": a.body.len(),
                "v": if changed { 2 } else { 1 },
            })
            .to_string(),
        )
    })
    .await;
    (server, seen)
}

fn header<'a>(a: &'a Asked, name: &str) -> Option<&'a str> {
    a.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A capture made by a real proxy run is replayed by `shadow replay --from`: the proxy
/// captures exactly the requests its sampling chose (the same ones it mirrors), with
/// secrets redacted, rotated at `--capture-max-size`, counted in `/metrics`; the files
/// concatenated replay every captured request, POST bodies included, to two new
/// upstreams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_made_by_a_real_proxy_is_replayed_by_replay_from() {
    let (primary, _) = recording(false).await;
    let (candidate, mirrored) = recording(false).await;
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cap.jsonl");
    let mut p = spawn_proxy(&strings(&[
        "--primary",
        &primary.url(),
        "--candidate",
        &candidate.url(),
        "--admin",
        "127.0.0.1:0",
        "--sample",
        "50",
        "--sample-key",
        "query:user",
        "--redact",
        "token",
        "--redact",
        "password",
        "--capture",
        cap.to_str().unwrap(),
        "--capture-max-size",
        "700",
        "--capture-keep",
        "9",
    ]));
    let c = support::client();
    for i in 1..=20 {
        let got = send(
            &c,
            "GET",
            &format!("{}/v1/items/{i}?user=u{i}&token=SECRET-{i}", p.url),
            &[("authorization", "Bearer SECRET-BEARER")],
            b"",
        )
        .await;
        assert_eq!(got.status, 200);
    }
    // The same users post too: a user's requests are all sampled in or all out.
    for i in 1..=8 {
        let body = format!(r#"{{"user":"u{i}","password":"SECRET-PW"}}"#);
        let got = send(
            &c,
            "POST",
            &format!("{}/v1/orders?user=u{i}", p.url),
            &[("content-type", "application/json")],
            body.as_bytes(),
        )
        .await;
        assert_eq!(got.status, 200);
    }
    let admin = p.admin.clone().unwrap();
    // The mirrors of the sampled GETs have all arrived: the sampling decided.
    let chosen = eventually("mirrors compared", Duration::from_secs(60), async || {
        let v = summary_json(&c, &admin).await;
        let m = String::from_utf8(get(&c, &format!("{admin}/metrics")).await.body).unwrap();
        let chosen = m
            .lines()
            .find(|l| l.starts_with("scalpel_shadow_chosen_total "))?
            .rsplit(' ')
            .next()?
            .parse::<u64>()
            .ok()?;
        (chosen > 0 && v["compared"] == chosen).then_some(chosen)
    })
    .await;
    assert!(chosen < 20, "half the users, by key: {chosen}");
    let m = eventually("captured", Duration::from_secs(60), async || {
        let m = String::from_utf8(get(&c, &format!("{admin}/metrics")).await.body).unwrap();
        let written: u64 = m
            .lines()
            .find(|l| l.starts_with("scalpel_shadow_capture_records_total "))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()?;
        (written >= chosen).then_some(m)
    })
    .await;
    assert!(m.contains("scalpel_shadow_capture_file_bytes "), "{m}");
    sigint(&p.child);
    let status = tokio::task::spawn_blocking(move || p.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success());

    // The rotated files, oldest first, make one capture.
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cap.jsonl")
        })
        .collect();
    assert!(files.len() > 2, "rotated at 700 bytes: {files:?}");
    files.sort_by_key(|p| {
        std::cmp::Reverse(
            p.extension()
                .and_then(|e| e.to_str()?.parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert!(!all.contains("SECRET"), "a secret in the capture:\n{all}");
    let joined = dir.path().join("all.jsonl");
    std::fs::write(&joined, &all).unwrap();
    let records: Vec<Value> = all
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v.get("method").is_some())
        .collect();
    // The GETs captured are the GETs mirrored: one sampling decision for both.
    let users = |paths: Vec<String>| -> std::collections::BTreeSet<String> {
        paths
            .into_iter()
            .filter(|p| p.starts_with("/v1/items/"))
            .map(|p| {
                p.split("user=")
                    .nth(1)
                    .unwrap()
                    .split('&')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let captured_gets = users(
        records
            .iter()
            .map(|r| r["path"].as_str().unwrap().to_string())
            .collect(),
    );
    let mirrored_gets = users(
        mirrored
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.path_and_query.clone())
            .collect(),
    );
    assert_eq!(captured_gets, mirrored_gets);
    let posts = records.iter().filter(|r| r["method"] == "POST").count();

    let (p2, seen) = recording(false).await;
    let (c2, _) = recording(false).await;
    let json = dir.path().join("replay.json");
    let out = run(strings(&[
        "shadow",
        "replay",
        "--from",
        joined.to_str().unwrap(),
        "--primary",
        &p2.url(),
        "--candidate",
        &c2.url(),
        "--allow-unsafe",
        "--set-header",
        "Authorization: Bearer replay-token",
        "-c",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&json);
    assert_eq!(v["source"]["format"], "capture");
    assert_eq!(v["source"]["usable"], records.len());
    assert_eq!(v["source"]["schedule"], "pool");
    assert_eq!(v["compared"], records.len());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), records.len());
    for (asked, rec) in seen.iter().zip(&records) {
        assert_eq!(asked.path_and_query, rec["path"].as_str().unwrap());
        assert_eq!(header(asked, "authorization"), Some("Bearer replay-token"));
        if asked.method == "POST" {
            let body: Value = serde_json::from_slice(&asked.body).unwrap();
            assert_eq!(body["password"], "[REDACTED]");
        } else {
            assert!(
                asked.path_and_query.contains("token=%5BREDACTED%5D"),
                "{}",
                asked.path_and_query
            );
        }
    }
    assert_eq!(seen.iter().filter(|a| a.method == "POST").count(), posts);
    // Sampled POSTs are captured too (a replay filters unsafe methods itself): those of
    // the users whose GETs were sampled.
    let posted: std::collections::BTreeSet<String> = records
        .iter()
        .filter(|r| r["method"] == "POST")
        .map(|r| {
            r["path"]
                .as_str()
                .unwrap()
                .split("user=")
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    let expected: std::collections::BTreeSet<String> = captured_gets
        .iter()
        .filter(|u| u[1..].parse::<u32>().unwrap() <= 8)
        .cloned()
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(posted, expected, "{all}");
}

/// nginx writes an access log of requests sent with curl; the log (plus a broken line)
/// is replayed against two real upstreams on its recorded schedule: they see the logged
/// requests in order, the report counts what was skipped and why, shows the malformed
/// line with its number, and groups by route with consistency per route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nginx_access_log_is_replayed_against_two_real_upstreams() {
    let certs = peers::certs();
    let nginx = peers::nginx(&certs);
    let base = format!("http://127.0.0.1:{}", nginx.ports[3]);
    let mut sent = Vec::new();
    for id in 1..=6 {
        let path = format!("/v1/users/{id}/stats?days=30");
        curl(&[
            "-sS",
            "-o",
            "/dev/null",
            "-A",
            "replay-test/1.0",
            &format!("{base}{path}"),
        ]);
        sent.push(path);
    }
    curl(&[
        "-sS",
        "-o",
        "/dev/null",
        &format!("{base}/v1/users/differ/stats"),
    ]);
    sent.push("/v1/users/differ/stats".into());
    curl(&["-sS", "-o", "/dev/null", &format!("{base}/static/app.js")]);
    curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-d",
        "{}",
        &format!("{base}/v1/orders"),
    ]);
    curl(&["-sS", "-o", "/dev/null", &format!("{base}/health")]);
    sent.push("/health".into());
    let logged = eventually("10 lines logged", Duration::from_secs(30), async || {
        let text = std::fs::read_to_string(nginx.file("access.log")).ok()?;
        (text.lines().count() == 10).then_some(text)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, format!("{logged}this is not a log line\n")).unwrap();

    let (primary, p_seen) = recording(false).await;
    let (candidate, c_seen) = recording(true).await;
    let json = dir.path().join("out.json");
    let out = run(strings(&[
        "shadow",
        "replay",
        "--from",
        log.to_str().unwrap(),
        "--primary",
        &primary.url(),
        "--candidate",
        &candidate.url(),
        "--exclude-path",
        "^/static/",
        "--speed",
        "100",
        "--json",
        json.to_str().unwrap(),
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "one route differs:\n{stdout}");
    assert!(
        stdout.contains("11 records: 8 usable") && stdout.contains("malformed line 11: "),
        "{stdout}"
    );
    assert!(stdout.contains("schedule: recorded schedule"), "{stdout}");
    // On the schedule, requests of the same second go out a few µs apart at --speed
    // 100: each side sees every logged GET (in whatever order its connections deliver).
    let mut expected = sent.clone();
    expected.sort();
    for seen in [&p_seen, &c_seen] {
        let seen = seen.lock().unwrap();
        let mut paths: Vec<_> = seen.iter().map(|a| a.path_and_query.clone()).collect();
        paths.sort();
        assert_eq!(paths, expected, "the logged GETs");
        assert!(
            seen.iter()
                .filter(|a| a.path_and_query.contains("stats?days"))
                .all(|a| header(a, "user-agent") == Some("replay-test/1.0"))
        );
    }
    let v = read_json(&json);
    assert_eq!(v["source"]["format"], "access-log");
    assert_eq!(
        v["source"]["skipped"],
        serde_json::json!({"malformed": 1, "path_excluded": 1, "unsafe_method": 1})
    );
    assert_eq!(v["source"]["first_malformed"][0]["line"], 11);
    let routes: Vec<(String, u64, u64)> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["endpoint"].as_str().unwrap().to_string(),
                e["compared"].as_u64().unwrap(),
                e["mismatched"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(routes.contains(&("/health".into(), 1, 0)), "{routes:?}");
    assert!(
        routes.contains(&("/v1/users/{id}/stats".into(), 6, 0)),
        "{routes:?}"
    );
    assert!(
        routes.contains(&("/v1/users/differ/stats".into(), 1, 1)),
        "{routes:?}"
    );
    let table_line = stdout
        .lines()
        .find(|l| l.starts_with("/v1/users/{id}/stats"))
        .unwrap();
    assert!(table_line.ends_with("100.00%"), "{table_line}");

    // As a pool, one at a time: the upstreams see the log's order exactly.
    let (primary, p_seen) = recording(false).await;
    let (candidate, _) = recording(false).await;
    let out = run(strings(&[
        "shadow",
        "replay",
        "--from",
        log.to_str().unwrap(),
        "--primary",
        &primary.url(),
        "--candidate",
        &candidate.url(),
        "--exclude-path",
        "^/static/",
        "-c",
        "1",
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("schedule: as a pool, 1 at a time"),
        "{stdout}"
    );
    let paths: Vec<_> = p_seen
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.path_and_query.clone())
        .collect();
    assert_eq!(paths, sent, "the logged GETs, in order");
}

/// A browser HAR with POST bodies (JSON text, base64 binary, form params): skipped and
/// counted without `--allow-unsafe`, sent byte for byte with it; each method's route on
/// its own line. A HAR with nothing usable is one line and exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_har_with_post_bodies_is_replayed_with_allow_unsafe() {
    let entry = |t: &str, method: &str, url: &str, post: Option<Value>| {
        let mut req = serde_json::json!({
            "method": method, "url": url, "httpVersion": "h2",
            "headers": [{"name": "accept", "value": "application/json"},
                        {"name": ":authority", "value": "shop.example"}],
            "queryString": [], "cookies": [], "headersSize": -1, "bodySize": 0
        });
        if let Some(p) = post {
            req["postData"] = p;
        }
        serde_json::json!({"startedDateTime": t, "time": 5, "request": req,
            "response": {"status": 200, "headers": [], "content": {"size": 0}}})
    };
    let har = |entries: Vec<Value>| {
        serde_json::json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
            "entries": entries}})
        .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let shop = dir.path().join("shop.har");
    std::fs::write(
        &shop,
        har(vec![
            entry("2025-01-01T10:00:00.000Z", "GET", "https://shop.example/api/cart?x=1", None),
            entry(
                "2025-01-01T10:00:00.100Z",
                "POST",
                "https://shop.example/api/orders",
                Some(serde_json::json!({"mimeType": "application/json", "text": "{\"sku\":\"a-1\",\"qty\":2}"})),
            ),
            entry(
                "2025-01-01T10:00:00.200Z",
                "POST",
                "https://shop.example/api/upload",
                Some(serde_json::json!({"mimeType": "application/octet-stream", "text": "AAEC/w==", "encoding": "base64"})),
            ),
            entry(
                "2025-01-01T10:00:00.300Z",
                "POST",
                "https://shop.example/api/orders",
                Some(serde_json::json!({"mimeType": "application/x-www-form-urlencoded",
                    "params": [{"name": "sku", "value": "b 2"}, {"name": "qty", "value": "1"}]})),
            ),
            entry("2025-01-01T10:00:00.400Z", "GET", "data:image/png;base64,AAAA", None),
        ]),
    )
    .unwrap();
    let replay = |primary: &str, candidate: &str, more: &[&str]| {
        let mut v = strings(&[
            "shadow",
            "replay",
            "--from",
            shop.to_str().unwrap(),
            "--primary",
            primary,
            "--candidate",
            candidate,
            "--speed",
            "10",
        ]);
        v.extend(strings(more));
        v
    };

    let (primary, seen) = recording(false).await;
    let (candidate, _) = recording(false).await;
    let out = run(replay(&primary.url(), &candidate.url(), &[])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("5 records: 1 usable")
            && stdout.contains("1 skipped (not replayable")
            && stdout.contains("3 skipped (unsafe method"),
        "{stdout}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);

    let (primary, seen) = recording(false).await;
    let (candidate, c_seen) = recording(false).await;
    let out = run(replay(
        &primary.url(),
        &candidate.url(),
        &["--allow-unsafe"],
    ))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // 10 ms apart at --speed 10: the arrival order is the connections', so compared sorted.
    for seen in [seen, c_seen] {
        let seen = seen.lock().unwrap();
        let mut got: Vec<(&str, &str, &[u8], Option<&str>)> = seen
            .iter()
            .map(|a| {
                (
                    a.method.as_str(),
                    a.path_and_query.as_str(),
                    a.body.as_slice(),
                    header(a, "content-type"),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("GET", "/api/cart?x=1", &b""[..], None),
                (
                    "POST",
                    "/api/orders",
                    &b"sku=b%202&qty=1"[..],
                    Some("application/x-www-form-urlencoded")
                ),
                (
                    "POST",
                    "/api/orders",
                    &br#"{"sku":"a-1","qty":2}"#[..],
                    Some("application/json")
                ),
                (
                    "POST",
                    "/api/upload",
                    &[0u8, 1, 2, 255][..],
                    Some("application/octet-stream")
                ),
            ]
        );
        assert!(
            seen.iter()
                .all(|a| header(a, "host") != Some("shop.example"))
        );
    }
    let route = |name: &str| stdout.lines().any(|l| l.starts_with(name));
    assert!(
        route("POST /api/orders") && route("POST /api/upload") && route("/api/cart"),
        "{stdout}"
    );

    // The method filter, a forced format and a dropped header.
    let (primary, seen) = recording(false).await;
    let out = run(replay(
        &primary.url(),
        &candidate.url(),
        &[
            "--from-format",
            "har",
            "--method",
            "POST",
            "--allow-unsafe",
            "--drop-header",
            "accept",
        ],
    ))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("1 skipped (method not selected"),
        "{stdout}"
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert!(
            seen.iter()
                .all(|a| a.method == "POST" && header(a, "accept").is_none())
        );
    }

    // Nothing usable: one line naming the file and the counts, exit 2.
    let only_posts = dir.path().join("posts.har");
    std::fs::write(
        &only_posts,
        har(vec![entry(
            "2025-01-01T10:00:00.000Z",
            "POST",
            "https://shop.example/api/orders",
            Some(serde_json::json!({"mimeType": "application/json", "text": "{}"})),
        )]),
    )
    .unwrap();
    let mut args = replay(&primary.url(), &candidate.url(), &[]);
    args[3] = only_posts.to_string_lossy().into_owned();
    let out = run(args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no usable request") && err.contains("unsafe"),
        "{err}"
    );
}

//! Issue 31, as a user runs the tools: the admin planes and the stored traffic of real
//! `scalpel shadow` processes, driven by requests written byte for byte as a browser or a
//! client sends them, and the real SQLite store and capture files they leave.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::shadow_cli::support::{Answer, Asked, eventually, raw_exchange, serve};
use crate::shadow_cli::{sigint, spawn_proxy};

/// A raw HTTP/1.1 exchange: the status and the body of the answer.
async fn raw(addr: &str, request: &str) -> (u16, String) {
    let out = raw_exchange(addr, request.as_bytes()).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// The error body's kind, read with the toolkit's own grammar.
fn kind(body: &str) -> String {
    scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the error body: {body}"))
        .0
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The shadow proxy's admin (issue 31 item 1): a page rebinding its own name to the
/// admin's address (`Host: evil.example:PORT`) read `/metrics`, `/summary.json` and the
/// live page with 200; now 421 on every path, with the error body. A state-changing
/// request from another site is refused; the admin's own addresses and a configured name
/// still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_admin_refuses_rebound_hosts_and_cross_site_posts() {
    let primary = serve(|_| Answer::json("{}")).await;
    let p = spawn_proxy(&strings(&[
        "--primary",
        &primary.url(),
        "--candidate",
        &primary.url(),
        "--admin",
        "127.0.0.1:0",
        "--admin-host",
        "shadow.internal",
    ]));
    let admin = host_port(p.admin.as_deref().unwrap());
    let port = admin.rsplit(':').next().unwrap();
    for path in [
        "/metrics",
        "/summary.json",
        "/",
        "/live/live.js",
        "/live/snapshot",
    ] {
        let (status, body) = raw(
            &admin,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert_eq!(status, 421, "{path}: {body}");
        assert_eq!(kind(&body), "misdirected_request");
    }
    for host in [
        admin.clone(),
        format!("localhost:{port}"),
        format!("shadow.internal:{port}"),
    ] {
        let (status, body) = raw(
            &admin,
            &format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{host}: {body}");
        assert!(body.contains("scalpel_shadow_requests_total"));
    }
    // What a form on another site sends.
    let (status, body) = raw(
        &admin,
        &format!(
            "POST /summary.json HTTP/1.1\r\nHost: {admin}\r\nOrigin: https://evil.example\r\n\
             Sec-Fetch-Site: cross-site\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\
             Connection: close\r\n\r\nhi"
        ),
    )
    .await;
    assert_eq!(
        (status, kind(&body).as_str()),
        (403, "cross_site"),
        "{body}"
    );
    let (status, body) = raw(
        &admin,
        "GET /metrics HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        (status, kind(&body).as_str()),
        (400, "bad_request"),
        "{body}"
    );
}

/// The shadow proxy's request rules (issue 31 item 5): a request without a host, with
/// two, or with one that is not `host[:port]` is refused (400) and reaches no upstream;
/// a client's forwarding claims, in every spelling an application reads, reach neither
/// the primary nor the candidate unless the client is a `--trusted-proxy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_proxy_refuses_bad_hosts_and_strips_untrusted_forwarding_claims() {
    let seen: Arc<Mutex<Vec<Asked>>> = Arc::default();
    let log = seen.clone();
    let primary = serve(move |a| {
        log.lock().unwrap().push(a.clone());
        Answer::json("{}")
    })
    .await;
    let cseen: Arc<Mutex<Vec<Asked>>> = Arc::default();
    let clog = cseen.clone();
    let candidate = serve(move |a| {
        clog.lock().unwrap().push(a.clone());
        Answer::json("{}")
    })
    .await;
    let claims = "X-Forwarded-For: 6.6.6.6\r\nx_forwarded_for: 6.6.6.6\r\nX_Forwarded_Proto: https\r\n\
                  X-Forwarded-Server: evil\r\nX-Forwarded-Prefix: /admin\r\nX-Client-IP: 6.6.6.6\r\n\
                  True-Client-IP: 6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n\
                  Forwarded: for=6.6.6.6\r\n";
    for trusted in [false, true] {
        seen.lock().unwrap().clear();
        cseen.lock().unwrap().clear();
        let mut args = strings(&["--primary", &primary.url(), "--candidate", &candidate.url()]);
        if trusted {
            args.extend(strings(&["--trusted-proxy", "127.0.0.0/8"]));
        }
        let p = spawn_proxy(&args);
        let addr = host_port(&p.url);
        for bad in [
            "GET /a HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\x01b\r\nConnection: close\r\n\r\n",
        ] {
            let (status, _) = raw(&addr, bad).await;
            assert_eq!(status, 400, "{bad:?}");
        }
        assert!(
            seen.lock().unwrap().is_empty(),
            "a bad request reached the primary"
        );
        let (status, body) = raw(
            &addr,
            &format!("GET /ok HTTP/1.1\r\nHost: app.example\r\n{claims}Connection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        eventually("the mirror", Duration::from_secs(30), async || {
            (!cseen.lock().unwrap().is_empty()).then_some(())
        })
        .await;
        for side in [&seen, &cseen] {
            let asked = side.lock().unwrap();
            let names: Vec<&str> = asked[0].headers.iter().map(|(k, _)| k.as_str()).collect();
            let claimed = names
                .iter()
                .filter(|n| scalpel_http::is_forwarding_claim(n.as_bytes()))
                .count();
            assert_eq!(
                claimed,
                if trusted { 10 } else { 0 },
                "trusted {trusted}: {names:?}"
            );
        }
    }
}

const SECRET: &str = "SECRET-7f3a91";

/// One request of the redaction test: how it is sent and what the primary answers.
struct Case {
    target: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

/// Every form of issue 31 item 3 in which a name's value was stored in clear.
fn redaction_cases() -> Vec<Case> {
    let json = || vec![("content-type", "application/json".to_string())];
    let mut deep = String::new();
    for _ in 0..141 {
        deep.push_str(r#"{"a":"#);
    }
    deep.push_str(&format!(r#"{{"password":"{SECRET}"}}"#));
    deep.push_str(&"}".repeat(141));
    let body = |b: &str| b.as_bytes().to_vec();
    vec![
        // 0-3: bodies Node reads and serde_json did not (withheld: request_body)
        Case {
            target: "/c/0".into(),
            headers: json(),
            body: deep.into_bytes(),
        },
        Case {
            target: "/c/1".into(),
            headers: json(),
            body: body(&format!(r#"{{"password":"{SECRET}",}}"#)),
        },
        Case {
            target: "/c/2".into(),
            headers: json(),
            body: [
                b"\xef\xbb\xbf".as_slice(),
                format!(r#"{{"password":"{SECRET}"}}"#).as_bytes(),
            ]
            .concat(),
        },
        Case {
            target: "/c/3".into(),
            headers: json(),
            body: body(&format!("{{\"a\":1}}\n{{\"password\":\"{SECRET}\"}}\n")),
        },
        // 4-7: the name in spellings applications read (redacted in place)
        Case {
            target: format!("/c/4?password%5B%5D={SECRET}"),
            headers: json(),
            body: body("{}"),
        },
        Case {
            target: format!("/c/5?x=1;password={SECRET}"),
            headers: json(),
            body: body("{}"),
        },
        Case {
            target: "/c/6".into(),
            headers: vec![("content-type", "application/x-www-form-urlencoded".into())],
            body: body(&format!("user%5Bpassword%5D={SECRET}&x=1")),
        },
        Case {
            target: "/c/7".into(),
            headers: vec![
                ("content-type", "application/json".into()),
                (
                    "referer",
                    format!("https://app.example/login?password={SECRET}"),
                ),
            ],
            body: body("{}"),
        },
        // 8: a query whose names do not decode (withheld: query)
        Case {
            target: format!("/c/8?pass%zzword={SECRET}"),
            headers: json(),
            body: body("{}"),
        },
        // 9: the primary's answer is not quite JSON (withheld: response_body)
        Case {
            target: "/c/9".into(),
            headers: json(),
            body: body("{}"),
        },
    ]
}

fn case_of(a: &Asked) -> u64 {
    a.path_and_query
        .trim_start_matches("/c/")
        .split(['?', ';'])
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(99)
}

/// Every file in `dir` whose name starts with one of `prefixes`: its mode, and whether
/// its bytes hold the secret.
fn scan(dir: &Path, prefixes: &[&str]) -> Vec<(String, u32, bool)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !prefixes.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap_or_default();
        let leaked = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        out.push((name, meta.permissions().mode() & 0o777, leaked));
    }
    out.sort();
    out
}

fn metric(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in\n{text}"))
}

/// Issue 31 items 3 and 4: with `--redact password`, bodies and queries the redactor
/// cannot read whole were stored in clear in the SQLite store and the capture (a body
/// nested 141 levels, a trailing comma, a byte order mark, NDJSON, `password%5B%5D`,
/// `;password=`), and both files were created 0644. Now not one byte of the secret in
/// any file, what was withheld is counted in `/metrics` and the run summary, and every
/// file — the store with its WAL, the capture and its rotations, the reports — is 0600
/// under umask 022.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redaction_fails_closed_in_the_store_and_the_capture_and_both_are_private() {
    let primary = serve(|a| {
        let i = case_of(a);
        if i == 9 {
            Answer::json(format!(r#"{{"password":"{SECRET}",}}"#))
        } else {
            Answer::json(format!(r#"{{"case":{i}}}"#))
        }
    })
    .await;
    // A field of its own per case: every case is a signature of its own, so a sample.
    let candidate = serve(|a| {
        let i = case_of(a);
        Answer::json(format!(r#"{{"case":{i},"f{i}":1}}"#))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("shadow.db");
    let capture = dir.path().join("cap.jsonl");
    let mut p = spawn_proxy(&strings(&[
        "--primary",
        &primary.url(),
        "--candidate",
        &candidate.url(),
        "--admin",
        "127.0.0.1:0",
        "--mirror-unsafe",
        "--redact",
        "password",
        "--store",
        store.to_str().unwrap(),
        "--capture",
        capture.to_str().unwrap(),
        "--capture-max-size",
        "1500",
        "--capture-keep",
        "20",
    ]));
    let admin = p.admin.clone().unwrap();
    let addr = host_port(&p.url);
    let cases = redaction_cases();
    for c in &cases {
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: app.example\r\nContent-Length: {}\r\nConnection: close\r\n",
            c.target,
            c.body.len()
        );
        for (k, v) in &c.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let (status, body) = raw(&addr, &(head + &String::from_utf8_lossy(&c.body))).await;
        assert_eq!(status, 200, "{}: {body}", c.target);
    }
    let n = cases.len() as u64;
    let metrics = eventually("every case compared", Duration::from_secs(60), async || {
        let (_, m) = raw(
            &host_port(&admin),
            &format!(
                "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                host_port(&admin)
            ),
        )
        .await;
        (metric(&m, "scalpel_shadow_compared_total") == n
            && metric(&m, "scalpel_shadow_capture_records_total") == n)
            .then_some(m)
    })
    .await;
    // While it runs (the WAL is there) and after it stopped: private, and no secret.
    let files = ["shadow.db", "cap.jsonl"];
    let running = scan(dir.path(), &files);
    assert!(
        running.iter().any(|(n, ..)| n == "shadow.db-wal"),
        "{running:?}"
    );
    for (name, mode, leaked) in &running {
        assert!(!leaked, "the secret is in {name}");
        assert_eq!(*mode, 0o600, "{name} is {mode:o}");
    }
    for (sample, want) in [
        (
            "scalpel_shadow_redaction_withheld_total{part=\"request_body\"}",
            4,
        ),
        (
            "scalpel_shadow_redaction_withheld_total{part=\"response_body\"}",
            1,
        ),
        ("scalpel_shadow_redaction_withheld_total{part=\"query\"}", 1),
        (
            "scalpel_shadow_capture_redaction_withheld_total{part=\"body\"}",
            4,
        ),
        (
            "scalpel_shadow_capture_redaction_withheld_total{part=\"query\"}",
            1,
        ),
    ] {
        assert_eq!(metric(&metrics, sample), want, "{sample}");
    }
    sigint(&p.child);
    let (status, stdout) = tokio::task::spawn_blocking(move || {
        let status = p.child.wait().unwrap();
        let mut out = String::new();
        p.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        (status, out)
    })
    .await
    .unwrap();
    assert!(
        status.success() || status.code() == Some(1),
        "{status:?}\n{stdout}"
    );
    assert!(
        stdout.contains("redaction withheld (unreadable, stored as [REDACTED]): query=1, request_body=4, response_body=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("capture: --redact withheld 4 bodies and 1 queries"),
        "{stdout}"
    );
    let report = dir.path().join("report.json");
    let html = dir.path().join("report.html");
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "umask 022 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_scalpel"),
        ])
        .args(["shadow", "report", "--store", store.to_str().unwrap()])
        .args([
            "--json",
            report.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(report.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(stored["redaction_withheld"]["request_body"], 4, "{stored}");
    let samples = stored["samples"].as_array().unwrap();
    assert_eq!(samples.len(), cases.len());
    let withheld = samples
        .iter()
        .filter(|s| s["request_body"] == "[REDACTED]")
        .count();
    assert_eq!(withheld, 4);

    let after = scan(dir.path(), &[files[0], files[1], "report"]);
    let rotated = after
        .iter()
        .filter(|(n, ..)| n.starts_with("cap.jsonl."))
        .count();
    assert!(rotated >= 1, "the capture rotated at 1500 bytes: {after:?}");
    for (name, mode, leaked) in &after {
        assert!(!leaked, "the secret is in {name}");
        assert_eq!(*mode, 0o600, "{name} is {mode:o}");
    }
    // The capture kept every request, the unreadable parts as [REDACTED].
    let mut all = String::new();
    for (name, ..) in after.iter().filter(|(n, ..)| n.starts_with("cap.jsonl")) {
        all.push_str(&std::fs::read_to_string(dir.path().join(name)).unwrap());
    }
    assert_eq!(
        all.lines()
            .filter(|l| l.contains("\"method\":\"POST\""))
            .count(),
        cases.len()
    );
    assert!(all.contains("[REDACTED]"));
}

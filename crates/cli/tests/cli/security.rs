//! Issue 31, as a user runs the tools: the admin planes and the stored traffic of real
//! `scalpel shadow` processes, driven by requests written byte for byte as a browser or a
//! client sends them, and the real SQLite store and capture files they leave; what a real
//! `scalpel serve` gives its workers, and what its `--check` refuses or warns about.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::shadow_cli::support::{Answer, Asked, eventually, raw_exchange, serve};
use crate::shadow_cli::{sigint, spawn_proxy};

/// A raw HTTP/1.1 exchange: the status and the body of the answer.
async fn raw(addr: &str, request: &str) -> (u16, String) {
    scalpel_testkit::raw::status_and_body(&raw_exchange(addr, request.as_bytes()).await)
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

/// Issue 31 item 2: serve's own credential, `SCALPEL_ADMIN_TOKEN`, was in every worker's
/// environment (std passes the parent's on), where an application that shows its
/// environment (an error page, a crash report) shows it too. The real workers — one
/// behind the balancer, one in direct mode, whose environment is built before fork —
/// are read through `/proc/PID/environ`: the token is gone, everything else stays.
#[test]
fn workers_never_inherit_serves_admin_token() {
    use crate::serve_cli::{app_js, free_base, free_port, http, spawn_serve};
    let token = "tok-0123456789abcdef-secret";
    let (listen, admin, direct) = (free_port(), free_port(), free_port());
    let (base, dbase) = (free_base(2), free_base(2));
    let app = app_js();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin = \"127.0.0.1:{admin}\"\n\n\
         [[app]]\nname = \"web\"\ncommand = [\"node\", \"{app}\"]\nworkers = 1\nport_base = {base}\n\
         env = {{ APP_MARK = \"from-the-app\" }}\n[app.health]\npath = \"/healthz\"\n\n\
         [[app]]\nname = \"direct\"\ncommand = [\"node\", \"{app}\"]\nworkers = 1\nport_base = {dbase}\n\
         mode = \"direct\"\nlisten = \"127.0.0.1:{direct}\"\nenv = {{ APP_MARK = \"from-the-app\" }}\n\
         [app.health]\npath = \"/healthz\"\n",
        app = app.display()
    );
    let (_dir, _serve, lines) = spawn_serve(
        &toml,
        &[
            (scalpel_serve::ADMIN_TOKEN_ENV, token),
            ("PARENT_MARK", "kept"),
        ],
    );
    for port in [listen, direct] {
        let mut pid = String::new();
        let answered = crate::serve_cli::poll(Duration::from_secs(60), || {
            match http(port, "GET", "/pid") {
                Ok((200, body)) => {
                    pid = body;
                    true
                }
                _ => false,
            }
        });
        assert!(answered, "no worker on {port}: {:?}", lines.lock().unwrap());
        let environ = std::fs::read(format!("/proc/{}/environ", pid.trim())).unwrap();
        let vars: Vec<String> = environ
            .split(|&b| b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        assert!(
            !vars
                .iter()
                .any(|v| v.starts_with("SCALPEL_ADMIN_TOKEN=") || v.contains(token)),
            "port {port}: the token reached the worker: {vars:?}"
        );
        for want in [
            "PARENT_MARK=kept",
            "APP_MARK=from-the-app",
            "WORKER_INDEX=0",
        ] {
            assert!(
                vars.iter().any(|v| v == want),
                "port {port}: no {want}: {vars:?}"
            );
        }
        assert!(vars.iter().any(|v| v.starts_with("PORT=")), "{vars:?}");
    }
    // The admin still wants the token: serve kept it for itself.
    assert_eq!(http(admin, "GET", "/status").unwrap().0, 401);
}

fn check(dir: &Path, toml: &str) -> (Option<i32>, String) {
    let path = dir.join("serve.toml");
    std::fs::write(&path, toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_scalpel"))
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .env_remove(scalpel_serve::ADMIN_TOKEN_ENV)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 31 item 6: `--check` passed a NUL byte in an `env` value or a `command`
/// argument (every worker then failed to start) and an admin token of spaces or of a
/// few letters; each is now refused on one line with the file and line, exit 2.
#[test]
fn check_refuses_nul_bytes_and_weak_admin_tokens_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let app = |extra: &str, arg: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\nadmin = \"127.0.0.1:9090\"\n{extra}\n\
             [[app]]\nname = \"web\"\ncommand = [\"node\", \"{arg}\"]\nworkers = 1\nport_base = 3001\n\
             env = {{ SECRET = \"a\\u0000b\" }}\n"
        )
    };
    let cases = [
        (
            app("", "app.js"),
            10,
            "app `web`: env `SECRET` holds a NUL byte",
        ),
        (
            app("", "app.js\\u0000x").replace("SECRET = \"a\\u0000b\"", "SECRET = \"ab\""),
            7,
            "app `web`: command argument 1 holds a NUL byte",
        ),
        (
            app("admin_token = \"   \"", "app.js").replace("\\u0000", ""),
            4,
            "admin_token is only white space",
        ),
        (
            app("admin_token = \"hunter2\"", "app.js").replace("\\u0000", ""),
            4,
            "admin_token is 7 bytes: use at least 16",
        ),
    ];
    for (toml, line, reason) in cases {
        let (code, err) = check(dir.path(), &toml);
        assert_eq!(code, Some(2), "{toml}\n{err}");
        let want = format!("{}:{line}: {reason}", path.display());
        assert!(err.contains(&want), "expected {want:?}\n     got {err:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Issue 31 item 6: serve run as root from a config in a directory anyone can write
/// said nothing; whoever writes there runs code as root at the next reload. `--check`
/// now warns on stderr (and still passes: a warning, not a refusal).
#[test]
fn check_warns_when_root_runs_a_config_others_can_write() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let toml = "[server]\nlisten = \"127.0.0.1:8080\"\nadmin = \"127.0.0.1:9090\"\n\n\
                [[app]]\nname = \"web\"\ncommand = [\"sh\"]\nworkers = 1\nport_base = 3001\n";
    let (code, err) = check(&open, toml);
    assert_eq!(code, Some(0), "{err}");
    let root = rustix::process::geteuid().is_root();
    let want = format!("directory {} writable by everyone", open.display());
    assert_eq!(err.contains(&want), root, "root: {root}; stderr: {err:?}");
    // In a private directory nothing is said.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, err) = check(&open, toml);
    assert_eq!((code, err.as_str()), (Some(0), ""), "{err}");
}

//! Issue 31, serve's part: the admin address against pages in a browser on the same
//! machine (DNS rebinding, cross-site `POST /reload`) and the balancer's `Host` and
//! forwarding rules — each request written byte for byte as a browser or a client sends
//! it, to a real server with real Node workers.

use std::time::Duration;

use crate::util::*;

/// A raw HTTP/1.1 exchange: the status and the body.
async fn raw(addr: std::net::SocketAddr, request: &str) -> (u16, String) {
    let got = raw_exchange(addr, request.as_bytes(), Duration::from_secs(30)).await;
    let (status, body) = scalpel_testkit::raw::status_and_body(got.as_bytes());
    assert_ne!(status, 0, "no status: {got:?}");
    (status, body)
}

fn kind(body: &str) -> String {
    scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the toolkit's error body: {body}"))
        .0
}

/// Issue 31: any web page could read the admin through DNS rebinding (its own name
/// resolved to 127.0.0.1, `Host: evil.example:PORT`), and any site could make a browser
/// `POST /reload` with a plain form. Now a `Host` that is not the admin's gets 421 on
/// every path, the live page's files too; a state change from another site or origin
/// gets 403, one not typed JSON 415; the live page's own same-origin JSON reload passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_refuses_a_rebound_host_and_a_cross_site_reload() {
    let toml = format!(
        "{SERVER}admin_hosts = [\"ops.example\"]\n{}",
        node_app("web", 1, "round_robin", "")
    );
    let h = start(&toml).await;
    let admin = h.server.admin_addr().unwrap();
    let port = admin.port();
    for path in ["/status", "/", "/metrics", "/live/live.js"] {
        let (status, body) = raw(
            admin,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert_eq!(status, 421, "{path}: {body}");
        assert_eq!(kind(&body), "misdirected_request", "{path}");
    }
    // Its own address, localhost and a configured name are the admin's.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "ops.example".into(),
    ] {
        let (status, body) = raw(
            admin,
            &format!("GET /status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    let pids = h.pids(0);
    // What a form on another site sends, and what a cross-site fetch says.
    let cross = [
        (
            "Content-Type: application/x-www-form-urlencoded\r\nOrigin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n",
            403,
        ),
        (
            "Content-Type: text/plain\r\nOrigin: http://evil.example\r\n",
            403,
        ),
        (
            "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n",
            403,
        ),
        (
            "Content-Type: application/json\r\nSec-Fetch-Site: same-site\r\n",
            403,
        ),
        // No browser's marks but no JSON type either: what curl -d sends.
        ("Content-Type: application/x-www-form-urlencoded\r\n", 415),
        ("", 415),
    ];
    for (headers, want) in cross {
        let (status, body) = raw(
            admin,
            &format!(
                "POST /reload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert_eq!(status, want, "{headers:?}: {body}");
        kind(&body);
    }
    assert_eq!(h.pids(0), pids, "a refused reload replaced nothing");
    // The live page's button: same origin, typed JSON (crates/live/assets/live.js).
    let (status, body) = raw(
        admin,
        &format!(
            "POST /reload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"reloaded\": true"), "{body}");
    h.server.shutdown().await;
}

/// Issue 31: the balancer forwarded an HTTP/1.1 request without `Host` as
/// `host: 127.0.0.1:<worker port>` (a name the client never used), passed the first of
/// two `Host` headers, and malformed ones as they came. Each is now a 400 with the error
/// body, and never reaches a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_one_valid_host_are_400_and_never_reach_a_worker() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let listen = h.server.listen_addr();
    let bad = [
        "GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: app.example\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: user@app.example\r\nConnection: close\r\n\r\n",
        "GET http://app.example/echo HTTP/1.1\r\nConnection: close\r\n\r\n",
    ];
    for request in bad {
        let (status, body) = raw(listen, request).await;
        assert_eq!(status, 400, "{request:?}: {body}");
        assert_eq!(kind(&body), "bad_request", "{request:?}");
    }
    // A control character: hyper or the reader refuses it, never the worker.
    let (status, body) = raw(
        listen,
        "GET /echo HTTP/1.1\r\nHost: a\x01b\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    // The worker answered none of them; a good request still goes through.
    let counted = h.status_json()["apps"][0]["requests"].as_u64();
    let (status, body) = raw(
        listen,
        "GET /echo HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let echoed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echoed["headers"]["host"], "app.example");
    if let Some(before) = counted {
        assert_eq!(
            h.status_json()["apps"][0]["requests"].as_u64(),
            Some(before + 1)
        );
    }
    // HTTP/1.0 needs no Host: the worker's address stands in, as before.
    let (status, body) = raw(listen, "GET /echo HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 200, "{body}");
    h.server.shutdown().await;
}

/// Issue 31: without `trusted_proxies`, only six forwarding headers were replaced, so a
/// client's `X_Forwarded_For` (which CGI/WSGI apps read as `X-Forwarded-For`),
/// `X-Forwarded-Server`, `X-Forwarded-Prefix`, `X-Client-IP`, `True-Client-IP` and
/// `CF-Connecting-IP` reached the worker. The worker (Node) says what it received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_clients_forwarding_claims_never_reach_a_worker() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let listen = h.server.listen_addr();
    let claims = [
        "x_forwarded_for: 6.6.6.6",
        "X_Forwarded_Proto: https",
        "x_forwarded_host: bank.example",
        "X-Forwarded-Server: bank.example",
        "X-Forwarded-Prefix: /admin",
        "X-Client-IP: 6.6.6.6",
        "True-Client-IP: 6.6.6.6",
        "CF-Connecting-IP: 6.6.6.6",
        "X-Real-IP: 6.6.6.6",
        "x_real_ip: 6.6.6.6",
        "Forwarded: for=6.6.6.6;proto=https",
    ];
    let request = format!(
        "GET /echo HTTP/1.1\r\nHost: app.example\r\n{}\r\nConnection: close\r\n\r\n",
        claims.join("\r\n")
    );
    let (status, body) = raw(listen, &request).await;
    assert_eq!(status, 200, "{body}");
    let echoed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let headers = echoed["headers"].as_object().unwrap();
    for claim in claims {
        let name = claim.split(':').next().unwrap().to_ascii_lowercase();
        assert!(
            !headers.contains_key(&name),
            "{name} reached the worker: {headers:?}"
        );
    }
    assert!(
        !body.contains("6.6.6.6") && !body.contains("bank.example"),
        "{body}"
    );
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    h.server.shutdown().await;
}

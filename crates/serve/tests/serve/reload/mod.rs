//! Live configuration (issue 14): SIGHUP / `POST /reload` read the config file again and
//! apply it by rolling replacement, or refuse it and keep the running one.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use crate::util::*;

/// Two Node apps behind one split route: `a` with `a_workers` workers on `base..base+7`
/// (room for 4 workers' port pairs), `b` with one on `base+8..base+9`; every worker
/// answers its `APP_TAG` (`NAME-TAG`).
fn two_apps(base: u16, a_workers: u16, tag: &str, a_weight: u32, b_weight: u32) -> String {
    let js = app_js();
    let js = js.display();
    format!(
        r#"{SERVER}
[[app]]
name = "a"
command = ["node", "{js}"]
workers = {a_workers}
port_base = {base}
balance = "round_robin"
start_timeout_ms = 60000
env = {{ APP_TAG = "a-{tag}" }}

[[app]]
name = "b"
command = ["node", "{js}"]
workers = 1
port_base = {b_base}
balance = "round_robin"
start_timeout_ms = 60000
env = {{ APP_TAG = "b-{tag}" }}

[[route]]
prefix = "/"
split = [{{ app = "a", weight = {a_weight} }}, {{ app = "b", weight = {b_weight} }}]
"#,
        b_base = base + 8,
    )
}

fn tag_of(r: &Reply) -> String {
    r.json()["tag"].as_str().unwrap_or_default().to_string()
}

/// Issue 14's target as a test: under steady load, a reload that doubles `a`'s workers,
/// changes both apps' environment and moves the split from 1:1 to 9:1 fails no request;
/// afterwards `a` has four new workers, every answer carries the new environment, and
/// the new weights hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_doubles_the_workers_and_moves_the_weights_with_no_failed_request() {
    let base = free_base(10);
    let h = start(&two_apps(base, 2, "v1", 1, 1)).await;
    let before: Vec<u32> = h.pids(0).into_iter().flatten().collect();
    assert_eq!(before.len(), 2);
    let load = Load::start(h.server.listen_addr(), "/", 8);
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.write_config(&two_apps(base, 4, "v2", 9, 1));
    h.server.reload().await.expect("the reload applies");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ok, failed, failures) = load.finish().await;
    assert_eq!(failed, 0, "failed requests during the reload: {failures:?}");
    assert!(ok > 20, "too little load ran through the reload: {ok}");

    let s = h.server.status();
    assert_eq!(s.apps[0].name, "a");
    assert_eq!(s.apps[0].workers.len(), 4, "{s:?}");
    assert!(
        s.apps[0].workers.iter().all(|w| w.state == "ready"),
        "{s:?}"
    );
    for pid in &before {
        assert!(
            s.apps[0].workers.iter().all(|w| w.pid != Some(*pid)),
            "worker {pid} was not replaced: {s:?}"
        );
        assert!(!process_alive(*pid), "old worker {pid} still running");
    }
    let mut tags: HashMap<String, usize> = HashMap::new();
    for _ in 0..200 {
        let r = h.get("/").await.expect("a request after the reload");
        assert_eq!(r.status, 200, "{}", r.body);
        *tags.entry(tag_of(&r)).or_default() += 1;
    }
    assert!(
        tags.keys().all(|t| t.ends_with("-v2")),
        "answers from the old environment after the reload: {tags:?}"
    );
    let a = tags.get("a-v2").copied().unwrap_or(0);
    // 9:1 gives `a` 180 of 200 on average (sd ≈ 4.2); 1:1 would give 100.
    assert!(a >= 150, "the 9:1 weights do not hold: {tags:?}");
    assert!(tags.get("b-v2").copied().unwrap_or(0) > 0, "{tags:?}");
    let m = h.server.metrics_text();
    assert_eq!(metric(&m, "scalpel_serve_workers_ready{app=\"a\"}"), 4.0);
    assert_eq!(
        metric(&m, "scalpel_serve_reloads_total{app=\"a\"}"),
        2.0,
        "{m}"
    );
    h.server.shutdown().await;
}

/// A config with a typo is refused with its file and line (in the log and in `POST
/// /reload`'s answer), and the running config keeps serving, workers untouched; a change
/// that cannot be made live (the listen address) is refused with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_with_a_typo_is_refused_with_its_line_and_the_old_one_keeps_serving() {
    capture_traces();
    let base = free_base(10);
    let good = two_apps(base, 2, "v1", 1, 1);
    let h = start(&good).await;
    let before = h.pids(0);
    // `wokers` for `workers`, on the line after `name = "a"`.
    let typo = good.replacen("workers = 2", "wokers = 4", 1);
    let line = typo
        .lines()
        .position(|l| l.starts_with("wokers"))
        .expect("the typo is in the file")
        + 1;
    h.write_config(&typo);
    let admin = h.server.admin_addr().unwrap();
    let post = |path: &str| {
        http::Request::post(format!("http://{admin}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let r = send(&h.client, post("/reload")).await.unwrap();
    let where_ = format!("{}:{line}", h.config_path.display());
    assert_eq!(r.status, 422, "{}", r.body);
    let body = r.json();
    assert_eq!(body["reloaded"], false);
    let (kind, detail) = r.error();
    assert_eq!(kind, "config_invalid");
    assert!(
        detail.contains(&where_) && detail.contains("wokers"),
        "the answer does not name {where_} and the key: {body}"
    );
    assert_eq!(body["line"], line);
    assert!(
        trace_text()
            .lines()
            .any(|l| l.contains("reload refused") && l.contains(&where_)),
        "no log line names {where_}"
    );
    // Nothing changed: same workers, old config serving.
    assert_eq!(h.pids(0), before);
    for _ in 0..20 {
        let r = h.get("/").await.expect("the old config serves");
        assert_eq!(r.status, 200);
        assert!(tag_of(&r).ends_with("-v1"), "{}", r.body);
    }

    // A listener that cannot move live: refused with the reason, nothing changed.
    let moved = good.replacen("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"", 1);
    h.write_config(&moved);
    let r = send(&h.client, post("/reload")).await.unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    let (kind, detail) = r.error();
    assert_eq!(kind, "reload_refused");
    assert!(
        detail.contains("[server] listen changed") && detail.contains("restart"),
        "{detail}"
    );
    assert_eq!(h.pids(0), before);

    // Fixed, the same file reloads.
    h.write_config(&good);
    let r = send(&h.client, post("/reload")).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(h.pids(0).iter().zip(&before).all(|(a, b)| a != b));
    h.server.shutdown().await;
}

/// Regression: a worker declared unhealthy is stopped in the background (SIGTERM, then
/// SIGKILL after `stop_grace`) while its successor starts on the other port of its
/// pair. A reload within that grace period wanted the first port back and failed with
/// "address in use"; it now waits for the stuck process to let go of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_soon_after_an_unhealthy_replacement_waits_for_the_port() {
    let extra =
        "stop_grace_ms = 15000\n[app.health]\ninterval_ms = 100\ntimeout_ms = 200\nfailures = 2\n";
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 1, "round_robin", extra)
    ))
    .await;
    let s = h.server.status();
    let (victim, port) = (
        s.apps[0].workers[0].pid.unwrap(),
        s.apps[0].workers[0].port.unwrap(),
    );
    // Freeze it through its own port: its event loop blocks, SIGTERM cannot run.
    let c = client();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let _block = tokio::spawn(async move { get_at(&c, addr, "/block?ms=60000").await });
    let replaced = eventually(Duration::from_secs(30), || {
        let w = &h.server.status().apps[0].workers[0];
        w.pid != Some(victim) && w.state == "ready"
    })
    .await;
    assert!(replaced, "not replaced: {:?}", h.server.status());
    assert!(
        process_alive(victim),
        "the stuck worker is already gone: the test did not reach the grace period"
    );
    // The same config again: the reload's new worker needs the stuck one's port.
    h.server
        .reload()
        .await
        .expect("a reload during the stuck worker's grace period succeeds");
    let w = &h.server.status().apps[0].workers[0];
    assert_eq!(w.port, Some(port), "{w:?}");
    assert_eq!(w.state, "ready");
    assert!(!process_alive(victim));
    h.server.shutdown().await;
}

/// Direct mode (`mode = "direct"`): a reload under load — new connections all the way
/// through, the worker count going from 2 to 3 and the environment changing — fails no
/// request: each old worker stops accepting on the shared socket and finishes what it
/// took while the socket itself stays open in serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_reload_under_load_fails_no_request() {
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_base(1)));
    let base = free_base(6);
    let app = |workers: u16, tag: &str| {
        format!(
            "{SERVER}\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"{js}\"]\nworkers = {workers}\nport_base = {base}\nmode = \"direct\"\nlisten = \"{listen}\"\nstart_timeout_ms = 60000\nenv = {{ APP_TAG = \"{tag}\" }}\n",
            js = app_js().display()
        )
    };
    let h = start(&app(2, "v1")).await;
    let before: Vec<u32> = h.pids(0).into_iter().flatten().collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let stop = stop.clone();
        load.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match direct_tag(listen).await {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e),
                }
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.write_config(&app(3, "v2"));
    h.server.reload().await.expect("the direct app reloads");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, Vec::new());
    for t in load {
        let (o, f) = t.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    assert!(failed.is_empty(), "failed direct requests: {failed:?}");
    assert!(ok > 20, "too little load ran through the reload: {ok}");
    let s = h.server.status();
    assert_eq!(s.apps[0].workers.len(), 3, "{s:?}");
    for pid in &before {
        assert!(!process_alive(*pid), "old worker {pid} still running");
    }
    for _ in 0..10 {
        assert_eq!(direct_tag(listen).await.as_deref(), Ok("v2"));
    }
    h.server.shutdown().await;
}

/// One request on a fresh connection to a direct app: the `APP_TAG` of the worker that
/// answered.
async fn direct_tag(addr: std::net::SocketAddr) -> Result<String, String> {
    let req = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let got = raw_exchange(addr, req.as_bytes(), Duration::from_secs(20)).await;
    if !got.starts_with("HTTP/1.1 200") {
        return Err(format!("answer: {got:?}"));
    }
    got.split("\"tag\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_string)
        .ok_or_else(|| format!("no tag in {got:?}"))
}

/// Apps added by a reload start (and are ready) before any route reaches them; apps
/// removed leave the routes first, then drain and stop — under load throughout, no
/// request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_added_and_removed_by_a_reload_start_first_and_drain_last() {
    let base = free_base(8);
    let js = app_js();
    let app = |name: &str, port_base: u16| {
        format!(
            "\n[[app]]\nname = \"{name}\"\ncommand = [\"node\", \"{}\"]\nworkers = 1\nport_base = {port_base}\nstart_timeout_ms = 60000\nenv = {{ APP_TAG = \"{name}\" }}\n",
            js.display()
        )
    };
    let (a, b) = (app("a", base), app("b", base + 4));
    let h = start(&format!("{SERVER}{a}")).await;
    let a_pid = h.pids(0)[0].unwrap();
    let load = Load::start(h.server.listen_addr(), "/", 6);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Added: `b`, and a split that sends it half of `/`.
    h.write_config(&format!(
        "{SERVER}{a}{b}\n[[route]]\nprefix = \"/\"\nsplit = [{{ app = \"a\", weight = 1 }}, {{ app = \"b\", weight = 1 }}]\n"
    ));
    h.server.reload().await.expect("b is added");
    let mut tags: HashMap<String, usize> = HashMap::new();
    for _ in 0..60 {
        *tags.entry(tag_of(&h.get("/").await.unwrap())).or_default() += 1;
    }
    assert!(
        tags.contains_key("a") && tags.contains_key("b"),
        "both apps should answer: {tags:?}"
    );

    // Removed: `a`; with no routes, everything goes to the first app, now `b`.
    h.write_config(&format!("{SERVER}{b}"));
    h.server.reload().await.expect("a is removed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ok, failed, failures) = load.finish().await;
    assert_eq!(failed, 0, "failed requests: {failures:?}");
    assert!(ok > 20, "{ok}");
    let s = h.server.status();
    assert_eq!(s.apps.len(), 1);
    assert_eq!(s.apps[0].name, "b");
    for _ in 0..20 {
        assert_eq!(tag_of(&h.get("/").await.unwrap()), "b");
    }
    assert!(
        eventually(Duration::from_secs(30), || !process_alive(a_pid)).await,
        "the removed app's worker {a_pid} still runs"
    );
    assert!(!h.server.metrics_text().contains("app=\"a\""));
    h.server.shutdown().await;
}

/// The `[server]` limits and time-outs change live (they are read per request from the
/// table a reload swaps): a reload that lowers `max_body_bytes` and `upstream_timeout`
/// is applied, and the next requests over them get the documented 413 `too_large` and
/// 504 `timeout` bodies from the same workers. What is fixed at start (`threads`) is
/// still refused with 409, and the lowered limits stay in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_lowers_the_body_limit_and_the_upstream_timeout_live() {
    let app = node_app("web", 1, "round_robin", "");
    let h = start(&format!("{SERVER}{app}")).await;
    let before = h.pids(0);
    let admin = h.server.admin_addr().unwrap();
    let post = |url: String, body: Vec<u8>| {
        http::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let body = vec![b'x'; 4096];
    let r = send(&h.client, post(h.url("/echo"), body.clone()))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "under the default 8 MiB limit: {}", r.body);

    let lowered = format!("{SERVER}max_body_bytes = \"1KiB\"\nupstream_timeout = \"1s\"\n{app}");
    h.write_config(&lowered);
    let r = send(&h.client, post(format!("http://{admin}/reload"), vec![]))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "the lowered limits are refused: {}", r.body);

    let r = send(&h.client, post(h.url("/echo"), body.clone()))
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    let (kind, detail) = r.error();
    assert_eq!(kind, "too_large");
    assert!(detail.contains("1024-byte limit"), "{detail}");
    // 8 s of work against the new 1 s time-out: a 504, far from any timing margin.
    let r = h.get("/slow?ms=8000").await.unwrap();
    assert_eq!(r.status, 504, "{}", r.body);
    let (kind, detail) = r.error();
    assert_eq!(kind, "timeout");
    assert!(detail.contains("within 1s"), "{detail}");

    // Fixed at start: refused, and the live limits stay.
    let threads = lowered.replacen("[server]\n", "[server]\nthreads = 1\n", 1);
    h.write_config(&threads);
    let r = send(&h.client, post(format!("http://{admin}/reload"), vec![]))
        .await
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    let (kind, detail) = r.error();
    assert_eq!(kind, "reload_refused");
    assert!(
        detail.contains("[server] threads changed") && detail.contains("restart"),
        "{detail}"
    );
    let r = send(&h.client, post(h.url("/echo"), body)).await.unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert_ne!(h.pids(0), before, "the accepted reload rolled the worker");
    h.server.shutdown().await;
}

/// The worker indexes that answer `n` requests in a row while one slow request holds a
/// worker of the app (it is in flight on one of two workers throughout).
async fn indexes_with_one_busy(h: &Harness, n: usize) -> Vec<String> {
    let addr = h.server.listen_addr();
    let c = client();
    let slow = tokio::spawn(async move { get_at(&c, addr, "/slow?ms=6000").await });
    let busy = eventually(Duration::from_secs(20), || {
        h.server.status().apps[0]
            .workers
            .iter()
            .any(|w| w.in_flight == 1)
    })
    .await;
    assert!(
        busy,
        "the slow request is not in flight: {:?}",
        h.server.status()
    );
    let mut seen = Vec::new();
    for _ in 0..n {
        let r = h.get("/").await.expect("a request beside the slow one");
        assert_eq!(r.status, 200, "{}", r.body);
        seen.push(r.json()["index"].as_str().expect("an index").to_string());
    }
    let r = slow.await.unwrap().expect("the slow request");
    assert_eq!(r.status, 200, "{}", r.body);
    seen
}

/// An app's `balance` changes live: with one worker of two busy, `round_robin` keeps
/// sending every other request to it; after a reload to `least_conn` every request goes
/// to the idle one. The status reports the new algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_an_apps_balance_live() {
    let rr = format!("{SERVER}{}", node_app("web", 2, "round_robin", ""));
    let h = start(&rr).await;
    let seen = indexes_with_one_busy(&h, 6).await;
    assert!(
        seen.iter().any(|i| *i != seen[0]),
        "round_robin should still reach the busy worker: {seen:?}"
    );

    h.write_config(&rr.replacen("balance = \"round_robin\"", "balance = \"least_conn\"", 1));
    h.server
        .reload()
        .await
        .expect("a balance change applies live");
    assert_eq!(h.server.status().apps[0].balance, "least_conn");
    let seen = indexes_with_one_busy(&h, 6).await;
    assert!(
        seen.iter().all(|i| *i == seen[0]),
        "least_conn should pass the busy worker by: {seen:?}"
    );
    h.server.shutdown().await;
}

/// The requests counted for a route's arm, in `/metrics`.
fn arm_count(m: &str, route: usize, prefix: &str, app: &str) -> Option<f64> {
    let sample = format!(
        "scalpel_serve_route_requests_total{{route=\"{route}\",prefix=\"{prefix}\",app=\"{app}\"}}"
    );
    m.lines()
        .find_map(|l| l.strip_prefix(sample.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// A reload that keeps a route keeps its counters: under load on route `/pid` (split
/// a:b), a reload that replaces every worker, moves the split to 3:1 and gives route `/`
/// another app; `scalpel_serve_route_requests_total` of `/pid`'s arms, read every 10 ms
/// throughout, never goes down (a Prometheus counter), and the live snapshot's arm counts
/// go on from where they were. The arm of `/` whose app the reload changed starts at zero
/// and the replaced one is gone. Before, every route's counters began at zero again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_keeps_a_route_keeps_its_counters_monotonic() {
    let base = free_base(10);
    let routes = |a: u32, rest: &str| {
        let cfg = two_apps(base, 1, "v", a, 1);
        // two_apps's own route becomes `/pid` (GET /pid answers 200); then `/` → `rest`.
        cfg.replace("prefix = \"/\"", "prefix = \"/pid\"")
            + &format!("\n[[route]]\nprefix = \"/\"\napp = \"{rest}\"\n")
    };
    let h = start(&routes(1, "b")).await;
    for _ in 0..5 {
        assert_eq!(h.get("/").await.unwrap().status, 200);
    }
    let m = h.server.metrics_text();
    assert_eq!(arm_count(&m, 0, "/pid", "a"), Some(0.0), "{m}");
    let load = Load::start(h.server.listen_addr(), "/pid", 4);
    // `/pid`'s two arm counters as `/metrics` shows them, read every 10 ms until stopped.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let admin = h.server.admin_addr().expect("admin address");
    let watcher = tokio::spawn(async move {
        let c = client();
        let mut seen: Vec<(f64, f64)> = Vec::new();
        while !*stopped.borrow() {
            if let Ok(r) = get_at(&c, admin, "/metrics").await
                && let (Some(a), Some(b)) = (
                    arm_count(&r.body, 0, "/pid", "a"),
                    arm_count(&r.body, 0, "/pid", "b"),
                )
            {
                seen.push((a, b));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    });
    // Some traffic counted before the reload.
    assert!(
        eventually(Duration::from_secs(30), || {
            let m = h.server.metrics_text();
            arm_count(&m, 0, "/pid", "a").unwrap_or(0.0) >= 20.0
        })
        .await
    );
    let snap_before = snapshot_arms(&h).await;
    let m = h.server.metrics_text();
    let before = (
        arm_count(&m, 0, "/pid", "a").unwrap(),
        arm_count(&m, 0, "/pid", "b").unwrap(),
        arm_count(&m, 1, "/", "b").unwrap(),
    );
    assert_eq!(before.2, 5.0, "{m}");

    h.write_config(&routes(3, "a"));
    h.server.reload().await.expect("the reload applies");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ok, failed, failures) = load.finish().await;
    let _ = stop.send(true);
    let seen = watcher.await.unwrap();
    assert_eq!(failed, 0, "failed requests during the reload: {failures:?}");
    assert!(seen.len() >= 10, "too few /metrics reads: {}", seen.len());
    for w in seen.windows(2) {
        assert!(
            w[1].0 >= w[0].0 && w[1].1 >= w[0].1,
            "a route counter went down across the reload: {:?} -> {:?}",
            w[0],
            w[1]
        );
    }
    let m = h.server.metrics_text();
    let (a, b) = (
        arm_count(&m, 0, "/pid", "a").unwrap(),
        arm_count(&m, 0, "/pid", "b").unwrap(),
    );
    assert!(a >= before.0 && b >= before.1, "{before:?} -> {a} {b}\n{m}");
    // Every request of the load counted once, before and after the reload alike.
    assert_eq!(a + b, ok as f64, "{m}");
    // `/` kept its rule but changed its app: the new arm counts from zero, the old goes.
    assert_eq!(arm_count(&m, 1, "/", "a"), Some(0.0), "{m}");
    assert_eq!(arm_count(&m, 1, "/", "b"), None, "{m}");
    // The live snapshot (the admin page's data) goes on from the same counts.
    let snap_after = snapshot_arms(&h).await;
    assert!(
        snap_after.0 >= snap_before.0 && snap_after.1 >= snap_before.1,
        "the snapshot's arm counts went down: {snap_before:?} -> {snap_after:?}"
    );
    assert_eq!(snap_after, (a as u64, b as u64));
    h.server.shutdown().await;
}

/// Route `/pid`'s arm counts in the live snapshot.
async fn snapshot_arms(h: &Harness) -> (u64, u64) {
    let addr = h.server.admin_addr().expect("admin address");
    let snap = get_at(&h.client, addr, "/live/snapshot")
        .await
        .expect("snapshot")
        .json();
    let arms = &snap["data"]["routes"][0]["arms"];
    assert_eq!(snap["data"]["routes"][0]["prefix"], "/pid", "{snap}");
    (
        arms[0]["requests"].as_u64().unwrap(),
        arms[1]["requests"].as_u64().unwrap(),
    )
}

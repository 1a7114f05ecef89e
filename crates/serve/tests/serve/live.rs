//! The live page of the admin address against real Node workers: the page is served
//! without the admin token (it holds no data), its snapshot and the reload only with it,
//! and the snapshot's figures come from the traffic that really went through.

use crate::util;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use util::*;

async fn admin_get(h: &Harness, path: &str, token: Option<&str>) -> Reply {
    let mut req = http::Request::get(format!("http://{}{path}", h.server.admin_addr().unwrap()));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    send(&h.client, req.body(Full::new(Bytes::new())).unwrap())
        .await
        .expect("admin answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_is_public_but_its_data_and_reload_need_the_token() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nadmin_token = \"s3cret-token-0123\"\n{}",
        node_app("web", 1, "round_robin", "")
    );
    let h = start(&toml).await;
    let page = admin_get(&h, "/", None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.body.contains("live/live.js"), "{}", page.body);
    assert!(!page.body.contains("s3cret-token-0123"));
    for asset in ["/live/live.js", "/live/live.css"] {
        assert_eq!(admin_get(&h, asset, None).await.status, 200, "{asset}");
    }
    let denied = admin_get(&h, "/live/snapshot", None).await;
    assert_eq!(denied.status, 401, "{}", denied.body);
    assert_eq!(denied.error().0, "unauthorized");
    let wrong = admin_get(&h, "/live/snapshot", Some("nope")).await;
    assert_eq!(wrong.status, 401);
    let reload = send(
        &h.client,
        http::Request::post(format!("http://{}/reload", h.server.admin_addr().unwrap()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        reload.status, 401,
        "the page's reload button needs the token too"
    );
    let ok = admin_get(&h, "/live/snapshot", Some("s3cret-token-0123")).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["kind"], "serve");
    h.server.shutdown().await;
}

/// A worker's PSS is read again once it is ready: a reading from its start-up was kept
/// for ten samples, and under load the snapshot showed a ready Node worker of 47 MB RSS
/// with half a MiB of PSS (its first reading, taken while it was still starting). Here
/// the start-up is a shell that sleeps before it becomes Node (same pid, `exec`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_memory_is_read_again_once_it_is_ready() {
    let toml = format!(
        "{SERVER}\n[[app]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", \"sleep 3; exec node {js}\"]\nworkers = 1\nport_base = {base}\nstart_timeout_ms = 60000\n",
        js = app_js().display(),
        base = free_base(2)
    );
    let h = start(&toml).await;
    // The first sample that shows Node's memory (RSS, read at every sample) shows its PSS.
    let mut w = serde_json::Value::Null;
    for _ in 0..600 {
        w = admin_get(&h, "/live/snapshot", None).await.json()["data"]["apps"][0]["workers"][0]
            .clone();
        if w["rss_bytes"].as_u64().is_some_and(|r| r > 16 << 20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(w["rss_bytes"].as_u64().is_some_and(|r| r > 16 << 20), "{w}");
    assert!(
        w["pss_bytes"].as_u64().is_some_and(|p| p > 1 << 20),
        "the PSS of its start-up: {w}"
    );
    h.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_shows_workers_routes_and_rates_of_real_traffic() {
    let toml = format!(
        "{SERVER}{}{}\n[[route]]\nprefix = \"/\"\nsplit = [{{ app = \"a\", weight = 1 }}, {{ app = \"b\", weight = 1 }}]\n",
        node_app("a", 2, "round_robin", ""),
        node_app("b", 1, "round_robin", "")
    );
    let h = start(&toml).await;
    for _ in 0..60 {
        assert_eq!(h.get("/").await.unwrap().status, 200);
    }
    // The ticker samples once a second: wait for a tick that saw the traffic.
    let mut snap = serde_json::Value::Null;
    for _ in 0..100 {
        snap = admin_get(&h, "/live/snapshot", None).await.json();
        let arms = &snap["data"]["routes"][0]["arms"];
        let total: u64 = (0..2).map(|i| arms[i]["requests"].as_u64().unwrap()).sum();
        let workers_read = (0..2).all(|i| {
            let w = &snap["data"]["apps"][0]["workers"][i];
            w["pss_bytes"].is_number() && w["cpu_percent"].is_number()
        });
        if total == 60 && snap["data"]["apps"][0]["p99_ms"].is_number() && workers_read {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let data = &snap["data"];
    let apps = data["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 2);
    assert_eq!(apps[0]["name"], "a");
    assert_eq!(apps[0]["workers"].as_array().unwrap().len(), 2);
    let pids = h.pids(0);
    for (i, w) in apps[0]["workers"].as_array().unwrap().iter().enumerate() {
        assert_eq!(w["pid"].as_u64().map(|p| p as u32), pids[i]);
        assert_eq!(w["state"], "ready");
        assert!(w["last_restart"].is_null());
        // The resource sampler's per-worker figures (the page reads no /proc itself).
        assert!(w["rss_bytes"].as_u64().unwrap() > 1 << 20, "{w}");
        assert!(w["pss_bytes"].as_u64().unwrap() > 1 << 20, "{w}");
        assert!(w["cpu_percent"].as_f64().unwrap() >= 0.0, "{w}");
    }
    let arms = data["routes"][0]["arms"].as_array().unwrap();
    let (a, b) = (
        arms[0]["requests"].as_u64().unwrap(),
        arms[1]["requests"].as_u64().unwrap(),
    );
    assert_eq!(a + b, 60, "{data}");
    assert!(a > 0 && b > 0, "both arms served: {a} / {b}");
    let p99 = apps[0]["p99_ms"]
        .as_f64()
        .expect("a p99 over the last seconds");
    assert!(p99 > 0.0 && p99 < 10_000.0, "{p99}");
    let charts: Vec<&str> = snap["charts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(charts, ["route-rate", "route-latency", "route-errors"]);
    assert!(
        snap["charts"][0]["svg"]
            .as_str()
            .unwrap()
            .starts_with("<svg")
    );
    h.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_shows_its_last_restart_reason() {
    let toml = format!("{SERVER}{}", node_app("web", 1, "round_robin", ""));
    let h = start(&toml).await;
    let old = h.pids(0)[0].unwrap();
    // A crash: the worker exits at once (a POST, so the balancer does not resend it to
    // the successor, which would crash too).
    let _ = send(
        &h.client,
        http::Request::post(h.url("/exit?code=3"))
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap(),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(60), || {
            let s = h.server.status();
            let w = &s.apps[0].workers[0];
            w.pid.is_some_and(|p| p != old) && w.state == "ready"
        })
        .await
    );
    let snap = admin_get(&h, "/live/snapshot", None).await.json();
    let w = &snap["data"]["apps"][0]["workers"][0];
    assert_eq!(w["restarts"], 1, "{w}");
    assert_eq!(w["last_restart"]["reason"], "exited", "{w}");
    assert!(w["last_restart"]["ago_s"].as_f64().unwrap() >= 0.0);
    h.server.shutdown().await;
}

/// A mirrored route: the page's snapshot has the consistency and the newest differences
/// with their field paths and both values, ignored fields left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_shows_the_mirror_newest_differences_by_field_path() {
    let toml = format!(
        "{SERVER}{a}{c}\n[[route]]\nprefix = \"/\"\napp = \"a\"\nmirror = \"c\"\nmirror_ignore = [\"$.pid\"]\n",
        a = node_app("a", 1, "round_robin", "env = { APP_TAG = \"A\" }"),
        c = node_app("c", 1, "round_robin", "env = { APP_TAG = \"C\" }"),
    );
    let h = start(&toml).await;
    for _ in 0..5 {
        assert_eq!(h.get("/").await.unwrap().json()["tag"], "A");
    }
    let mut mirror = serde_json::Value::Null;
    for _ in 0..300 {
        let snap = admin_get(&h, "/live/snapshot", None).await.json();
        mirror = snap["data"]["mirrors"][0].clone();
        if mirror["compared"] == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(mirror["compared"], 5, "{mirror}");
    assert_eq!(mirror["mismatched"], 5);
    assert_eq!(mirror["consistency_percent"], 0.0);
    assert_eq!(mirror["mirror"], "c");
    let newest = mirror["newest_differences"].as_array().unwrap();
    assert_eq!(newest.len(), 5);
    let fields = newest[0]["fields"].as_array().unwrap();
    let paths: Vec<&str> = fields.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["$.tag"], "{mirror}");
    assert_eq!(fields[0]["primary"], "\"A\"");
    assert_eq!(fields[0]["candidate"], "\"C\"");
    assert_eq!(newest[0]["method"], "GET");
    assert_eq!(newest[0]["target"], "/");
    h.server.shutdown().await;
}

/// A worker in Python that burns a steady 5% of a core (each 100 ms it spins until its own
/// CPU clock advanced 5 ms) and answers every GET with its CPU clock and a wall clock, in
/// seconds: the truth the page is checked against.
const PY_WORKER_AT_FIVE_PERCENT: &str = "
import os, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Clock(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f'{time.process_time()} {time.monotonic()}'.encode()
        self.send_response(200)
        self.send_header('content-length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])), Clock)
threading.Thread(target=server.serve_forever, daemon=True).start()
while True:
    start, cpu = time.monotonic(), time.process_time()
    while time.process_time() - cpu < 0.005:
        pass
    time.sleep(max(0.0, 0.1 - (time.monotonic() - start)))
";

/// #26.4: a live page must show the CPU over whole intervals (a tick is 10 ms: one 100 ms
/// sample reads a steady 5% as 0% or 10%). Serve's app and worker figures each cover one
/// `sample_interval` (1 s): a worker at 5% of a core reads 5%, by its own CPU clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_at_five_percent_of_a_core_reads_five_percent() {
    let toml = format!(
        "{SERVER}\n[[app]]\nname = \"py\"\ncommand = [\"python3\", \"-c\", {script:?}]\nworkers = 1\nport_base = {base}\nstart_timeout_ms = 60000\n",
        script = PY_WORKER_AT_FIVE_PERCENT,
        base = free_base(2)
    );
    let h = start(&toml).await;
    let clock = || async {
        let body = h.get("/clock").await.expect("the worker answers").body;
        let mut it = body.split_whitespace().map(|x| x.parse::<f64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (cpu0, wall0) = clock().await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let snap = admin_get(&h, "/live/snapshot", None).await.json();
        let app = &snap["data"]["apps"][0];
        seen.push((
            app["cpu_percent"].as_f64().unwrap(),
            app["workers"][0]["cpu_percent"].as_f64().unwrap(),
        ));
    }
    let (cpu1, wall1) = clock().await;
    let truth = (cpu1 - cpu0) / (wall1 - wall0) * 100.0;
    assert!(
        (3.0..=8.0).contains(&truth),
        "the worker itself ran at {truth:.1}% (the machine is too busy to test this)"
    );
    for (app, worker) in &seen {
        assert!(
            (app - truth).abs() <= 3.0 && (worker - truth).abs() <= 3.0,
            "the page showed app {app:.1}%, worker {worker:.1}% for a worker at {truth:.1}%: \
             {seen:?}"
        );
    }
    h.server.shutdown().await;
}

//! Issue 25 — any service, unchanged: ordinary apps from npm (Express, Fastify, Koa, plain
//! `http`), PyPI (uvicorn, gunicorn, FastAPI) and Go's standard library, as their users
//! write them (`tests/apps`, installed by `./run setup`), run by serve in proxy and direct
//! mode with no code change, no health route, and never ready without proof.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::util::*;

/// An `[[app]]` running `command` with `workers` workers; `extra` lines appended.
fn app(name: &str, command: &[&str], workers: u16, extra: &str) -> String {
    let base = free_base(workers * 2);
    let cmd = command
        .iter()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "\n[[app]]\nname = \"{name}\"\ncommand = [{cmd}]\nworkers = {workers}\nport_base = {base}\n{extra}\n"
    )
}

/// `node tests/apps/node/FILE`.
fn node(file: &str) -> String {
    node_apps().join(file).display().to_string()
}

/// The lines that make an app direct on its own address.
fn direct(listen: SocketAddr) -> String {
    format!("mode = \"direct\"\nlisten = \"{listen}\"")
}

fn direct_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_base(1)))
}

/// GET `path` at `addr` on a fresh connection, its JSON body; an error after 10 s.
async fn get_json(addr: SocketAddr, path: &str) -> Result<serde_json::Value, String> {
    match tokio::time::timeout(Duration::from_secs(10), get_at(&client(), addr, path)).await {
        Err(_) => Err(format!("no answer from {addr}{path} within 10 s")),
        Ok(Err(e)) => Err(e),
        Ok(Ok(r)) if r.status != 200 => Err(format!("status {}: {}", r.status, r.body)),
        Ok(Ok(r)) => serde_json::from_str(&r.body).map_err(|e| format!("{e}: {}", r.body)),
    }
}

/// The pids that answered rounds of `n` concurrent `GET path` at `addr`: up to five
/// rounds, until two workers have answered (on a loaded machine the kernel may hand one
/// round's connections all to one worker of a shared socket).
async fn pids_serving(addr: SocketAddr, path: &str, n: usize) -> Result<HashSet<u64>, String> {
    let mut pids = HashSet::new();
    for _ in 0..5 {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let path = path.to_string();
                tokio::spawn(async move { get_json(addr, &path).await })
            })
            .collect();
        for t in tasks {
            let v = t.await.map_err(|e| e.to_string())??;
            pids.insert(v["pid"].as_u64().ok_or_else(|| format!("no pid in {v}"))?);
        }
        if pids.len() >= 2 {
            break;
        }
    }
    Ok(pids)
}

/// The slot's last restart detail, once it has one within `limit`.
async fn restart_detail(h: &Harness, app: usize, worker: usize, limit: Duration) -> String {
    let mut detail = String::new();
    eventually(limit, || {
        detail = h.server.status().apps[app].workers[worker]
            .last_error
            .clone()
            .unwrap_or_default();
        !detail.is_empty()
    })
    .await;
    detail
}

fn restarts(h: &Harness, app: usize) -> Vec<u64> {
    h.server.status().apps[app]
        .workers
        .iter()
        .map(|w| w.restarts)
        .collect()
}

/// The first defect: an unmodified Express app (`app.listen(process.env.PORT)`,
/// no health route) in direct mode. Before, both workers were reported ready and every
/// request to the app's address hung: nothing served fd 3. Now the Node preload serves
/// the app's own server on the shared socket, and both workers answer there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_serves_an_unmodified_express_app_on_the_shared_socket() {
    let listen = direct_listen();
    let toml = format!(
        "{SERVER}{}",
        app("web", &["node", &node("express.js")], 2, &direct(listen))
    );
    let h = start_unready(&toml).await;
    let ready = h.server.wait_ready(Duration::from_secs(60)).await;
    // Each request blocks its worker 50 ms, so concurrent ones reach both.
    let pids = pids_serving(listen, "/block?ms=50", 8).await;
    assert!(ready, "not ready: {:?}", h.server.status());
    let pids = pids.expect("every request on the shared socket is answered");
    let workers: HashSet<u64> = h
        .pids(0)
        .into_iter()
        .map(|p| u64::from(p.unwrap()))
        .collect();
    assert_eq!(pids, workers, "both workers serve the shared socket");
    assert_eq!(h.status_json()["apps"][0]["health"], "heartbeat");
    h.server.shutdown().await;
}

/// The second defect: the same app in proxy mode was restarted every
/// `start_timeout`, the default health path `/healthz` answering 404. Now no path is
/// probed unless one is configured: the preload's heartbeat and the app's own listener
/// make it ready, and it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_runs_an_express_app_without_a_health_route_and_never_restarts_it() {
    let toml = format!(
        "{SERVER}{}",
        app(
            "web",
            &["node", &node("express.js")],
            2,
            "start_timeout = \"3s\""
        )
    );
    let h = start_unready(&toml).await;
    assert!(
        h.server.wait_ready(Duration::from_secs(30)).await,
        "not ready: {:?}",
        h.server.status()
    );
    // Past two start time-outs: nothing restarted.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(restarts(&h, 0), vec![0, 0], "{:?}", h.server.status());
    let r = h.get("/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["app"], "express");
    h.server.shutdown().await;
}

/// The third defect: uvicorn `--fd 3` (the Python line of docs/serve.md) answered
/// requests but never became ready — the probe went to `$PORT`, where uvicorn does not
/// listen — and was restarted every `start_timeout`. Now it is ready once its event loop
/// polls the shared socket, and its port is not asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uvicorn_on_fd_3_becomes_ready_in_direct_mode_and_is_never_restarted() {
    let listen = direct_listen();
    let uvicorn = venv_bin("uvicorn");
    let dir = test_apps().join("python");
    let toml = format!(
        "{SERVER}{}",
        app(
            "asgi",
            &[
                &uvicorn.display().to_string(),
                "--fd",
                "3",
                "--app-dir",
                &dir.display().to_string(),
                "--no-access-log",
                "asgi_app:app",
            ],
            2,
            &format!("{}\nstart_timeout = \"5s\"", direct(listen)),
        )
    );
    let h = start_unready(&toml).await;
    assert!(
        h.server.wait_ready(Duration::from_secs(30)).await,
        "not ready: {:?}\n{:?}",
        h.server.status(),
        h.logs.lines()
    );
    let pids = pids_serving(listen, "/block?ms=50", 8).await.unwrap();
    assert_eq!(pids.len(), 2, "both uvicorn workers serve fd 3: {pids:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(restarts(&h, 0), vec![0, 0], "{:?}", h.server.status());
    assert_eq!(h.status_json()["apps"][0]["health"], "accept");
    h.server.shutdown().await;
}

/// Fastify (its own server object, and a second one for `localhost`'s other address),
/// Koa and a plain `http` server, each unchanged, in direct mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_serves_fastify_koa_and_plain_http_unchanged() {
    let apps = ["fastify", "koa", "http"];
    let listens: Vec<SocketAddr> = apps.iter().map(|_| direct_listen()).collect();
    let mut toml = SERVER.to_string();
    for (name, listen) in apps.iter().zip(&listens) {
        toml.push_str(&app(
            name,
            &["node", &node(&format!("{name}.js"))],
            1,
            &direct(*listen),
        ));
    }
    let h = start(&toml).await;
    for (name, listen) in apps.iter().zip(&listens) {
        let v = get_json(*listen, "/").await.unwrap();
        assert_eq!(v["app"], *name, "{v}");
    }
    h.server.shutdown().await;
}

/// An app that listens twice (a metrics server first, then the app on `$PORT`): only the
/// `$PORT` server is served on the shared socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_gives_the_shared_socket_to_the_port_server_of_an_app_that_listens_twice() {
    let listen = direct_listen();
    let toml = format!(
        "{SERVER}{}",
        app("two", &["node", &node("twice.js")], 1, &direct(listen))
    );
    let h = start(&toml).await;
    for _ in 0..3 {
        let v = get_json(listen, "/").await.unwrap();
        assert_eq!(v["server"], "app", "{v}");
    }
    h.server.shutdown().await;
}

/// A worker that never accepts on the shared socket is never ready, and says why and what
/// to do: here a plain `http` app run without the preload (it listens on `$PORT` only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_reports_a_worker_that_never_accepts_with_the_reason_and_the_fix() {
    let listen = direct_listen();
    let toml = format!(
        "{SERVER}{}",
        app(
            "web",
            &["node", &node("http.js")],
            1,
            &format!(
                "{}\npreload = false\nstart_timeout = \"2s\"\n[app.restart]\nbackoff = \"5s\"",
                direct(listen)
            ),
        )
    );
    let h = start_unready(&toml).await;
    let detail = restart_detail(&h, 0, 0, Duration::from_secs(20)).await;
    assert!(!h.server.wait_ready(Duration::from_millis(10)).await);
    for part in [
        "start_failed: worker 0 of web never accepted on the shared socket (fd 3)",
        "the app listens only on $PORT",
        "Node preload",
        "uvicorn --fd 3",
        "gunicorn --bind fd://3",
    ] {
        assert!(detail.contains(part), "{part:?} not in {detail:?}");
    }
    h.server.shutdown().await;
}

/// A blocked event loop in an app with no health route (Express, proxy mode) is out of
/// rotation and replaced — the preload's heartbeat stopped — while load on the other
/// worker fails no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_event_loop_without_a_health_route_is_replaced_and_fails_no_other_request() {
    let toml = format!(
        "{SERVER}{}",
        app("web", &["node", &node("express.js")], 2, "")
    );
    let h = start(&toml).await;
    let load = Load::start(h.server.listen_addr(), "/", 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let blocked = {
        let addr = h.server.listen_addr();
        tokio::spawn(async move { get_at(&client(), addr, "/block?ms=60000").await })
    };
    let detail = eventually(Duration::from_secs(20), || {
        restarts(&h, 0).iter().sum::<u64>() >= 1
    })
    .await;
    assert!(detail, "not replaced: {:?}", h.server.status());
    let stuck = h.server.status().apps[0]
        .workers
        .iter()
        .find(|w| w.restarts > 0)
        .and_then(|w| w.last_error.clone())
        .unwrap();
    assert!(
        stuck.starts_with("unhealthy") && stuck.contains("heartbeat"),
        "{stuck}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, failed, failures) = load.finish().await;
    assert!(ok > 0);
    assert_eq!(failed, 0, "other requests failed: {failures:?}");
    // The request that blocked the loop is never resent: it gets an error of its own.
    let r = blocked.await.unwrap().unwrap();
    assert_ne!(r.status, 200, "{}", r.body);
    assert!(h.server.wait_ready(Duration::from_secs(30)).await);
    h.server.shutdown().await;
}

/// A queue worker (Node, never listens): kept running with no traffic, said once — not
/// restarted every `start_timeout` — and still replaced when its event loop blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_worker_that_never_listens_is_supervised_and_replaced_when_it_blocks() {
    let toml = format!(
        "{SERVER}{}",
        app(
            "jobs",
            &["node", &node("queue.js")],
            1,
            "start_timeout = \"2s\"\nenv = { BLOCK_AFTER_MS = \"4000\" }"
        )
    );
    let h = start_unready(&toml).await;
    assert!(
        h.server.wait_ready(Duration::from_secs(20)).await,
        "{:?}",
        h.server.status()
    );
    assert_eq!(h.server.status().apps[0].ready, 0, "no traffic to it");
    assert_eq!(restarts(&h, 0), vec![0]);
    let detail = restart_detail(&h, 0, 0, Duration::from_secs(20)).await;
    assert!(
        detail.starts_with("unhealthy") && detail.contains("heartbeat"),
        "{detail:?}"
    );
    h.server.shutdown().await;
}

/// gunicorn in direct mode, with no bind (it takes fd 3 itself: LISTEN_FDS, systemd's
/// socket activation) and with a second bind on its `$PORT` (which gunicorn ignores once
/// it has a socket from LISTEN_FDS: serve proves it on the shared socket). Its sync worker
/// waits in `select`, which `/proc` does not show: an accepted probe connection is the
/// proof. (`--bind fd://3` on top of LISTEN_FDS makes gunicorn open fd 3 twice and exit
/// with EBADF; `--check` says so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gunicorn_on_fd_3_alone_and_with_a_second_bind_becomes_ready_in_direct_mode() {
    let gunicorn = venv_bin("gunicorn").display().to_string();
    let dir = test_apps().join("python").display().to_string();
    let (a, b) = (direct_listen(), direct_listen());
    let common = [
        "--workers",
        "1",
        "--no-control-socket",
        "--chdir",
        &dir,
        "wsgi_app:app",
    ];
    let alone: Vec<&str> = std::iter::once(gunicorn.as_str()).chain(common).collect();
    let with_second: Vec<&str> = [gunicorn.as_str(), "--bind", "127.0.0.1:{port}"]
        .into_iter()
        .chain(common)
        .collect();
    let toml = format!(
        "{SERVER}{}{}",
        app("alone", &alone, 2, &direct(a)),
        app("second", &with_second, 1, &direct(b))
    );
    let h = start(&toml).await;
    assert_eq!(
        pids_serving(a, "/block?ms=50", 6).await.unwrap().len(),
        2,
        "both gunicorn workers serve fd 3"
    );
    assert_eq!(get_json(b, "/").await.unwrap()["app"], "wsgi");
    assert_eq!(restarts(&h, 0), vec![0, 0]);
    assert_eq!(restarts(&h, 1), vec![0]);
    h.server.shutdown().await;
}

/// A Python worker stuck in a handler that never returns (blocking the event loop) with
/// no health route, in proxy mode: the TCP accept check sees its loop take no connection
/// — the kernel still completes handshakes from the backlog — and it is replaced. A plain
/// ASGI app and a FastAPI app under uvicorn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_python_worker_without_a_health_route_is_replaced_in_proxy_mode() {
    let uvicorn = venv_bin("uvicorn").display().to_string();
    let dir = test_apps().join("python").display().to_string();
    let cmd = |module: &'static str| {
        vec![
            uvicorn.clone(),
            "--port".into(),
            "{port}".into(),
            "--app-dir".into(),
            dir.clone(),
            "--no-access-log".into(),
            module.into(),
        ]
    };
    let (asgi, fastapi) = (cmd("asgi_app:app"), cmd("fastapi_app:app"));
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let toml = format!(
        "{SERVER}{}{}\n[[route]]\nprefix = \"/asgi\"\napp = \"asgi\"\n[[route]]\nprefix = \"/\"\napp = \"fastapi\"\n",
        app("asgi", &refs(&asgi), 1, ""),
        app("fastapi", &refs(&fastapi), 1, "")
    );
    let h = start(&toml).await;
    let addr = h.server.listen_addr();
    assert_eq!(get_json(addr, "/").await.unwrap()["app"], "fastapi");
    let stuck: Vec<_> = ["/asgi/block?ms=600000", "/block?ms=600000"]
        .into_iter()
        .map(|p| tokio::spawn(async move { get_at(&client(), addr, p).await }))
        .collect();
    for app in 0..2 {
        let detail = restart_detail(&h, app, 0, Duration::from_secs(30)).await;
        assert!(
            detail.starts_with("unhealthy") && detail.contains("not accepted"),
            "app {app}: {detail:?}"
        );
    }
    assert!(h.server.wait_ready(Duration::from_secs(30)).await);
    assert_eq!(get_json(addr, "/").await.unwrap()["app"], "fastapi");
    for t in stuck {
        t.abort();
    }
    h.server.shutdown().await;
}

/// Go: a `net/http` service reading `PORT` (proxy mode, the accept check: no restarts),
/// and one using the socket-activation convention (direct mode, proven on fd 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_services_run_unchanged_on_port_and_on_fd_3() {
    let bins = tempfile::tempdir().unwrap();
    let port = go_build("port", bins.path());
    let activation = go_build("activation", bins.path());
    let listen = direct_listen();
    let path = |p: &Path| p.display().to_string();
    let toml = format!(
        "{SERVER}{}{}",
        app("port", &[&path(&port)], 2, ""),
        app("activation", &[&path(&activation)], 2, &direct(listen))
    );
    let h = start(&toml).await;
    assert_eq!(h.get("/").await.unwrap().json()["app"], "go-port");
    let v = get_json(listen, "/").await.unwrap();
    assert_eq!(v["app"], "go-activation");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(restarts(&h, 0), vec![0, 0]);
    assert_eq!(restarts(&h, 1), vec![0, 0]);
    h.server.shutdown().await;
}

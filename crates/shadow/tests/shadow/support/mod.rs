//! What the shadow tests share: the test kit's scripted servers and client
//! (`scalpel_testkit::scripted`), and a proxy run on loopback with its metrics.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::sync::Arc;
use std::time::Duration;

use scalpel_diff::Sampler;
use scalpel_shadow::{Proxy, ProxyConfig, ProxyStats, Recorder, Summary, Upstream};

pub use scalpel_testkit::eventually_some as eventually;
pub use scalpel_testkit::metric_value as metric;
pub use scalpel_testkit::scripted::*;

/// A proxy of the test, running on loopback until `stop` is sent.
pub struct Running {
    /// `http://ADDR` of its listener.
    pub url: String,
    /// Its listener's port.
    pub port: u16,
    /// `http://ADDR` of its admin server.
    pub admin: String,
    pub recorder: Arc<Recorder>,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<ProxyStats>,
}

/// Binds `cfg` (with an admin address) and runs it.
pub async fn start_with(cfg: ProxyConfig, recorder: Arc<Recorder>) -> Running {
    let proxy = Proxy::bind(cfg, recorder.clone()).await.unwrap();
    run(proxy, recorder)
}

/// Runs a bound proxy on a task of its own.
pub fn run(proxy: Proxy, recorder: Arc<Recorder>) -> Running {
    let port = proxy.local_addr().port();
    let url = format!("http://{}", proxy.local_addr());
    let admin = format!("http://{}", proxy.admin_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        proxy
            .run(async {
                let _ = rx.await;
            })
            .await
            .unwrap()
    });
    Running {
        url,
        port,
        admin,
        recorder,
        stop,
        task,
    }
}

/// A proxy config on an ephemeral port with an admin server, mirroring every safe request
/// with generous limits; a test sets what it is about with `..proxy_cfg(p, c)`.
pub fn proxy_cfg(primary: Upstream, candidate: Upstream) -> ProxyConfig {
    ProxyConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        primary,
        candidate,
        secondary: None,
        admin: Some("127.0.0.1:0".parse().unwrap()),
        admin_hosts: Vec::new(),
        trusted_proxies: Vec::new(),
        sampler: Sampler::new(100.0).unwrap(),
        sample_key: None,
        mirror_unsafe: false,
        queue: 1024,
        mirror_concurrency: 64,
        mirror_timeout: Duration::from_secs(20),
        primary_timeout: Duration::from_secs(20),
        max_request_body: 1024,
        max_response_body: 4 << 20,
        mirror_budget: 256 << 20,
        mirror_max_age: Duration::from_secs(60),
        client_timeout: Duration::from_secs(30),
        flush_interval: Duration::from_millis(200),
        tls: None,
    }
}

/// The proxy's `/metrics` text.
pub async fn metrics(admin: &str) -> String {
    let c = client();
    String::from_utf8(get(&c, &format!("{admin}/metrics")).await.body).unwrap()
}

/// Every chosen request ended in exactly one of compared, failed or skipped.
pub fn accounted(s: &Summary) -> u64 {
    s.compared + s.errors + s.skipped
}

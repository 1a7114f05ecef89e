//! Proxy and replay against real servers on loopback.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use scalpel_diff::{Comparer, DiffKind, NoiseRule, RouteNormalizer, Sampler};
use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
use scalpel_shadow::{
    CompareSettings, ProxyConfig, Recorder, Redactor, ReplayConfig, Summary, Upstream, replay,
};
use support::{Answer, Asked, Running, dead_addr, eventually, get, send, serve, start_with};

fn user_id(a: &Asked) -> u64 {
    a.path_and_query
        .split('/')
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn primary_body(id: u64) -> String {
    format!(
        r#"{{"user":{id},"balance":{},"currency":"IDR","tags":["a","b","c"],"frozen":false}}"#,
        id * 100
    )
}

/// The candidate with one planted difference per chosen id.
fn candidate_answer(id: u64) -> Answer {
    let b = id * 100;
    match id {
        3 => Answer::json(primary_body(id)).status(500),
        5 => Answer::json(primary_body(id)).header("content-type", "text/plain"),
        7 => Answer::json(format!(
            r#"{{"user":{id},"balance":{},"currency":"IDR","tags":["a","b","c"],"frozen":false}}"#,
            b + 1
        )),
        11 => Answer::json(format!(
            r#"{{"user":{id},"balance":"{b}","currency":"IDR","tags":["a","b","c"],"frozen":false}}"#
        )),
        13 => Answer::json(format!(
            r#"{{"user":{id},"balance":{b},"tags":["a","b","c"],"frozen":false}}"#
        )),
        17 => Answer::json(format!(
            r#"{{"user":{id},"balance":{b},"currency":"IDR","tags":["c","a","b"],"frozen":false}}"#
        )),
        19 => Answer::json(format!(
            r#"{{"user":{id},"balance":{b},"currency":"IDR","tags":["a","b","c"],"frozen":false,"debug":true}}"#
        )),
        _ => Answer::json(primary_body(id)),
    }
}

fn settings(secondary: bool) -> CompareSettings {
    CompareSettings::new(
        Comparer::new(),
        RouteNormalizer::default(),
        NoiseRule::default(),
        Redactor::default(),
        20,
        secondary,
    )
}

fn id_set(n: u64) -> Arc<RequestSet> {
    let t = RequestTemplate::parse("GET", "/v1/users/{id}/stats?days=30", &[], None).unwrap();
    let ids = DataSet::from_lines("id", (1..=n).map(|i| i.to_string()).collect());
    Arc::new(RequestSet::new(t, Some(ids), Order::Sequential).unwrap())
}

fn replay_cfg(p: &str, c: &str, s: Option<&str>) -> ReplayConfig {
    ReplayConfig {
        primary: Upstream::parse(p).unwrap(),
        candidate: Upstream::parse(c).unwrap(),
        secondary: s.map(|s| Upstream::parse(s).unwrap()),
        concurrency: 4,
        timeout: Duration::from_secs(20),
        max_body: 1 << 20,
    }
}

fn fields(s: &Summary) -> BTreeSet<(String, DiffKind, u64)> {
    s.endpoints
        .iter()
        .flat_map(|e| e.fields.iter().map(|f| (f.path.clone(), f.kind, f.count)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_finds_every_planted_difference_and_nothing_else() {
    let primary = serve(|a| Answer::json(primary_body(user_id(a)))).await;
    let candidate = serve(|a| candidate_answer(user_id(a))).await;
    let recorder = Arc::new(Recorder::new(settings(false), None));
    let stats = replay(
        id_set(30),
        replay_cfg(&primary.url(), &candidate.url(), None),
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    assert_eq!(stats.requests, 30);
    let s = recorder.summary();
    let want: BTreeSet<(String, DiffKind, u64)> = [
        ("status", DiffKind::Status),
        ("header:content-type", DiffKind::Header),
        ("$.balance", DiffKind::ValueChanged),
        ("$.balance", DiffKind::TypeChanged),
        ("$.currency", DiffKind::Missing),
        ("$.tags", DiffKind::ArrayOrder),
        ("$.debug", DiffKind::Extra),
    ]
    .into_iter()
    .map(|(p, k)| (p.to_string(), k, 1))
    .collect();
    assert_eq!(fields(&s), want);
    assert_eq!(
        (s.compared, s.matched, s.mismatched, s.errors),
        (30, 23, 7, 0)
    );
    assert_eq!(s.endpoints.len(), 1);
    assert_eq!(s.endpoints[0].endpoint, "/v1/users/{id}/stats");
    assert!(s.noise.is_empty());
    assert_eq!(primary.hits(), 30);
    assert_eq!(candidate.hits(), 30);
    // Every differing request is kept as a sample (7 distinct signatures, budget 20).
    assert_eq!(recorder.samples().len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_secondary_timestamps_are_noise_and_a_real_change_is_not() {
    let clock = Arc::new(AtomicU64::new(0));
    let answer = move |a: &Asked, clock: &AtomicU64, bump: bool| {
        let id = user_id(a);
        let ts = clock.fetch_add(1, Ordering::SeqCst);
        let balance = if bump && id.is_multiple_of(5) {
            id * 100 + 1
        } else {
            id * 100
        };
        Answer::json(format!(r#"{{"user":{id},"balance":{balance},"ts":{ts}}}"#))
    };
    let (c1, c2, c3) = (clock.clone(), clock.clone(), clock.clone());
    let primary = serve(move |a| answer(a, &c1, false)).await;
    let secondary = serve(move |a| answer(a, &c2, false)).await;
    let candidate = serve(move |a| answer(a, &c3, true)).await;
    let recorder = Arc::new(Recorder::new(settings(true), None));
    replay(
        id_set(30),
        replay_cfg(&primary.url(), &candidate.url(), Some(&secondary.url())),
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    let s = recorder.summary();
    assert_eq!(
        fields(&s),
        BTreeSet::from([("$.balance".to_string(), DiffKind::ValueChanged, 6)])
    );
    assert_eq!((s.compared, s.mismatched, s.matched), (30, 6, 24));
    assert_eq!(s.noise.len(), 1);
    assert_eq!(
        (
            s.noise[0].path.as_str(),
            s.noise[0].count,
            s.noise[0].noise_count
        ),
        ("$.ts", 30, 30)
    );
}

fn proxy_cfg(primary: &str, candidate: &str) -> ProxyConfig {
    ProxyConfig {
        max_response_body: 64 * 1024,
        ..support::proxy_cfg(
            Upstream::parse(primary).unwrap(),
            Upstream::parse(candidate).unwrap(),
        )
    }
}

async fn start(cfg: ProxyConfig) -> Running {
    let recorder = Arc::new(Recorder::new(settings(cfg.secondary.is_some()), None));
    start_with(cfg, recorder).await
}

/// The candidate sleeps, errors or is not there at all: clients get the primary's answers
/// unchanged and do not wait for the candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_failing_or_dead_candidate_never_touches_the_client() {
    let sleep = Duration::from_secs(4);
    let primary = serve(|a| Answer::json(primary_body(user_id(a)))).await;
    let slow = serve(move |a| Answer::json(primary_body(user_id(a))).delay(sleep)).await;
    let failing = serve(|_| Answer::json(r#"{"error":"boom"}"#).status(500)).await;
    let dead = format!("http://{}", dead_addr());
    let c = support::client();
    for cand in [slow.url(), failing.url(), dead] {
        let mut cfg = proxy_cfg(&primary.url(), &cand);
        cfg.mirror_timeout = Duration::from_secs(10);
        let p = start(cfg).await;
        for id in 1..=20u64 {
            let got = get(&c, &format!("{}/v1/users/{id}/stats", p.url)).await;
            assert_eq!(got.status, 200, "candidate {cand}");
            assert_eq!(String::from_utf8(got.body).unwrap(), primary_body(id));
            assert_eq!(got.headers["content-type"], "application/json");
            assert!(
                got.elapsed < sleep / 2,
                "request {id} took {:?} with candidate {cand}",
                got.elapsed
            );
        }
        if cand == failing.url() {
            let s = eventually("20 compared", Duration::from_secs(30), async || {
                let s = p.recorder.summary();
                (s.compared == 20).then_some(s)
            })
            .await;
            assert_eq!(s.mismatched, 20);
        } else if cand != slow.url() {
            let s = eventually("20 candidate errors", Duration::from_secs(30), async || {
                let s = p.recorder.summary();
                (s.errors == 20).then_some(s)
            })
            .await;
            assert_eq!(s.errors_by_kind.get("candidate:connect"), Some(&20));
            assert_eq!(s.compared, 0);
        }
        let _ = p.stop.send(());
        let _ = p.task.await;
    }
    assert_eq!(primary.hits(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mirror_queue_skips_and_counts() {
    let primary = serve(|_| Answer::json("{}")).await;
    let candidate = serve(|_| Answer::json("{}").delay(Duration::from_secs(2))).await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    cfg.queue = 1;
    cfg.mirror_concurrency = 1;
    let p = start(cfg).await;
    let c = support::client();
    for _ in 0..10 {
        assert_eq!(get(&c, &format!("{}/x", p.url)).await.status, 200);
    }
    let s = p.recorder.summary();
    let full = s.skipped_by_reason.get("queue_full").copied().unwrap_or(0);
    // One in flight, one held by the dispatcher waiting for a slot, one in the queue:
    // at least 7 of 10 were skipped.
    assert!(full >= 7, "queue_full = {full}");
    let metrics = String::from_utf8(get(&c, &format!("{}/metrics", p.admin)).await.body).unwrap();
    assert!(
        metrics.contains(&format!(
            "scalpel_shadow_skipped_total{{reason=\"queue_full\"}} {full}"
        )),
        "{metrics}"
    );
    let s = eventually(
        "mirrored pairs compared",
        Duration::from_secs(30),
        async || {
            let s = p.recorder.summary();
            (s.compared + full >= 10).then_some(s)
        },
    )
    .await;
    assert_eq!(s.compared + s.skipped, 10);
    let _ = p.stop.send(());
    let _ = p.task.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mirrors_safe_methods_counts_big_bodies_and_streams_big_answers() {
    let big = "x".repeat(200_000);
    let big2 = big.clone();
    let primary = serve(move |a| {
        if a.path_and_query == "/big" {
            Answer::json(format!("\"{big2}\""))
        } else {
            Answer::json(format!(
                r#"{{"path":"{}","len":{}}}"#,
                a.path_and_query,
                a.body.len()
            ))
        }
    })
    .await;
    let big3 = big.clone();
    let candidate = serve(move |a| {
        if a.path_and_query == "/big" {
            Answer::json(format!("\"{big3}\""))
        } else if a.path_and_query == "/differs" {
            Answer::json(r#"{"path":"/differs","len":1}"#)
        } else {
            Answer::json(format!(
                r#"{{"path":"{}","len":{}}}"#,
                a.path_and_query,
                a.body.len()
            ))
        }
    })
    .await;
    let p = start(proxy_cfg(&primary.url(), &candidate.url())).await;
    let c = support::client();
    for path in ["/a", "/b", "/differs", "/c"] {
        assert_eq!(get(&c, &format!("{}{path}", p.url)).await.status, 200);
    }
    // Not mirrored: POST without --mirror-unsafe.
    let got = send(&c, "POST", &format!("{}/post", p.url), &[], b"hello").await;
    assert_eq!(
        String::from_utf8(got.body).unwrap(),
        r#"{"path":"/post","len":5}"#
    );
    // Body over --max-body: the primary gets all of it; the mirror is skipped and counted.
    let body = vec![b'z'; 5000];
    let got = send(&c, "GET", &format!("{}/withbody", p.url), &[], &body).await;
    assert_eq!(
        String::from_utf8(got.body).unwrap(),
        r#"{"path":"/withbody","len":5000}"#
    );
    // Answer over the capture limit: the client gets all of it; not compared, counted.
    let got = get(&c, &format!("{}/big", p.url)).await;
    assert_eq!(got.body.len(), big.len() + 2);

    let s = eventually("4 compared", Duration::from_secs(30), async || {
        let s = p.recorder.summary();
        (s.compared == 4 && s.skipped == 2).then_some(s)
    })
    .await;
    assert_eq!(s.mismatched, 1);
    assert_eq!(s.skipped_by_reason.get("request_body_too_large"), Some(&1));
    assert_eq!(s.skipped_by_reason.get("response_too_large"), Some(&1));
    assert_eq!(
        fields(&s),
        BTreeSet::from([("$.len".to_string(), DiffKind::ValueChanged, 1)])
    );
    // The candidate never saw the POST nor the over-limit body.
    assert_eq!(candidate.hits(), 5);
    let metrics = String::from_utf8(get(&c, &format!("{}/metrics", p.admin)).await.body).unwrap();
    for line in [
        "scalpel_shadow_requests_total 7",
        "scalpel_shadow_not_mirrored_total{reason=\"method\"} 1",
        "scalpel_shadow_compared_total 4",
        "scalpel_shadow_mismatched_total 1",
        "scalpel_shadow_field_differences_total{endpoint=\"/differs\",path=\"$.len\",kind=\"value_changed\",verdict=\"real\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing `{line}` in\n{metrics}"
        );
    }
    let _ = p.stop.send(());
    let _ = p.task.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_by_key_mirrors_the_same_users_every_time() {
    let primary = serve(|_| Answer::json("{}")).await;
    let candidate = serve(|_| Answer::json("{}")).await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    cfg.sampler = Sampler::new(30.0).unwrap();
    cfg.sample_key = Some(scalpel_diff::SampleKey::parse("path:2").unwrap());
    let p = start(cfg).await;
    let c = support::client();
    for round in 0..2 {
        for id in 0..50 {
            get(&c, &format!("{}/v1/users/user-{id}/stats", p.url)).await;
        }
        let expected = (0..50)
            .filter(|id| {
                Sampler::new(30.0)
                    .unwrap()
                    .keep(format!("user-{id}").as_bytes())
            })
            .count() as u64
            * (round + 1);
        eventually(
            "sampled mirrors arrive",
            Duration::from_secs(30),
            async || (candidate.hits() == expected).then_some(()),
        )
        .await;
    }
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Mirrors and comparisons run on their own thread at the lowest CPU priority, so that on
/// a busy machine they, not the clients' requests, fall behind (docs/shadow.md).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_run_on_their_own_low_priority_thread() {
    let primary = serve(|a| Answer::json(primary_body(user_id(a)))).await;
    let candidate = serve(|a| Answer::json(primary_body(user_id(a)))).await;
    let p = start(proxy_cfg(&primary.url(), &candidate.url())).await;
    let c = support::client();
    for id in 1..=5u64 {
        assert_eq!(
            get(&c, &format!("{}/v1/users/{id}/stats", p.url))
                .await
                .status,
            200
        );
    }
    eventually("5 compared", Duration::from_secs(30), async || {
        (p.recorder.summary().compared == 5).then_some(())
    })
    .await;
    let mirror_nice: Vec<i64> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim() == "scalpel-mirror").then_some(())?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after "(comm) ": state is field 3, nice is field 19.
            let rest = &stat[stat.rfind(')')? + 2..];
            rest.split(' ').nth(16)?.parse().ok()
        })
        .collect();
    // Other tests of this binary may run proxies at the same time: each has its own.
    assert!(
        !mirror_nice.is_empty() && mirror_nice.iter().all(|n| *n == 19),
        "mirror threads and their nice values: {mirror_nice:?}"
    );
    let _ = p.stop.send(());
    // `run` returns only after the mirror thread was joined.
    tokio::time::timeout(Duration::from_secs(60), p.task)
        .await
        .expect("the proxy stops")
        .unwrap();
}

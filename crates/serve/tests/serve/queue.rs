//! `max_in_flight_per_worker` (issue 13, the uneven runtime workload): each worker gets
//! at most N requests at once and the rest wait in the app's one FIFO queue for the first
//! worker that frees, instead of queueing inside a busy worker behind a slow request.
//! Real Node workers (tests/apps/app.js) on loopback.

use std::time::Duration;

use crate::util::*;

/// The pid of the worker with a request in flight, once one has.
async fn busy_worker(h: &Harness) -> u64 {
    assert!(
        eventually(Duration::from_secs(20), || {
            h.server.status().apps[0]
                .workers
                .iter()
                .any(|w| w.in_flight == 1)
        })
        .await,
        "the slow request never got in flight: {:?}",
        h.server.status()
    );
    h.server.status().apps[0]
        .workers
        .iter()
        .find(|w| w.in_flight == 1)
        .and_then(|w| w.pid)
        .expect("a busy worker") as u64
}

/// One worker holds a slow request; four more requests arrive at once. With
/// `max_in_flight_per_worker = 1` every one of them goes to the other worker — they wait
/// for it in the balancer's queue, never behind the slow one. Before (least_conn alone),
/// once the free worker had one request the two counts tied and the next request was
/// sent to the busy worker, to wait there behind the slow request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_waits_behind_a_busy_worker_with_max_in_flight_per_worker() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "least_conn", "max_in_flight_per_worker = 1")
    ))
    .await;
    let addr = h.server.listen_addr();
    // Still running while the others are served (about 4 s in all, one after the other).
    let slow = tokio::spawn(async move { get_at(&client(), addr, "/slow?ms=12000").await });
    let busy = busy_worker(&h).await;
    let quick: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { get_at(&client(), addr, "/slow?ms=1000").await }))
        .collect();
    let mut saw_queue = false;
    let mut pids = Vec::new();
    for q in quick {
        while !q.is_finished() {
            saw_queue |= h.server.status().apps[0].queued > 0;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = q.await.unwrap().expect("answered");
        assert_eq!(r.status, 200, "{}", r.body);
        pids.push(pid_of(&r));
    }
    assert!(
        pids.iter().all(|&p| p != busy),
        "a request went to the busy worker {busy}: {pids:?}"
    );
    assert!(
        saw_queue,
        "four requests for one free slot, yet none queued"
    );
    let st = h.status_json();
    assert_eq!(st["apps"][0]["max_in_flight_per_worker"], 1, "{st}");
    assert_eq!(st["apps"][0]["queued"], 0, "{st}");
    let r = slow.await.unwrap().expect("answered");
    assert_eq!((r.status, pid_of(&r)), (200, busy), "{}", r.body);
    h.server.shutdown().await;
}

/// The queue is bounded in length and in time, and says so in the toolkit's JSON error
/// body: with the only slot taken and `max_queued = 1` waiting, one more request gets 503
/// `queue_full` (`Retry-After: 1`) at once; the waiting one gets 503 `queue_timeout`
/// after `queue_timeout`. Both are counted per app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_and_a_queue_timeout_answer_503_with_a_json_body() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app(
            "web",
            1,
            "least_conn",
            "max_in_flight_per_worker = 1\nmax_queued = 1\nqueue_timeout = \"2s\""
        )
    ))
    .await;
    let addr = h.server.listen_addr();
    // Outlasts the queue's 2 s time-out.
    let slow = tokio::spawn(async move { get_at(&client(), addr, "/slow?ms=8000").await });
    busy_worker(&h).await;
    let waiting = tokio::spawn(async move { get_at(&client(), addr, "/").await });
    assert!(
        eventually(Duration::from_secs(20), || h.server.status().apps[0].queued
            == 1)
        .await,
        "the second request never queued: {:?}",
        h.server.status()
    );
    let full = h.get("/").await.expect("answered");
    assert_eq!(full.status, 503, "{}", full.body);
    assert_eq!(full.headers["retry-after"], "1");
    let (kind, detail) = full.error();
    assert_eq!(kind, "queue_full", "{}", full.body);
    assert!(detail.contains("max_queued"), "{detail}");
    let timed_out = waiting.await.unwrap().expect("answered");
    assert_eq!(timed_out.status, 503, "{}", timed_out.body);
    let (kind, detail) = timed_out.error();
    assert_eq!(kind, "queue_timeout", "{}", timed_out.body);
    assert!(detail.contains("2s"), "{detail}");
    let m = h.server.metrics_text();
    for reason in ["queue_full", "queue_timeout"] {
        let sample =
            format!("scalpel_serve_queue_rejected_total{{app=\"web\",reason=\"{reason}\"}}");
        assert_eq!(metric(&m, &sample), 1.0, "{m}");
    }
    assert_eq!(metric(&m, "scalpel_serve_queued{app=\"web\"}"), 0.0, "{m}");
    let r = slow.await.unwrap().expect("answered");
    assert_eq!(r.status, 200, "{}", r.body);
    // With its slot free again, the worker serves as before.
    let r = h.get("/").await.expect("answered");
    assert_eq!(r.status, 200, "{}", r.body);
    h.server.shutdown().await;
}

/// A worker frozen on a request (a blocked event loop) holds its slot; it must not hold
/// the queue. Under steady load, with more requests than slots, the other worker serves
/// every other request until the frozen one is replaced, and the replacement's slot is
/// filled from the queue: no request fails but the poison one (504, not resent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_does_not_hold_the_queue() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "least_conn", "max_in_flight_per_worker = 1")
    ))
    .await;
    let before = h.pids(0);
    let load = Load::start(h.server.listen_addr(), "/", 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let poison = h.get("/block?ms=30000").await.unwrap();
    assert_eq!(poison.status, 504, "{}", poison.body);
    assert_eq!(poison.error().0, "worker_stalled", "{}", poison.body);
    assert!(
        eventually(Duration::from_secs(30), || {
            let s = h.server.status();
            s.apps[0].ready == 2 && s.apps[0].workers.iter().all(|w| w.state == "ready")
        })
        .await,
        "{:?}",
        h.server.status()
    );
    let after = h.pids(0);
    assert_eq!(
        before.iter().filter(|p| after.contains(p)).count(),
        1,
        "one worker replaced: {before:?} → {after:?}"
    );
    let (ok, failed, failures) = load.finish().await;
    // The replacement takes requests from the queue too: with least_conn, an idle pair's
    // ties go to each worker in turn.
    let new_pid = after
        .iter()
        .flatten()
        .find(|p| !before.contains(&Some(**p)))
        .map(|&p| u64::from(p))
        .expect("a new worker");
    let mut served = Vec::new();
    for _ in 0..6 {
        let r = h.get("/").await.expect("answered");
        assert_eq!(r.status, 200, "{}", r.body);
        served.push(pid_of(&r));
    }
    assert!(
        served.contains(&new_pid),
        "the replacement {new_pid} got no request: {served:?}"
    );
    assert_eq!(
        failed, 0,
        "requests failed besides the poison one: {failures:?}"
    );
    assert!(ok > 10, "too few requests to mean anything: {ok}");
    h.server.shutdown().await;
}

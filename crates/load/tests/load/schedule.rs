//! The load engine as a library against a real HTTP/1.1 server on loopback.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use scalpel_load::{FixedRequest, Model, Plan, StepLimit, Target};
use scalpel_testkit::raw::serve_requests;

/// A keep-alive server answering every request at once, a thread per connection.
fn server() -> String {
    server_slow_after(u64::MAX, Duration::ZERO)
}

/// The same, but every request after the first `fast` sleeps `delay` before its answer.
fn server_slow_after(fast: u64, delay: Duration) -> String {
    let seen = AtomicU64::new(0);
    let port = serve_requests(move |_, writer| {
        if seen.fetch_add(1, Ordering::SeqCst) >= fast {
            std::thread::sleep(delay);
        }
        writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_ok()
    });
    format!("http://127.0.0.1:{port}")
}

fn plan(model: Model, limit: StepLimit) -> Plan {
    Plan {
        model,
        limit,
        connections: 4,
        max_in_flight: 8,
        threads: 1,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(5),
        slo: Some(scalpel_load::Slo::parse("errors<1%").unwrap()),
        rounds: 1,
        request_label: "GET /".into(),
        shard: scalpel_load::Shard::WHOLE,
        start_at: None,
    }
}

/// #18.3: at an absurd rate the generator counted the due requests one by one — 1e10 of
/// them for a 1 s step took it 30–55 s of both cores, and its own collapse was reported as
/// the target's rate. Now a step ends on time whatever the rate, and what could not even be
/// scheduled is counted, arithmetically, as not sent (and the rate as not delivered).
#[test]
fn an_absurd_rate_ends_on_time_and_counts_what_was_not_sent() {
    let url = server();
    let target = Target::new("t", &url, Arc::new(FixedRequest::new("GET", "/"))).unwrap();
    // The highest rate a plan may ask (above it the plan is refused): far beyond what one
    // generator sends to one loopback server, so most requests are never sent.
    let rate = scalpel_load::MAX_RATE;
    let refused = plan(
        Model::Open { rate: rate * 2.0 },
        StepLimit::Duration(Duration::from_secs(1)),
    );
    assert!(matches!(
        refused.validate(std::slice::from_ref(&target)),
        Err(scalpel_load::PlanError::AboveMaxRate { .. })
    ));
    let step = Duration::from_millis(300);
    // Counting one by one would take many seconds; 60 s is only a hang guard.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let plan = plan(Model::Open { rate }, StepLimit::Duration(step));
        let _ = tx.send(scalpel_load::run(&plan, vec![target], &mut |_| {}));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a 300 ms step at an absurd rate did not end within a minute")
        .unwrap();
    let s = &result.targets[0].steps[0];
    assert_eq!(
        s.requests + s.not_sent,
        (rate * step.as_secs_f64()) as u64,
        "{s:?}"
    );
    assert!(s.answered > 0 && s.errors == 0, "{s:?}");
    assert_eq!(s.slo_held, Some(false));
    let bp = result.targets[0].breaking_point.as_ref().unwrap();
    assert!(
        bp.reason.contains("the rate was not delivered"),
        "{}",
        bp.reason
    );
}

/// #18.8: a count-bound step divided its answers by the time to the last answer: 5
/// requests at 50 rps showed 62 rps "achieved".
#[test]
fn a_short_count_bound_step_never_achieves_more_than_offered() {
    let url = server();
    let target = Target::new("t", &url, Arc::new(FixedRequest::new("GET", "/"))).unwrap();
    let result = scalpel_load::run(
        &plan(
            Model::Ramp {
                start: 50.0,
                step: 50.0,
                max: 100.0,
            },
            StepLimit::Requests(5),
        ),
        vec![target],
        &mut |_| {},
    )
    .unwrap();
    for s in &result.targets[0].steps {
        let offered = s.offered_rps.unwrap();
        assert!(s.achieved_rps <= offered * 1.0001, "{s:?}");
        assert!(s.achieved_rps > offered * 0.5, "{s:?}");
    }
}

/// #18.1: an interrupt ends the run promptly — requests in flight are cut (counted
/// `interrupted`, not waited for up to their time-out) — and returns the step, partial.
#[test]
fn an_interrupt_cuts_what_is_in_flight_and_returns_the_partial_step() {
    for model in [Model::Closed, Model::Open { rate: 100.0 }] {
        // Every request of the run would be answered, after 90 s (the probe sends none).
        let url = server_slow_after(0, Duration::from_secs(90));
        let target = Target::new("t", &url, Arc::new(FixedRequest::new("GET", "/"))).unwrap();
        let mut plan = plan(model, StepLimit::Duration(Duration::from_secs(60)));
        plan.timeout = Duration::from_secs(120);
        let stop = scalpel_load::Stop::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let runner = stop.clone();
        std::thread::spawn(move || {
            let _ = tx.send(scalpel_load::run_until(
                &plan,
                vec![target],
                &mut |_| {},
                &runner,
            ));
        });
        std::thread::sleep(Duration::from_millis(500));
        stop.stop();
        // Waiting for the answers would take 90 s; 30 s is only a hang guard.
        let result = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("an interrupted run returns without waiting for its requests")
            .unwrap();
        assert!(result.interrupted);
        let s = &result.targets[0].steps[0];
        assert!(s.partial, "{s:?}");
        assert_eq!(s.slo_held, None, "a partial step has no verdict");
        assert!(s.interrupted > 0, "{model:?}: {s:?}");
        assert_eq!(s.answered, 0, "{s:?}");
    }
}

//! The request seam as the engine uses it, against a real HTTP/1.1 server on loopback:
//! endpoints of a mix counted apart (and adding up to the step, whatever was late or never
//! sent), a recorded schedule split over threads and shards, and a source that fails while
//! the run goes on (counted as the generator's own failure, never a hang).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scalpel_load::result::{StepResult, decode_histogram};
use scalpel_load::{
    Model, Plan, RecordedSchedule, RecordedTimes, Renderer, RequestParts, RequestSource, Shard,
    SourceError, StepLimit, Target,
};
use scalpel_testkit::raw::serve_requests;

/// A keep-alive server that sleeps `delay` before each answer and keeps the paths it got.
fn server(delay: Duration) -> (String, Arc<Mutex<Vec<String>>>) {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = paths.clone();
    let port = serve_requests(move |req, writer| {
        seen.lock().unwrap().push(req.path.clone());
        std::thread::sleep(delay);
        writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_ok()
    });
    (format!("http://127.0.0.1:{port}"), paths)
}

fn plan(model: Model, limit: StepLimit, max_in_flight: u32) -> Plan {
    Plan {
        model,
        limit,
        connections: 1,
        max_in_flight,
        threads: 2,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(10),
        slo: None,
        rounds: 1,
        request_label: "test".into(),
        shard: Shard::WHOLE,
        start_at: None,
    }
}

/// Request `i` goes to `/e{endpoint}/{i}`; endpoints by a fixed scramble of `i`.
#[derive(Debug)]
struct ThreeEndpoints {
    names: Vec<String>,
}

impl ThreeEndpoints {
    fn new() -> ThreeEndpoints {
        ThreeEndpoints {
            names: vec!["a".into(), "b".into(), "c".into()],
        }
    }
}

fn endpoint(i: u64) -> usize {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62) as usize % 3
}

impl RequestSource for ThreeEndpoints {
    fn is_fixed(&self) -> bool {
        false
    }
    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(ThreeRenderer)
    }
    fn endpoints(&self) -> &[String] {
        &self.names
    }
    fn endpoint_of(&self, index: u64) -> usize {
        endpoint(index)
    }
}

struct ThreeRenderer;

impl Renderer for ThreeRenderer {
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        out.method = "GET".into();
        out.path_and_query = format!("/e{}/{index}", endpoint(index));
        Ok(())
    }
}

fn only_step(result: &scalpel_load::result::RunResult) -> StepResult {
    result.targets[0].steps[0].clone()
}

fn assert_endpoints_add_up(step: &StepResult) {
    let sum = |get: fn(&scalpel_load::result::EndpointResult) -> u64| {
        step.endpoints.iter().map(get).sum::<u64>()
    };
    assert_eq!(sum(|e| e.requests), step.requests, "requests");
    assert_eq!(sum(|e| e.sent), step.sent, "sent");
    assert_eq!(sum(|e| e.answered), step.answered, "answered");
    assert_eq!(sum(|e| e.errors), step.errors, "errors");
    assert_eq!(sum(|e| e.late), step.late, "late");
    assert_eq!(sum(|e| e.not_sent), step.not_sent, "not sent");
    let recorded: u64 = step
        .endpoints
        .iter()
        .map(|e| decode_histogram(&e.histogram).unwrap().len())
        .sum();
    assert_eq!(
        recorded,
        decode_histogram(&step.histogram).unwrap().len(),
        "every latency in its endpoint's histogram too"
    );
}

#[test]
fn endpoint_figures_add_up_to_the_step_even_when_requests_are_late_or_never_sent() {
    let (url, paths) = server(Duration::from_millis(5));
    let source = Arc::new(ThreeEndpoints::new());
    let target = Target::new("t", &url, source).unwrap();
    // 2000 rps at two connections that each take at least 5 ms: most requests wait, are
    // late, and many are never sent.
    let p = plan(
        Model::Open { rate: 2000.0 },
        StepLimit::Duration(Duration::from_millis(600)),
        2,
    );
    let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
    let step = only_step(&result);
    assert!(step.late > 0 && step.not_sent > 0, "{step:?}");
    assert_eq!(step.endpoints.len(), 3);
    assert_endpoints_add_up(&step);
    // Each endpoint counted what the server got for it (the probe sends no request).
    let paths = paths.lock().unwrap();
    for (k, e) in step.endpoints.iter().enumerate() {
        let got = paths
            .iter()
            .filter(|p| p.starts_with(&format!("/e{k}/")))
            .count() as u64;
        assert_eq!(e.sent, got, "endpoint {}", e.name);
    }
}

#[test]
fn endpoint_figures_add_up_in_the_closed_model() {
    let (url, _) = server(Duration::ZERO);
    let target = Target::new("t", &url, Arc::new(ThreeEndpoints::new())).unwrap();
    let mut p = plan(Model::Closed, StepLimit::Requests(600), 1);
    p.connections = 3;
    let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
    let step = only_step(&result);
    assert_eq!(step.requests, 600);
    assert_endpoints_add_up(&step);
    for (k, e) in step.endpoints.iter().enumerate() {
        let want = (0..600).filter(|&i| endpoint(i) == k).count() as u64;
        assert_eq!(e.requests, want, "request i goes to endpoint_of(i)");
    }
}

/// A recording of `len` requests 10 ms apart whose reading fails after `readable` of any
/// thread's requests; it notes every share a thread asked for.
#[derive(Debug)]
struct Recording {
    len: u64,
    readable: u64,
    render_fails_from: u64,
    asked: Mutex<Vec<(u64, u64)>>,
}

impl Recording {
    fn new(len: u64) -> Recording {
        Recording {
            len,
            readable: u64::MAX,
            render_fails_from: u64::MAX,
            asked: Mutex::new(Vec::new()),
        }
    }
}

struct RecordingRenderer {
    fails_from: u64,
}

impl Renderer for RecordingRenderer {
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        if index >= self.fails_from {
            return Err(SourceError("the file was truncated".into()));
        }
        out.method = "GET".into();
        out.path_and_query = format!("/r/{index}");
        Ok(())
    }
}

struct Walk {
    next: u64,
    stride: u64,
    len: u64,
    left: u64,
}

impl RecordedTimes for Walk {
    fn next_at(&mut self) -> Result<Option<Duration>, SourceError> {
        if self.left == 0 {
            return Err(SourceError("cannot read on".into()));
        }
        self.left -= 1;
        if self.next >= self.len {
            return Ok(None);
        }
        let at = Duration::from_millis(10 * self.next);
        self.next += self.stride;
        Ok(Some(at))
    }
}

impl RecordedSchedule for Recording {
    fn len(&self) -> u64 {
        self.len
    }
    fn span(&self) -> Duration {
        Duration::from_millis(10 * (self.len - 1))
    }
    fn times(&self, first: u64, stride: u64) -> Box<dyn RecordedTimes> {
        self.asked.lock().unwrap().push((first, stride));
        Box::new(Walk {
            next: first,
            stride,
            len: self.len,
            left: self.readable,
        })
    }
}

impl RequestSource for Recording {
    fn is_fixed(&self) -> bool {
        false
    }
    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(RecordingRenderer {
            fails_from: self.render_fails_from,
        })
    }
    fn recorded(&self) -> Option<&dyn RecordedSchedule> {
        Some(self)
    }
}

#[test]
fn a_recorded_schedule_sends_every_request_once_over_threads_and_shards() {
    for shard in [Shard::WHOLE, Shard::new(1, 3).unwrap()] {
        let (url, paths) = server(Duration::ZERO);
        let recording = Arc::new(Recording::new(30));
        let target = Target::new("t", &url, recording.clone()).unwrap();
        // Connections and the in-flight limit are the whole run's: two threads a shard.
        let mut p = plan(Model::Recorded { speed: 5.0 }, StepLimit::Requests(30), 12);
        p.connections = 3;
        p.shard = shard;
        let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
        let step = only_step(&result);
        let mine: Vec<u64> = (0..30).filter(|&i| shard.owns(i)).collect();
        assert_eq!(step.requests, mine.len() as u64, "{shard:?}");
        assert_eq!(step.not_sent, 0);
        // The shard's records, each once.
        let mut got: Vec<u64> = paths
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.trim_start_matches("/r/").parse().unwrap())
            .collect();
        got.sort_unstable();
        assert_eq!(got, mine, "{shard:?}");
        // Each thread read the times of its own requests: shard s of N, thread w of T takes
        // s + N·w + N·T·k.
        let mut asked = recording.asked.lock().unwrap().clone();
        asked.sort_unstable();
        let n = u64::from(shard.count());
        let s = u64::from(shard.index());
        assert_eq!(asked, [(s, 2 * n), (s + n, 2 * n)], "{shard:?}");
        // The offered rate is the recording's mean rate at the speed, this shard's part.
        let offered = step.offered_rps.unwrap();
        let want = 30.0 / (0.29 / 5.0) / n as f64;
        assert!((offered - want).abs() < 1e-6, "{offered} vs {want}");
    }
}

#[test]
fn a_recording_that_cannot_be_read_on_is_counted_not_sent_as_the_generators_own() {
    let (url, paths) = server(Duration::ZERO);
    // Each thread reads three times, then fails: 6 of 20 requests go out.
    let recording = Arc::new(Recording {
        readable: 3,
        ..Recording::new(20)
    });
    let target = Target::new("t", &url, recording).unwrap();
    let p = plan(Model::Recorded { speed: 10.0 }, StepLimit::Requests(20), 2);
    let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
    let step = only_step(&result);
    assert_eq!(step.sent, 6);
    assert_eq!(paths.lock().unwrap().len(), 6);
    assert_eq!(step.not_sent, 14, "the rest is counted, not dropped");
    assert_eq!(step.error_kinds.get("local:source"), Some(&14));
    assert_eq!(step.errors, 0, "not the target's errors");
}

#[test]
fn a_request_the_source_cannot_make_is_counted_not_sent_in_a_closed_loop() {
    let (url, paths) = server(Duration::ZERO);
    let recording = Arc::new(Recording {
        render_fails_from: 5,
        ..Recording::new(20)
    });
    let target = Target::new("t", &url, recording).unwrap();
    let mut p = plan(Model::Closed, StepLimit::Requests(12), 1);
    p.threads = 1;
    let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
    let step = only_step(&result);
    assert_eq!(step.sent, 5);
    assert_eq!(paths.lock().unwrap().len(), 5);
    assert_eq!(step.not_sent, 7);
    assert_eq!(step.error_kinds.get("local:source"), Some(&7));
    // A time-bound closed loop over a broken source pauses between attempts instead of
    // spinning: it ends on time with the failures counted.
    let recording = Arc::new(Recording {
        render_fails_from: 0,
        ..Recording::new(20)
    });
    let target = Target::new("t", &url, recording).unwrap();
    let p = plan(
        Model::Closed,
        StepLimit::Duration(Duration::from_millis(300)),
        1,
    );
    let result = scalpel_load::run(&p, vec![target], &mut |_| {}).unwrap();
    let step = only_step(&result);
    assert_eq!(step.sent, 0);
    assert!(
        step.not_sent > 0 && step.not_sent < 1000,
        "{}",
        step.not_sent
    );
}

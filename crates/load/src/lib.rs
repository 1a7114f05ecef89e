//! Load generation for `scalpel load`: closed and open models, ramping to the breaking
//! point, several targets side by side, per-step HdrHistograms and SLO judgement.
//!
//! It must NOT print, write HTML or parse command lines (that is the CLI and
//! `scalpel-report`), nor sample processes itself (a [`ResourceWatch`] is handed in, the CLI
//! adapts `scalpel-procstat`).
//!
//! It must NOT open connections or speak HTTP by itself: that is `scalpel-http`, the
//! toolkit's one connector (TCP or TLS, its HTTP/1.1 codec, HTTP/2), which this crate
//! drives from its worker loop (`conn`).
//!
//! Main types: a [`Plan`] (model, step length, connections, time-outs, [`Slo`], the
//! shard and common clock), a list of [`Target`]s (base URL + [`RequestSource`] + optional
//! [`ResourceWatch`], with the connection settings that travel with it: [`PeerOptions`] for
//! TLS and the HTTP version, HTTP/2 streams, `--no-reuse`), and [`run`], which returns the
//! serialized [`result::RunResult`]. [`Plan::validate`] is the one place the rules of a plan
//! live (rates within [`MAX_RATE`], a replay speed within [`MAX_SPEED`], at most
//! [`MAX_ENDPOINTS`] endpoints, the totals a sharded run splits, a common clock within a day);
//! each refusal is a [`PlanError`] that names its `scalpel load` flag, and [`run`] checks
//! again. A sharded run's identity (run id and settings fingerprint) is [`Plan::identity`].
//!
//! Modules: `plan` (the plan and its validator), `target` and `source` (a target and where
//! its requests come from), `run` (steps × targets × rounds, the probe, the result),
//! `worker` (one segment's threads and the worker loop), `conn` (the connector driven from
//! the loop: a slot's own `H1Conn`, a thread's `SharedH2`, failures counted by
//! `scalpel_http::ErrorKey` and written by their names), `timer` (the open model's timerfd), [`shard`], [`result`], and the SLO, the
//! live percentiles and the common clock.
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use scalpel_load::{FixedRequest, Model, Plan, Slo, StepLimit, Target};
//!
//! let plan = Plan {
//!     model: Model::Ramp { start: 1000.0, step: 1000.0, max: 10_000.0 },
//!     limit: StepLimit::Duration(Duration::from_secs(10)),
//!     connections: 16,
//!     max_in_flight: 1000,
//!     threads: 2,
//!     connect_timeout: Duration::from_secs(2),
//!     timeout: Duration::from_secs(10),
//!     slo: Some(Slo::parse("p99<50ms,errors<1%").unwrap()),
//!     rounds: 1,
//!     request_label: "GET /".into(),
//!     shard: scalpel_load::Shard::WHOLE,
//!     start_at: None,
//! };
//! let target = Target::new("go", "http://127.0.0.1:8080", Arc::new(FixedRequest::new("GET", "/")))
//!     .unwrap();
//! // The plan's rules, before anything is opened (`run` checks them again).
//! plan.validate(std::slice::from_ref(&target)).unwrap();
//! let result = scalpel_load::run(&plan, vec![target], &mut |_progress| {}).unwrap();
//! println!("{:?}", result.targets[0].breaking_point);
//! ```
//!
//! # Design
//!
//! - **A runtime per thread.** `threads` OS threads each run a current-thread tokio runtime
//!   and own their share of the connections; no work stealing, no cross-thread wake-ups, no
//!   locks on the hot path. Each thread records into its own histogram and counters, merged
//!   when a segment ends: no message per request, memory flat however long the run.
//! - **One worker loop** (`worker::slot`): take a ticket, send, read, record. The pacing is a
//!   strategy handed to it: closed (next ticket at once) or open (thread `w` of `T` owns
//!   requests `w, w+T, …` of the schedule, request `i` due at `t0 + i/R`).
//! - **Open model without a hand-off per request.** A slot that finishes a request claims
//!   the thread's next request itself when it is already due — no wake-up, no queue; under
//!   load that is most requests. Otherwise the slot parks, and one timer per thread wakes at
//!   the next intended time, hands every request that fell due to a parked slot or a new
//!   connection, and marks the rest `late`. The timer is a timerfd (`timer`), not tokio's
//!   1 ms wheel: latency runs from the intended time, so a coarse tick would add the
//!   generator's own 0–1 ms wait to every measurement and send requests in bursts.
//! - **No coordinated omission.** In the open model a request's latency runs from its
//!   intended send time. When the in-flight limit is reached the request waits for a free
//!   connection and is counted `late`; requests still waiting when the step ends are
//!   `not_sent`. Nothing is silently dropped.
//! - **Achieved rate.** A time-bound step's rate is the completions inside its scheduled
//!   window divided by the window (as wrk), so waiting for the last in-flight requests does
//!   not dilute it; a count-bound step divides by the time to the last completion.
//! - **The connector's lean HTTP/1.1 path** (`scalpel_http::h1::H1Conn`, driven by
//!   `conn`) rather than hyper's `client::conn::http1`: requests are encoded once when the
//!   template has no placeholders, written with one `write`, the response head parsed by
//!   `httparse` into status and framing only, and the body (Content-Length, chunked or
//!   until close) skipped in a reused buffer: no per-request allocation, body channel,
//!   header map or connection task. hyper hands each request to a connection task and the
//!   response back over channels and builds a `Request` and header map per request; side
//!   by side in the same closed loop (`examples/hyper_vs_lean.rs`) it was the slower one in
//!   every alternating pair (figures: docs/load.md "Benchmarks" and docs/BENCHMARKS.md).
//!   HTTP/2 runs on the `h2` crate: one driver task per connection, a slot per stream,
//!   `connections × streams` slots. The project's rule "hyper for HTTP" holds everywhere
//!   off this hot path.
//! - **Alternation.** Each step of each target is split into `rounds` segments; the order
//!   of targets is reversed every round (A,B, B,A, …), continuing across steps, so that
//!   drift of the machine hits every target alike.

mod conn;
mod live_latency;
mod plan;
mod request;
pub mod result;
mod run;
pub mod shard;
mod slo;
mod source;
mod start;
mod stop;
mod target;
mod timer;
mod worker;

pub use live_latency::LiveLatency;
pub use plan::{
    MAX_ENDPOINTS, MAX_RATE, MAX_SPEED, Model, Plan, PlanError, RunIdentity, StepLimit,
};
pub use request::{Endpoint, MAX_HEAD_BYTES, RequestParts, UrlError};
pub use run::{LoadError, Progress, probe, run, run_until};
pub use scalpel_http::{HttpVersion, PeerOptions, Resolve};
pub use shard::{Shard, ShardError};
pub use slo::{Slo, SloError};
pub use source::{
    FixedRequest, RecordedSchedule, RecordedTimes, Renderer, RequestSource, SourceError,
};
pub use start::{StartAt, StartAtError};
pub use stop::Stop;
pub use target::{ResourceUsage, ResourceWatch, Target};

//! The plan of a run and its one validator: every rule a plan and its targets must keep,
//! checked before anything is opened, each refusal a [`PlanError`] that names the
//! `scalpel load` flag it is about. The CLI maps flags to a [`Plan`] and prints the error;
//! [`crate::run`] checks again, so a library caller gets the same refusals.
//!
//! A sharded run's identity is made here too ([`Plan::identity`]): the run id every shard
//! shares and the fingerprint of the settings that shape its traffic, which `scalpel report
//! merge` checks.

use std::time::Duration;

use scalpel_http::HttpVersion;

use crate::result::{RunResult, ShardInfo};
use crate::shard::{Fingerprint, Shard, run_id};
use crate::slo::Slo;
use crate::start::StartAt;
use crate::target::Target;

/// The highest rate one generator is asked to schedule, per target. A request costs the
/// generator at least ~1 µs of CPU on a thread, so far below this rate it falls behind
/// (counted `late` and `not_sent`); above it, the figure would describe the generator, not
/// the target. Several machines and `scalpel report merge` go further.
pub const MAX_RATE: f64 = 10_000_000.0;

/// The highest replay speed of a recorded schedule: a million times faster sends any real
/// recording at once.
pub const MAX_SPEED: f64 = 1e6;

/// The most endpoints a target's requests may have (a mix): each keeps its own histograms
/// on every load thread.
pub const MAX_ENDPOINTS: usize = 256;

/// How far from now the common clock may start: further is a typo (milliseconds given as
/// seconds, a wrong year).
const START_AT_WITHIN_S: f64 = 86_400.0;

/// The load model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// `connections` sending back to back (wrk).
    Closed,
    /// A fixed rate in requests/s (wrk2, vegeta).
    Open {
        /// Requests per second.
        rate: f64,
    },
    /// Rates `start, start+step, …` up to `max`, one step each, until the SLO breaks.
    Ramp {
        /// First rate.
        start: f64,
        /// Increment per step.
        step: f64,
        /// Highest rate.
        max: f64,
    },
    /// Recorded traffic on its recorded schedule: request `k` is due at its recorded time
    /// (after the first request) divided by `speed`. The source must have a
    /// [`RequestSource::recorded`] schedule; thread `w` of `T` takes requests `w, w+T, …`.
    Recorded {
        /// 1 replays at the recorded pace, 10 ten times faster.
        speed: f64,
    },
}

/// How long each step lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepLimit {
    /// A wall-clock duration.
    Duration(Duration),
    /// A number of requests.
    Requests(u64),
}

/// Everything about a run except the targets.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Closed, open or ramp.
    pub model: Model,
    /// Length of each step (the only step in closed and open).
    pub limit: StepLimit,
    /// Closed: connections. Open/ramp: connections opened before the clock starts.
    pub connections: u32,
    /// Open/ramp: most requests in flight (and connections) per target.
    pub max_in_flight: u32,
    /// OS threads, each with its own single-threaded runtime.
    pub threads: u32,
    /// Time-out for establishing a connection.
    pub connect_timeout: Duration,
    /// Time-out for a whole request (connect, send, receive).
    pub timeout: Duration,
    /// The SLO each step is judged by.
    pub slo: Option<Slo>,
    /// Segments per step and target, run in alternating target order (A,B then B,A).
    pub rounds: u32,
    /// A description of the request for the result file, e.g. `GET /v1/users/{id}`.
    pub request_label: String,
    /// This process's part of a run spread over several (`--shard`); rates, `connections`,
    /// `max_in_flight` and request counts above are the whole run's, and this process takes
    /// its share of each (see [`crate::shard`]). [`Shard::WHOLE`] for a run in one process.
    pub shard: Shard,
    /// The common clock (`--start-at`): the first step starts at this wall-clock time, and
    /// time-bound step `k` (segment `k` of the alternation) `k` step-lengths later, so the
    /// steps of every shard line up. `None`: start as soon as the connections are open.
    pub start_at: Option<StartAt>,
}

/// A plan that cannot run, found before anything is opened. The message names the
/// `scalpel load` flag (the [`Plan`] field in brackets where the name differs); one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// No target.
    #[error("no target: give a URL, or --target NAME=BASE_URL")]
    NoTarget,
    /// Two targets of one name.
    #[error("--target: the name `{0}` is given twice")]
    DuplicateTarget(String),
    /// `connections` is 0.
    #[error("-c/--connections must be at least 1")]
    NoConnections,
    /// An open model's rate that is not a positive number.
    #[error("--rate must be a positive number of requests per second, got {0}")]
    Rate(f64),
    /// A ramp that never rises or starts at nothing.
    #[error(
        "--ramp takes START,STEP,MAX with START > 0, STEP > 0 and MAX >= START, got {start},{step},{max}"
    )]
    Ramp {
        /// First rate.
        start: f64,
        /// Increment.
        step: f64,
        /// Highest rate.
        max: f64,
    },
    /// A rate above [`MAX_RATE`].
    #[error(
        "{flag}: {rate} requests/s is more than one load generator can schedule (at most \
         10,000,000/s per target); run it from several machines and merge their results with \
         `scalpel report merge`"
    )]
    AboveMaxRate {
        /// `--rate` or `--ramp`.
        flag: &'static str,
        /// The rate asked for.
        rate: f64,
    },
    /// A replay speed outside `(0, MAX_SPEED]`.
    #[error("--speed must be above 0 and at most {MAX_SPEED}, got {0}")]
    Speed(f64),
    /// A recorded schedule over a target whose requests have no recorded times.
    #[error("target `{0}`: a recorded schedule needs recorded traffic (--from) as its source")]
    NotRecorded(String),
    /// A recorded schedule split into rounds.
    #[error(
        "a recorded schedule is replayed whole to each target in turn: --rounds must be 1 \
         (or use the records as a pool with --rate, --ramp or -c)"
    )]
    RecordedRounds,
    /// More endpoints than [`MAX_ENDPOINTS`].
    #[error(
        "--mix: target `{target}` has {count} endpoints, more than the {MAX_ENDPOINTS} a run keeps figures for"
    )]
    TooManyEndpoints {
        /// The target.
        target: String,
        /// Its endpoints.
        count: usize,
    },
    /// `max_in_flight` is 0.
    #[error("--max-in-flight must be at least 1")]
    NoInFlight,
    /// `threads` is 0.
    #[error("--threads must be at least 1")]
    NoThreads,
    /// `rounds` is 0.
    #[error("--rounds must be at least 1")]
    NoRounds,
    /// A zero time-out (`--connect-timeout` or `--timeout`).
    #[error("{0} must be longer than 0")]
    ZeroTimeout(&'static str),
    /// A zero step length (`-d/--duration`, or `--step-duration` for a ramp).
    #[error("{0} must be longer than 0")]
    ZeroDuration(&'static str),
    /// A step of no requests.
    #[error("-n/--requests must be at least 1")]
    NoRequests,
    /// HTTP/2 streams set to 0.
    #[error("--streams must be at least 1")]
    NoStreams,
    /// A new connection per request asked over HTTP/2.
    #[error(
        "--no-reuse opens a connection per request over HTTP/1.1; with --http2, use -c and \
         --streams (a connection per request would measure HTTP/2 setup, not requests)"
    )]
    NoReuseOverH2,
    /// Fewer connections than shards.
    #[error(
        "-c {connections} is the whole run's connections: {shards} shards need at least {shards}"
    )]
    ShardConnections {
        /// The whole run's connections.
        connections: u32,
        /// Shards.
        shards: u32,
    },
    /// An in-flight limit below the number of shards (open models).
    #[error("--max-in-flight {limit} is the whole run's: {shards} shards need at least {shards}")]
    ShardInFlight {
        /// The whole run's limit.
        limit: u32,
        /// Shards.
        shards: u32,
    },
    /// A request count below rounds × shards: some segment of some shard would get none.
    #[error("-n {count} is the whole run's count per step: {shards} shards need at least {need}")]
    ShardRequests {
        /// The whole run's count per step.
        count: u64,
        /// Shards.
        shards: u32,
        /// Rounds × shards.
        need: u64,
    },
    /// A common clock more than a day away.
    #[error("--start-at {at} is {hours} hours {direction}: give a time within a day of now")]
    StartAtFar {
        /// The time given.
        at: StartAt,
        /// Hours from now, rounded.
        hours: f64,
        /// `ahead` or `ago`.
        direction: &'static str,
    },
}

impl Model {
    /// `closed`, `open`, `ramp` or `recorded`, as the result file and the live page say it.
    pub fn name(&self) -> &'static str {
        match self {
            Model::Closed => "closed",
            Model::Open { .. } => "open",
            Model::Ramp { .. } => "ramp",
            Model::Recorded { .. } => "recorded",
        }
    }
}

impl Plan {
    pub(crate) fn rates(&self) -> Vec<Option<f64>> {
        match self.model {
            Model::Closed | Model::Recorded { .. } => vec![None],
            Model::Open { rate } => vec![Some(rate)],
            Model::Ramp { start, step, max } => {
                let mut out = Vec::new();
                let mut k = 0.0;
                loop {
                    let rate = start + k * step;
                    if rate > max * (1.0 + 1e-9) || out.len() >= 10_000 {
                        break;
                    }
                    out.push(Some(rate));
                    k += 1.0;
                }
                out
            }
        }
    }

    /// Checks the plan and its targets; the first rule broken, naming its flag. Nothing
    /// is opened or read: the same plan gives the same answer (but for `start_at`, which is
    /// checked against the clock).
    pub fn validate(&self, targets: &[Target]) -> Result<(), PlanError> {
        check_targets(self, targets)?;
        self.check_model()?;
        self.check_counts()?;
        self.check_shards()?;
        self.check_start()
    }

    /// The model's own numbers: positive rates within one generator's reach, a sane speed.
    fn check_model(&self) -> Result<(), PlanError> {
        match self.model {
            Model::Closed => Ok(()),
            Model::Open { rate } if !(rate > 0.0 && rate.is_finite()) => Err(PlanError::Rate(rate)),
            Model::Open { rate } => check_rate("--rate", rate),
            Model::Ramp { start, step, max }
                if !(start > 0.0 && step > 0.0 && max >= start && max.is_finite()) =>
            {
                Err(PlanError::Ramp { start, step, max })
            }
            Model::Ramp { max, .. } => check_rate("--ramp", max),
            Model::Recorded { speed } if !(speed > 0.0 && speed <= MAX_SPEED) => {
                Err(PlanError::Speed(speed))
            }
            Model::Recorded { .. } if self.rounds > 1 => Err(PlanError::RecordedRounds),
            Model::Recorded { .. } => Ok(()),
        }
    }

    /// Connections, limits, threads, rounds, time-outs and the step's length: each at least 1
    /// (or longer than 0).
    fn check_counts(&self) -> Result<(), PlanError> {
        if self.connections == 0 {
            return Err(PlanError::NoConnections);
        }
        if self.max_in_flight == 0 {
            return Err(PlanError::NoInFlight);
        }
        if self.threads == 0 {
            return Err(PlanError::NoThreads);
        }
        if self.rounds == 0 {
            return Err(PlanError::NoRounds);
        }
        if self.connect_timeout.is_zero() {
            return Err(PlanError::ZeroTimeout("--connect-timeout"));
        }
        if self.timeout.is_zero() {
            return Err(PlanError::ZeroTimeout("--timeout"));
        }
        match self.limit {
            StepLimit::Duration(d) if d.is_zero() => Err(PlanError::ZeroDuration(
                if matches!(self.model, Model::Ramp { .. }) {
                    "--step-duration"
                } else {
                    "-d/--duration"
                },
            )),
            StepLimit::Requests(0) => Err(PlanError::NoRequests),
            _ => Ok(()),
        }
    }

    /// Every shard refuses alike: one that got nothing would make the set incomplete.
    fn check_shards(&self) -> Result<(), PlanError> {
        let shards = self.shard.count();
        if self.connections < shards {
            return Err(PlanError::ShardConnections {
                connections: self.connections,
                shards,
            });
        }
        if !matches!(self.model, Model::Closed) && self.max_in_flight < shards {
            return Err(PlanError::ShardInFlight {
                limit: self.max_in_flight,
                shards,
            });
        }
        let need = u64::from(self.rounds) * u64::from(shards);
        match self.limit {
            StepLimit::Requests(count) if count < need => Err(PlanError::ShardRequests {
                count,
                shards,
                need,
            }),
            _ => Ok(()),
        }
    }

    /// The common clock within a day of now.
    fn check_start(&self) -> Result<(), PlanError> {
        let Some(at) = self.start_at else {
            return Ok(());
        };
        let ahead = StartAt::now().seconds_until(at);
        if ahead.abs() <= START_AT_WITHIN_S {
            return Ok(());
        }
        Err(PlanError::StartAtFar {
            at,
            hours: (ahead.abs() / 3600.0).round(),
            direction: if ahead > 0.0 { "ahead" } else { "ago" },
        })
    }

    /// The identity of a sharded run: the run id (`run_id` as given, else derived from the
    /// settings and `start_at`, so every shard derives the same) and the settings
    /// fingerprint. `traffic` is the caller's fingerprint of what the requests are made of
    /// (URL, templates, data and mix files, a recording: what this crate does not see); the
    /// plan adds everything else that shapes the traffic. Machine-local settings (threads,
    /// watched processes, output files) are left out, so shards on different machines
    /// agree.
    pub fn identity(&self, mut traffic: Fingerprint, run_id_given: Option<&str>) -> RunIdentity {
        traffic
            .field("model", &format!("{:?}", self.model))
            .field("limit", &format!("{:?}", self.limit))
            .field("connections", &self.connections.to_string())
            .field("max-in-flight", &self.max_in_flight.to_string())
            .field("connect-timeout", &format!("{:?}", self.connect_timeout))
            .field("timeout", &format!("{:?}", self.timeout))
            .field("slo", self.slo.as_ref().map_or("", |s| s.as_str()))
            .field("rounds", &self.rounds.to_string())
            .field("shards", &self.shard.count().to_string());
        let settings = traffic.hex();
        let run_id = match run_id_given {
            Some(id) => id.to_owned(),
            None => run_id(
                &settings,
                &self.start_at.map(|t| t.to_string()).unwrap_or_default(),
            ),
        };
        RunIdentity { run_id, settings }
    }
}

/// Targets: at least one, names unique, requests that fit the model, connection settings
/// that agree with each other.
fn check_targets(plan: &Plan, targets: &[Target]) -> Result<(), PlanError> {
    if targets.is_empty() {
        return Err(PlanError::NoTarget);
    }
    for (i, t) in targets.iter().enumerate() {
        if targets[..i].iter().any(|o| o.name == t.name) {
            return Err(PlanError::DuplicateTarget(t.name.clone()));
        }
        if matches!(plan.model, Model::Recorded { .. }) && t.source.recorded().is_none() {
            return Err(PlanError::NotRecorded(t.name.clone()));
        }
        let count = t.source.endpoints().len();
        if count > MAX_ENDPOINTS {
            return Err(PlanError::TooManyEndpoints {
                target: t.name.clone(),
                count,
            });
        }
        if t.streams == 0 {
            return Err(PlanError::NoStreams);
        }
        if t.no_reuse && t.endpoint.peer().options().version == HttpVersion::Http2 {
            return Err(PlanError::NoReuseOverH2);
        }
    }
    Ok(())
}

/// Refuses a rate one generator cannot schedule (see [`MAX_RATE`]).
fn check_rate(flag: &'static str, rate: f64) -> Result<(), PlanError> {
    if rate > MAX_RATE {
        return Err(PlanError::AboveMaxRate { flag, rate });
    }
    Ok(())
}

/// Which run a shard's result belongs to, checked by `scalpel report merge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunIdentity {
    /// The id every shard of the run shares.
    pub run_id: String,
    /// The fingerprint of the settings that shape the traffic (16 hex digits).
    pub settings: String,
}

impl RunIdentity {
    /// Says in `result` which part of which run it is. Returns how many of its steps
    /// started more than a tenth of a step after the common clock (time-bound steps only),
    /// for the caller to warn about: `scalpel report merge` flags them too.
    pub fn stamp(self, result: &mut RunResult, plan: &Plan) -> usize {
        let first = result
            .targets
            .iter()
            .filter_map(|t| t.steps.first())
            .filter_map(|s| s.start_late_s)
            .reduce(f64::min);
        let step_s = match plan.limit {
            StepLimit::Duration(d) => Some(d.as_secs_f64()),
            StepLimit::Requests(_) => None,
        };
        let late_steps = result
            .targets
            .iter()
            .flat_map(|t| &t.steps)
            .filter(|s| {
                s.start_late_s
                    .zip(step_s)
                    .is_some_and(|(late, step)| late > step / 10.0)
            })
            .count();
        result.shard = Some(ShardInfo {
            run_id: self.run_id,
            index: plan.shard.index(),
            count: plan.shard.count(),
            start_at: plan.start_at.map(|t| t.to_string()),
            start_late_s: first,
            settings: self.settings,
        });
        late_steps
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::source::FixedRequest;

    fn plan(model: Model) -> Plan {
        Plan {
            model,
            limit: StepLimit::Duration(Duration::from_secs(1)),
            connections: 4,
            max_in_flight: 4,
            threads: 1,
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            slo: None,
            rounds: 1,
            request_label: String::new(),
            shard: Shard::WHOLE,
            start_at: None,
        }
    }

    fn target(name: &str) -> Target {
        Target::new(
            name,
            "http://127.0.0.1:1",
            Arc::new(FixedRequest::new("GET", "/")),
        )
        .unwrap()
    }

    #[test]
    fn ramp_rates_include_max() {
        let plan = plan(Model::Ramp {
            start: 100.0,
            step: 100.0,
            max: 500.0,
        });
        let r: Vec<f64> = plan.rates().into_iter().flatten().collect();
        assert_eq!(r, vec![100.0, 200.0, 300.0, 400.0, 500.0]);
    }

    #[test]
    fn each_refusal_names_its_flag() {
        let one = [target("a")];
        let refused = |p: Plan| p.validate(&one).unwrap_err().to_string();
        assert!(refused(plan(Model::Open { rate: 0.0 })).starts_with("--rate"));
        assert!(refused(plan(Model::Open { rate: 2e7 })).starts_with("--rate: "));
        let ramp = Model::Ramp {
            start: 10.0,
            step: 0.0,
            max: 5.0,
        };
        assert!(refused(plan(ramp)).starts_with("--ramp"));
        let fast = plan(Model::Recorded { speed: 2e6 })
            .check_model()
            .unwrap_err();
        assert!(fast.to_string().starts_with("--speed"), "{fast}");
        let mut p = plan(Model::Ramp {
            start: 1.0,
            step: 1.0,
            max: 2.0,
        });
        p.limit = StepLimit::Duration(Duration::ZERO);
        assert_eq!(refused(p), "--step-duration must be longer than 0");
        let mut p = plan(Model::Closed);
        p.timeout = Duration::ZERO;
        assert_eq!(refused(p), "--timeout must be longer than 0");
        let mut p = plan(Model::Closed);
        p.shard = Shard::new(0, 8).unwrap();
        assert!(refused(p).starts_with("-c 4 is the whole run's"));
        let mut p = plan(Model::Open { rate: 10.0 });
        p.shard = Shard::new(0, 2).unwrap();
        p.limit = StepLimit::Requests(3);
        p.rounds = 2;
        assert_eq!(
            p.validate(&one),
            Err(PlanError::ShardRequests {
                count: 3,
                shards: 2,
                need: 4
            })
        );
        let mut p = plan(Model::Closed);
        p.start_at = Some(StartAt::now().plus(Duration::from_secs(3 * 86_400)));
        assert!(refused(p).starts_with("--start-at"));
    }

    #[test]
    fn targets_are_named_once_and_a_recorded_schedule_needs_a_recording() {
        let two = [target("a"), target("a")];
        assert_eq!(
            plan(Model::Closed).validate(&two),
            Err(PlanError::DuplicateTarget("a".into()))
        );
        assert_eq!(
            plan(Model::Recorded { speed: 1.0 }).validate(&[target("b")]),
            Err(PlanError::NotRecorded("b".into()))
        );
        assert_eq!(plan(Model::Closed).validate(&[]), Err(PlanError::NoTarget));
        let mut h2 = scalpel_http::PeerOptions::default();
        h2.version = HttpVersion::Http2;
        let h2 = target("c").with_options(h2).with_no_reuse(true);
        assert_eq!(
            plan(Model::Closed).validate(&[h2]),
            Err(PlanError::NoReuseOverH2)
        );
    }

    #[test]
    fn the_identity_is_the_same_for_the_same_settings_and_differs_by_any() {
        let mut p = plan(Model::Open { rate: 100.0 });
        p.shard = Shard::new(1, 2).unwrap();
        p.start_at = Some(StartAt::from_unix(Duration::from_secs(1_893_499_200)));
        let traffic = || {
            let mut f = Fingerprint::new();
            f.field("url", "http://a/");
            f
        };
        let a = p.identity(traffic(), None);
        assert_eq!(a, p.identity(traffic(), None));
        assert!(a.run_id.starts_with("run-"), "{a:?}");
        let mut q = p.clone();
        q.timeout = Duration::from_secs(2);
        assert_ne!(q.identity(traffic(), None).settings, a.settings);
        assert_eq!(p.identity(traffic(), Some("mine")).run_id, "mine");
    }
}

//! `scalpel load`: flags → a [`scalpel_load::Plan`] and [`scalpel_load::Target`]s, run,
//! print the summary table (on stderr when `--json -` takes stdout), write `--json`/`--html`
//! (with `--shard`, the JSON says which part of which run it is), exit 0 (SLO held or none), 1 (broken),
//! 2 (bad usage, or a result that could not be written), 128 + the signal (130 for
//! Ctrl-C) when interrupted — after printing and writing what was measured.
//!
//! Templates come from `scalpel-requests`, process sampling from `scalpel-procstat`, output
//! from `scalpel-report`; this module only adapts them to the load crate's two seams
//! ([`RequestSource`], [`ResourceWatch`]).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use scalpel_load::result::{MalformedRecord, RecordedInfo, RunResult, ShardInfo};
use scalpel_load::shard::{Fingerprint, JOB_INDEX_VAR, check_run_id, run_id};
use scalpel_load::{
    HttpVersion, Model, PeerOptions, Plan, Progress, RequestSource, Resolve, ResourceUsage,
    ResourceWatch, Shard, Slo, StartAt, StepLimit, Stop, Target,
};
use scalpel_procstat::{SampleMark, TreeSampler};
use scalpel_requests::{DataSet, Mix, Order, RecordedSource, RequestSet, RequestTemplate};

use crate::recorded::RecordedFlags;
use crate::sources::{MixSource, RecordedRequests, TemplateSource};

use crate::dashboard::{DashTarget, Dashboard};

/// Arguments of `scalpel load`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  scalpel load -c 50 -d 30s http://127.0.0.1:8080/\n  scalpel load --shard auto/10 --start-at 2030-01-01T12:00:00Z --rate 500000 -d 60s \\\n      --json - http://payments.default.svc:8080/   (on each of 10 Indexed Job pods)\n  scalpel load --rate 2000 -d 30s http://127.0.0.1:8080/v1/users/{id}/stats --data ids.txt\n  scalpel load --ramp 1000,1000,20000 --step-duration 10s --slo 'p99<50ms,errors<1%' \\\n      --target go=http://127.0.0.1:8080 --target rust=http://127.0.0.1:8081 \\\n      --watch-port go=8080 --watch-port rust=8081 /v1/users/{id}/stats --data ids.txt\n  scalpel load --http2 -c 4 --streams 16 --cacert ca.pem https://api.test:8443/ \\\n      --resolve api.test:8443:127.0.0.1"
)]
pub(crate) struct LoadArgs {
    /// The target URL with the request's path template (`http[s]://HOST:PORT/PATH?QUERY`), or,
    /// with --target, only the path template (default `/`).
    #[arg(value_name = "URL")]
    url: Option<String>,

    /// A named target `NAME=BASE_URL` (repeatable); targets are measured in alternation.
    #[arg(long = "target", value_name = "NAME=BASE_URL")]
    targets: Vec<String>,

    /// Closed model: connections sending back to back (default 50). Open models and a
    /// recorded schedule: connections opened before the clock starts. With --from, giving
    /// -c means a closed loop over the records as a pool.
    #[arg(short = 'c', long, value_name = "N")]
    connections: Option<u32>,

    /// Open model: requests per second on a fixed schedule (at most 10,000,000: above that
    /// one generator cannot even schedule the requests; run several and merge).
    #[arg(long, value_name = "R", conflicts_with = "ramp")]
    rate: Option<f64>,

    /// Ramp: rates START, START+STEP, … up to MAX, one step each, until the SLO breaks.
    #[arg(long, value_name = "START,STEP,MAX")]
    ramp: Option<String>,

    /// How long to run (closed and open models), e.g. 30s. Default 10s.
    #[arg(
        short = 'd',
        long,
        value_name = "DURATION",
        conflicts_with = "requests"
    )]
    duration: Option<String>,

    /// Run this many requests (per step with --ramp) instead of a duration.
    #[arg(short = 'n', long, value_name = "COUNT")]
    requests: Option<u64>,

    /// Length of each ramp step. Default 10s.
    #[arg(long, value_name = "DURATION")]
    step_duration: Option<String>,

    /// Open models: most requests in flight per target (and connections). Default 1000,
    /// lowered to fit the open-file limit.
    #[arg(long, value_name = "N")]
    max_in_flight: Option<u32>,

    /// OS threads generating load, each with its own runtime. Default: the number of CPUs.
    #[arg(long, value_name = "N")]
    threads: Option<u32>,

    /// Time-out for establishing a connection (TCP, and again the TLS handshake).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    connect_timeout: String,

    /// HTTP/2: negotiated by ALPN over https://, with prior knowledge (h2c) over http://.
    #[arg(long)]
    http2: bool,

    /// HTTP/2: concurrent streams on each of the -c connections (as h2load's -m). The
    /// closed model keeps connections × streams requests in flight. Default 1.
    #[arg(long, value_name = "M")]
    streams: Option<u32>,

    /// Open a new connection for every request (HTTP/1.1, `Connection: close`), to
    /// measure connecting and the TLS handshake (as oha's --disable-keepalive).
    #[arg(long)]
    no_reuse: bool,

    /// https: trust the CA certificates in this PEM file (one or several) instead of the
    /// system's trust store.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,

    /// https: do not verify the server's certificate (encrypted, but to whoever answers);
    /// said in the results.
    #[arg(long)]
    insecure: bool,

    /// Connect to ADDR when a target is HOST:PORT, as curl's --resolve; SNI, the
    /// certificate's name and Host stay HOST (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    resolve: Vec<String>,

    /// Time-out for a whole request.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    timeout: String,

    /// The objective each step must hold, e.g. `p99<50ms,errors<1%` (p50 p90 p99 p999 max
    /// mean with us/ms/s; errors<N%; rps>N).
    #[arg(long, value_name = "SLO")]
    slo: Option<String>,

    /// HTTP method of the request (default GET). With --from: keep only recorded requests
    /// with this method (repeatable, upper case).
    #[arg(short = 'm', long = "method", value_name = "METHOD")]
    methods: Vec<String>,

    /// A request header `Name: value` (repeatable; values may hold placeholders).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,

    /// A mix of endpoints: a TOML file of [[request]] tables (name, method, path, headers,
    /// body or body_file, weight); every figure is kept per endpoint too. Placeholders draw
    /// from --data.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "body", "body_file", "headers"])]
    mix: Option<PathBuf>,

    /// Seed of a mix's picks: the same seed sends every target the same sequence.
    #[arg(long, value_name = "SEED", default_value_t = 1, requires = "mix")]
    mix_seed: u64,

    /// Recorded traffic as the requests: an nginx/Apache access log, a HAR file or a
    /// capture. Replayed on its recorded schedule (see --speed), or, with --rate, --ramp
    /// or -c, used in file order as a pool (looped when the run outlasts it).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["data", "shuffle", "body", "body_file", "headers"])]
    from: Option<PathBuf>,

    /// Read --from as this format instead of telling it from the content: access-log, har
    /// or capture.
    #[arg(long, value_name = "FORMAT", requires = "from")]
    from_format: Option<String>,

    /// With --from: keep only requests whose path and query match this regular expression
    /// (repeatable: any of them).
    #[arg(long, value_name = "REGEX", requires = "from")]
    include_path: Vec<String>,

    /// With --from: skip requests whose path and query match this regular expression
    /// (repeatable).
    #[arg(long, value_name = "REGEX", requires = "from")]
    exclude_path: Vec<String>,

    /// With --from: set this header `Name: value` on every request, replacing recorded
    /// ones of that name (repeatable).
    #[arg(long, value_name = "HEADER", requires = "from")]
    set_header: Vec<String>,

    /// With --from: remove every recorded header of this name (repeatable).
    #[arg(long, value_name = "NAME", requires = "from")]
    drop_header: Vec<String>,

    /// With --from: also replay unsafe methods (anything but GET, HEAD, OPTIONS, TRACE),
    /// which are skipped by default — replaying a POST can move money twice.
    #[arg(long, requires = "from")]
    allow_unsafe: bool,

    /// With --from on its recorded schedule: replay this many times faster (0.5 = half
    /// speed). Default 1.
    #[arg(long, value_name = "X", requires = "from")]
    speed: Option<f64>,

    /// Request body (may hold placeholders).
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,

    /// Request body read from a file (may hold placeholders).
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,

    /// Values for the `{name}` placeholders: one value per line, or CSV with a header.
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,

    /// Walk the data in a shuffled order fixed by this seed (default: file order).
    #[arg(long, value_name = "SEED")]
    shuffle: Option<u64>,

    /// Sample CPU and memory of this process and its descendants (`PID`, or `NAME=PID`).
    #[arg(long, value_name = "[NAME=]PID")]
    watch_pid: Vec<String>,

    /// Like --watch-pid, for the process listening on this TCP port (`PORT` or `NAME=PORT`).
    #[arg(long, value_name = "[NAME=]PORT")]
    watch_port: Vec<String>,

    /// Segments per step and target, in alternating target order (A,B then B,A). Default 2
    /// with several targets, else 1.
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,

    /// Write all results, histograms included, to this JSON file; `-` writes them to stdout
    /// on one line (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// This process's part of a run spread over several machines: `I/N` (from 1) or
    /// `auto/N` (the index, from 0, from JOB_COMPLETION_INDEX, as Kubernetes sets it on
    /// Indexed Job pods). --rate, --ramp, -n, -c and --max-in-flight stay the whole run's;
    /// each shard takes its part and a disjoint part of --data. Needs --start-at or --run-id.
    #[arg(long, value_name = "I/N|auto/N")]
    shard: Option<String>,

    /// Start the clock at this time, RFC 3339 (2030-01-01T12:00:00Z) or Unix seconds: every
    /// shard starts then and time-bound steps line up across machines.
    #[arg(long, value_name = "TIME")]
    start_at: Option<String>,

    /// The run's id, the same on every shard, checked by `scalpel report merge` (default:
    /// derived from the settings and --start-at).
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,

    /// Write a self-contained HTML page with plots to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,

    /// Serve a live page of the run at this address (e.g. 127.0.0.1:9300): rates,
    /// latency over time with the SLO line, CPU and memory, the ramp's step; at the end,
    /// the same report as --html.
    #[arg(long, value_name = "ADDR")]
    dashboard: Option<std::net::SocketAddr>,

    /// How long the dashboard keeps serving the final report after the run.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        requires = "dashboard"
    )]
    dashboard_linger: String,

    /// Show the live progress line even when stderr is not a terminal.
    #[arg(long, conflicts_with = "no_progress")]
    progress: bool,

    /// Never show the live progress line.
    #[arg(long)]
    no_progress: bool,
}

/// The highest rate one generator is asked to schedule, per target. A request costs the
/// generator at least ~1 µs of CPU on a thread, so far below this rate it falls behind
/// (counted `late` and `not_sent`); above it, the figure would describe the generator, not
/// the target. Several machines and `scalpel report merge` go further.
const MAX_RATE: f64 = 10_000_000.0;

/// Descriptors a run needs beside its connections: stdio, each thread's epoll, eventfd and
/// timerfd, /proc files of the samplers, the result files.
const SPARE_FDS: u64 = 64;

/// `--max-in-flight` when not given.
const DEFAULT_MAX_IN_FLIGHT: u32 = 1000;

/// `-c` when not given.
const DEFAULT_CONNECTIONS: u32 = 50;

impl LoadArgs {
    /// `-c`, or its default.
    fn connections(&self) -> u32 {
        self.connections.unwrap_or(DEFAULT_CONNECTIONS)
    }
}

/// Runs `scalpel load`.
pub(crate) fn run(mut args: LoadArgs) -> anyhow::Result<ExitCode> {
    // Before any thread exists, so every thread inherits the mask and only the watcher
    // below receives SIGINT and SIGTERM.
    let stop = Stop::new();
    let signal = watch_signals(stop.clone())?;
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    for path in [&args.json, &args.html].into_iter().flatten() {
        if json_to_stdout && Some(path) == args.json.as_ref() {
            continue;
        }
        scalpel_report::check_writable(path)?;
    }
    fit_descriptors(&mut args)?;
    let Built {
        plan,
        targets,
        watched,
        recorded,
    } = build(&args)?;
    if let Some(r) = &recorded {
        // Before a replay that may be long: what the file holds and what is skipped.
        let summary = r.source().summary();
        eprintln!(
            "scalpel: {} ({}): {}",
            r.source().path().display(),
            summary.format,
            summary.describe()
        );
    }
    // Before any load: the data file is read for the fingerprint only when sharded.
    let shard_id = match args.shard {
        Some(_) => Some(shard_identity(
            &args,
            &plan,
            recorded.as_deref().map(RecordedRequests::source),
        )?),
        None => None,
    };
    let linger = duration_arg("--dashboard-linger", &args.dashboard_linger)?;
    let dashboard = match args.dashboard {
        Some(addr) => {
            let model = match plan.model {
                Model::Closed => "closed",
                Model::Open { .. } => "open",
                Model::Ramp { .. } => "ramp",
                Model::Recorded { .. } => "recorded",
            };
            let d = Dashboard::start(addr, model, plan.slo.clone(), watched)?;
            tracing::info!("dashboard: http://{}/", d.addr());
            Some(d)
        }
        None => None,
    };
    let show_progress = !args.no_progress && (args.progress || std::io::stderr().is_terminal());
    let tty = std::io::stderr().is_terminal();
    let mut line = ProgressLine {
        enabled: show_progress,
        tty,
        last_print: None,
        printed: false,
    };
    if let Some(at) = plan.start_at {
        let wait = StartAt::now().seconds_until(at);
        if wait > 1.0 {
            // In a pod's log: why nothing happens yet.
            eprintln!("scalpel: the clock starts at {at} (in {wait:.0} s)");
        }
    }
    let mut result = scalpel_load::run_until(
        &plan,
        targets,
        &mut |p| {
            line.show(p);
            if let Some(d) = &dashboard {
                d.progress(p);
            }
        },
        &stop,
    )?;
    line.finish();
    if let Some(r) = &recorded {
        result.config.recorded = Some(recorded_info(r, &plan));
    }
    if let Some((run_id, settings)) = shard_id {
        describe_shard(&mut result, &plan, run_id, settings);
    }
    if let Some(d) = &dashboard {
        d.finish(scalpel_report::html(&result));
    }
    // The table first: whatever happens to the files, what was measured is on screen (on
    // stderr when the JSON takes stdout).
    let table = scalpel_report::summary_table(&result);
    let shown = if json_to_stdout {
        let mut err = std::io::stderr().lock();
        err.write_all(table.as_bytes()).and_then(|()| err.flush())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(table.as_bytes()).and_then(|()| out.flush())
    };
    if let Err(e) = shown
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    let mut write_failed = false;
    let mut report = |written: Result<(), scalpel_report::ReportError>| {
        if let Err(e) = written {
            eprintln!("scalpel: {e}");
            write_failed = true;
        }
    };
    if json_to_stdout {
        // One line, so it can be picked out of a log that holds stderr too (kubectl logs).
        let mut out = std::io::stdout().lock();
        if let Err(e) = out
            .write_all(scalpel_report::to_json_line(&result).as_bytes())
            .and_then(|()| out.flush())
        {
            report(Err(scalpel_report::ReportError::Write {
                path: "stdout".into(),
                error: e,
            }));
        }
    } else if let Some(path) = &args.json {
        report(scalpel_report::write_json(&result, path));
    }
    if let Some(path) = &args.html {
        report(scalpel_report::write_html(&result, path));
    }
    if let Some(d) = dashboard {
        // An open page fetches the report meanwhile; SIGINT or SIGTERM cut it short.
        d.close(linger, &stop);
    }
    let signal = signal.load(Ordering::Acquire);
    let broke = result.targets.iter().any(|t| t.breaking_point.is_some());
    Ok(if signal > 0 {
        ExitCode::from(128 + signal as u8)
    } else if write_failed {
        ExitCode::from(2)
    } else if broke {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// What a recording held and how the run used it, for the report.
fn recorded_info(r: &RecordedRequests, plan: &Plan) -> RecordedInfo {
    let summary = r.source().summary();
    let speed = match plan.model {
        Model::Recorded { speed } => Some(speed),
        _ => None,
    };
    RecordedInfo {
        file: r.source().path().display().to_string(),
        format: summary.format.to_string(),
        schedule: if speed.is_some() { "recorded" } else { "pool" }.to_owned(),
        speed,
        records: summary.read,
        usable: summary.usable,
        skipped: summary
            .skipped
            .iter()
            .map(|(reason, n)| (reason.name().to_owned(), n))
            .collect(),
        first_malformed: summary
            .first_malformed
            .iter()
            .map(|b| MalformedRecord {
                line: b.line,
                message: b.message.clone(),
            })
            .collect(),
        span_s: summary.span.as_secs_f64(),
        looped: r.looped(),
    }
}

/// Blocks SIGINT and SIGTERM in this (still the only) thread and starts one thread that
/// waits for them: the first raises `stop` (the run ends its step early and reports), the
/// second exits at once. Returns the number of the first signal, 0 until there is one.
fn watch_signals(stop: Stop) -> anyhow::Result<Arc<AtomicI32>> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()
        .context("cannot block SIGINT and SIGTERM")?;
    let first = Arc::new(AtomicI32::new(0));
    let seen = first.clone();
    std::thread::Builder::new()
        .name("scalpel-signals".into())
        .spawn(move || {
            while let Ok(signal) = set.wait() {
                if seen.load(Ordering::Acquire) != 0 {
                    eprintln!("scalpel: {signal} again: quitting without a report");
                    std::process::exit(128 + signal as i32);
                }
                seen.store(signal as i32, Ordering::Release);
                eprintln!(
                    "scalpel: {signal}: stopping; the steps so far are reported \
                     (send it again to quit at once)"
                );
                stop.stop();
            }
        })
        .context("cannot start the signal thread")?;
    Ok(first)
}

/// Raises the soft limit on open files up to the hard one, so the connections asked for
/// fit; refuses `-c` that still does not (the generator's own `EMFILE` would otherwise
/// show as the target's connect errors), and lowers a default `--max-in-flight` to fit.
fn fit_descriptors(args: &mut LoadArgs) -> anyhow::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    let Some(available) = limit.current else {
        return Ok(()); // unlimited
    };
    let room = available.saturating_sub(SPARE_FDS);
    let open_model = args.rate.is_some() || args.ramp.is_some();
    let hard = limit
        .maximum
        .map_or_else(|| "unlimited".to_owned(), |m| m.to_string());
    let in_flight = args.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    // HTTP/2 carries the requests in flight on the -c connections: no more are opened.
    let open_model = open_model && !args.http2;
    let needed = u64::from(if open_model {
        args.connections().min(in_flight)
    } else {
        args.connections()
    });
    if needed > room {
        bail!(
            "-c {} needs about {} open files, but this process may open {available} (ulimit -n; \
             hard limit {hard}): lower -c or raise the limit",
            args.connections(),
            needed + SPARE_FDS
        );
    }
    if open_model && u64::from(in_flight) > room {
        if args.max_in_flight.is_some() {
            bail!(
                "--max-in-flight {in_flight} needs about {} open files, but this process may \
                 open {available} (ulimit -n; hard limit {hard}): lower it or raise the limit",
                u64::from(in_flight) + SPARE_FDS
            );
        }
        let fits = u32::try_from(room).unwrap_or(u32::MAX).max(1);
        eprintln!(
            "scalpel: --max-in-flight lowered from {in_flight} to {fits} to fit the open-file \
             limit ({available}, ulimit -n)"
        );
        args.max_in_flight = Some(fits);
    }
    Ok(())
}

/// The error's own message only: `scalpel-requests` errors already include their cause, and
/// the `{:#}` chain printed by main would repeat it.
fn duration_arg(flag: &str, text: &str) -> anyhow::Result<Duration> {
    scalpel_units::parse_duration(text).map_err(|e| anyhow!("{flag}: {e}"))
}

/// What the flags make: the plan, the targets, what the dashboard watches, and, with
/// --from, the recording (for the report).
struct Built {
    plan: Plan,
    targets: Vec<Target>,
    watched: Vec<DashTarget>,
    recorded: Option<Arc<RecordedRequests>>,
}

/// Turns the raw flags into the plan, the targets and the rest; every error is one line.
fn build(args: &LoadArgs) -> anyhow::Result<Built> {
    // Targets and the path template. A mix or a recording brings its own paths: the URL
    // is then only the base.
    let whole = args.mix.is_some() || args.from.is_some();
    let (bases, template): (Vec<(String, String)>, String) = if args.targets.is_empty() {
        let url = args.url.as_deref().ok_or_else(|| {
            anyhow!("give a URL, e.g. http://127.0.0.1:8080/, or --target NAME=URL")
        })?;
        let (base, path) = split_url(url)?;
        if whole {
            (
                vec![("target".to_string(), url.to_string())],
                "/".to_string(),
            )
        } else {
            (vec![("target".to_string(), base)], path)
        }
    } else {
        let mut bases = Vec::new();
        for t in &args.targets {
            let (name, url) = t
                .split_once('=')
                .filter(|(n, u)| !n.is_empty() && !u.is_empty())
                .ok_or_else(|| anyhow!("--target takes NAME=BASE_URL, got `{t}`"))?;
            bases.push((name.to_string(), url.to_string()));
        }
        let path = match args.url.as_deref() {
            None => "/".to_string(),
            Some(p) if whole => bail!(
                "with --mix or --from, the paths come from the file: give no path `{p}` beside --target"
            ),
            Some(p) if p.starts_with('/') => p.to_string(),
            Some(p) => bail!(
                "with --target, the positional argument is a path template starting with `/`, got `{p}`"
            ),
        };
        (bases, path)
    };

    // Requests.
    let mut mixed: Option<Arc<MixSource>> = None;
    let (source, label, recorded): (Arc<dyn RequestSource>, String, _) =
        match (&args.mix, &args.from) {
            (Some(path), _) => {
                let (mix, label) = mix_source(args, path)?;
                mixed = Some(mix.clone());
                (mix, label, None)
            }
            (None, Some(path)) => {
                let recorded = Arc::new(recorded_source(args, path)?);
                let label = format!(
                    "recorded {} ({})",
                    path.display(),
                    recorded.source().format()
                );
                (recorded.clone(), label, Some(recorded))
            }
            (None, None) => {
                let (template, label) = template_source(args, &template)?;
                (template, label, None)
            }
        };
    let pool = args.rate.is_some() || args.ramp.is_some() || args.connections.is_some();
    let replay = recorded.as_ref().filter(|_| !pool);
    if args.speed.is_some() && pool {
        bail!(
            "--speed is the pace of the recorded schedule; with --rate, --ramp or -c the \
             records are a pool sent at that load's pace"
        );
    }

    // Model and limits.
    let model = match (args.rate, &args.ramp) {
        (Some(rate), _) => {
            if !(rate > 0.0 && rate.is_finite()) {
                bail!("--rate must be a positive number of requests per second");
            }
            check_rate("--rate", rate)?;
            Model::Open { rate }
        }
        (None, Some(ramp)) => {
            let parts: Vec<f64> = ramp
                .split(',')
                .map(|p| p.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| anyhow!("--ramp takes START,STEP,MAX in requests/s, got `{ramp}`"))?;
            match parts[..] {
                [start, step, max]
                    if start > 0.0 && step > 0.0 && max >= start && max.is_finite() =>
                {
                    check_rate("--ramp", max)?;
                    Model::Ramp { start, step, max }
                }
                _ => bail!(
                    "--ramp takes START,STEP,MAX with START > 0, STEP > 0 and MAX >= START, got `{ramp}`"
                ),
            }
        }
        (None, None) => match replay {
            Some(_) => {
                let speed = args.speed.unwrap_or(1.0);
                if !(speed > 0.0 && speed <= MAX_SPEED) {
                    bail!("--speed must be above 0 and at most {MAX_SPEED}, got {speed}");
                }
                Model::Recorded { speed }
            }
            None => Model::Closed,
        },
    };
    let is_ramp = matches!(model, Model::Ramp { .. });
    if args.step_duration.is_some() && !is_ramp {
        bail!("--step-duration applies to --ramp; use -d/--duration");
    }
    if is_ramp && args.duration.is_some() {
        bail!("with --ramp, give --step-duration (the length of each step), not -d");
    }
    let limit = match (args.requests, &args.duration, &args.step_duration) {
        (Some(0), _, _) => bail!("-n/--requests must be at least 1"),
        (Some(n), _, _) => StepLimit::Requests(n),
        (None, Some(d), _) | (None, None, Some(d)) => {
            let d = duration_arg(
                if is_ramp {
                    "--step-duration"
                } else {
                    "--duration"
                },
                d,
            )?;
            if d.is_zero() {
                bail!("the duration must be longer than 0");
            }
            StepLimit::Duration(d)
        }
        (None, None, None) => StepLimit::Duration(Duration::from_secs(10)),
    };
    // A recorded schedule is replayed whole unless cut by -n or -d.
    let limit = match replay {
        Some(r) => replay_limit(args, r.source(), args.speed.unwrap_or(1.0))?,
        None => limit,
    };
    if args.connections == Some(0) {
        bail!("-c/--connections must be at least 1");
    }
    let max_in_flight = args.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    if max_in_flight == 0 {
        bail!("--max-in-flight must be at least 1");
    }
    let connect_timeout = duration_arg("--connect-timeout", &args.connect_timeout)?;
    let timeout = duration_arg("--timeout", &args.timeout)?;
    if connect_timeout.is_zero() || timeout.is_zero() {
        bail!("time-outs must be longer than 0");
    }
    let slo = args
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(|e| anyhow!("--slo: {e}"))?;
    if let Some(slo) = &slo {
        check_slo_endpoints(slo, args.mix.as_deref(), mixed.as_deref())?;
    }
    let threads = match args.threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    };
    let rounds = match args.rounds {
        Some(0) => bail!("--rounds must be at least 1"),
        Some(n) if n > 1 && replay.is_some() => bail!(
            "a recorded schedule is replayed whole to each target in turn: --rounds must be 1 \
             (or use the records as a pool with --rate, --ramp or -c)"
        ),
        Some(n) => n,
        None if bases.len() > 1 && replay.is_none() => 2,
        None => 1,
    };
    let options = peer_options(args, &bases)?;
    let streams = match args.streams {
        Some(_) if !args.http2 => bail!("--streams applies to HTTP/2: add --http2"),
        Some(0) => bail!("--streams must be at least 1"),
        Some(n) => n,
        None => 1,
    };
    if args.no_reuse && args.http2 {
        bail!(
            "--no-reuse opens a connection per request over HTTP/1.1; with --http2, use -c and \
             --streams (a connection per request would measure HTTP/2 setup, not requests)"
        );
    }
    let (shard, start_at) = shard_and_start(args, &model, limit, max_in_flight, rounds)?;
    let plan = Plan {
        model,
        limit,
        connections: args.connections(),
        max_in_flight,
        threads,
        connect_timeout,
        timeout,
        slo,
        rounds,
        request_label: label,
        shard,
        start_at,
    };

    // Targets with their watchers.
    let mut targets = Vec::new();
    let mut watched = Vec::new();
    for (name, base) in &bases {
        let mut target = Target::new(name, base, source.clone())?
            .with_options(options.clone())
            .with_streams(streams)
            .with_no_reuse(args.no_reuse);
        let mut sampler_of = None;
        if let Some(pid) = watch_for(name, &bases, &args.watch_pid, &args.watch_port)? {
            let sampler = Arc::new(
                TreeSampler::start(pid, Duration::from_millis(100))
                    .with_context(|| format!("cannot watch process {pid}"))?,
            );
            sampler_of = Some(sampler.clone());
            target = target.with_watch(Box::new(ProcWatch {
                sampler,
                mark: None,
            }));
        }
        targets.push(target);
        watched.push(DashTarget {
            name: name.clone(),
            url: base.clone(),
            sampler: sampler_of,
        });
    }
    // `scalpel_load::run` probes every target with a connection (no request) before any
    // load.
    Ok(Built {
        plan,
        targets,
        watched,
        recorded,
    })
}

/// The highest `--speed`: a million times faster sends any real recording at once.
const MAX_SPEED: f64 = 1e6;

/// The most endpoints a mix may have: each keeps its own histograms on every load thread.
const MAX_ENDPOINTS: usize = 256;

/// One template over a data file, and its label (`GET /v1/users/{id}`).
fn template_source(
    args: &LoadArgs,
    template: &str,
) -> anyhow::Result<(Arc<dyn RequestSource>, String)> {
    let method = match args.methods.as_slice() {
        [] => "GET",
        [one] => one.as_str(),
        _ => bail!(
            "-m/--method takes one method for a request; several are a filter of --from's records"
        ),
    };
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read body file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let request = RequestTemplate::parse(method, template, &args.headers, body.as_deref())?;
    let fixed = request.placeholders().is_empty();
    let set = RequestSet::new(request, data_set(args)?, order(args)?)?;
    let label = format!("{} {template}", method.to_ascii_uppercase());
    Ok((Arc::new(TemplateSource::new(set, fixed)), label))
}

/// `--data`, when given.
fn data_set(args: &LoadArgs) -> anyhow::Result<Option<DataSet>> {
    Ok(match &args.data {
        Some(path) => Some(DataSet::from_path(path)?),
        None => None,
    })
}

/// The data's order: `--shuffle SEED`, or file order.
fn order(args: &LoadArgs) -> anyhow::Result<Order> {
    match args.shuffle {
        Some(_) if args.data.is_none() => bail!("--shuffle needs --data"),
        Some(seed) => Ok(Order::Shuffled { seed }),
        None => Ok(Order::Sequential),
    }
}

/// `--mix FILE` over `--data`, and its label (`mix mix.toml: balance 6, stats 3`).
fn mix_source(args: &LoadArgs, path: &std::path::Path) -> anyhow::Result<(Arc<MixSource>, String)> {
    if !args.methods.is_empty() {
        bail!("-m/--method does not apply to --mix: each [[request]] names its method");
    }
    let mix = Mix::from_path(path, data_set(args)?, order(args)?, args.mix_seed)?;
    let entries = mix.entries();
    if entries.len() > MAX_ENDPOINTS {
        bail!(
            "mix file {}: {} endpoints, more than the {MAX_ENDPOINTS} a run keeps figures for",
            path.display(),
            entries.len()
        );
    }
    let weights: Vec<String> = entries
        .iter()
        .map(|e| format!("{} {}", e.name(), e.weight()))
        .collect();
    let label = format!(
        "mix {} (seed {}): {}",
        path.display(),
        args.mix_seed,
        weights.join(", ")
    );
    Ok((Arc::new(MixSource::new(mix)), label))
}

/// `--from FILE` read with its filters and rewrites.
fn recorded_source(args: &LoadArgs, path: &std::path::Path) -> anyhow::Result<RecordedRequests> {
    let options = RecordedFlags {
        format: args.from_format.as_deref(),
        include_path: &args.include_path,
        exclude_path: &args.exclude_path,
        methods: &args.methods,
        set_header: &args.set_header,
        drop_header: &args.drop_header,
        allow_unsafe: args.allow_unsafe,
    }
    .source_options()?;
    let source = RecordedSource::open(path, options)?;
    Ok(RecordedRequests::new(source))
}

/// The limit of a replay on the recorded schedule: the whole recording, its first `-n`
/// requests, or what falls due within `-d`.
fn replay_limit(args: &LoadArgs, source: &RecordedSource, speed: f64) -> anyhow::Result<StepLimit> {
    if args.step_duration.is_some() {
        bail!("--step-duration applies to --ramp; a replay takes -d or -n");
    }
    let usable = source.len();
    if let Some(n) = args.requests {
        if n > usable {
            bail!(
                "-n {n}: {} has only {usable} usable requests; use them as a pool with --rate \
                 or -c to send more (looped)",
                source.path().display()
            );
        }
        return Ok(StepLimit::Requests(n));
    }
    if let Some(d) = &args.duration {
        let d = duration_arg("--duration", d)?;
        if d.is_zero() {
            bail!("the duration must be longer than 0");
        }
        // Beyond the replay's own length, the whole recording.
        if d.as_secs_f64() < source.summary().span.as_secs_f64() / speed {
            return Ok(StepLimit::Duration(d));
        }
    }
    Ok(StepLimit::Requests(usable))
}

/// An SLO that names endpoints needs a mix that has them, each with a weight.
fn check_slo_endpoints(
    slo: &Slo,
    path: Option<&std::path::Path>,
    mix: Option<&MixSource>,
) -> anyhow::Result<()> {
    let names = slo.endpoints();
    let Some(first) = names.first() else {
        return Ok(());
    };
    let (Some(path), Some(mix)) = (path, mix) else {
        bail!("--slo names the endpoint `{first}`, but there is no --mix");
    };
    let entries = mix.mix().entries();
    for name in names {
        match entries.iter().find(|e| e.name() == name) {
            None => {
                let known: Vec<&str> = entries.iter().map(|e| e.name()).collect();
                bail!(
                    "--slo names the endpoint `{name}`, which is not in {} (its endpoints: {})",
                    path.display(),
                    known.join(", ")
                );
            }
            // No request would go to it: the clause could never hold.
            Some(e) if e.weight() == 0 => bail!(
                "--slo names the endpoint `{name}`, whose weight in {} is 0",
                path.display()
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// The connection settings every target gets from the flags: HTTP version, trust, SNI
/// by the URL's host, `--resolve` entries. TLS flags without an https:// target are
/// refused, not ignored.
fn peer_options(args: &LoadArgs, bases: &[(String, String)]) -> anyhow::Result<PeerOptions> {
    let mut options = PeerOptions::default();
    options.version = if args.http2 {
        HttpVersion::Http2
    } else {
        HttpVersion::Http1
    };
    let any_tls = bases.iter().any(|(_, url)| url.starts_with("https://"));
    if args.insecure && args.cacert.is_some() {
        bail!("--insecure verifies nothing, so --cacert would have no effect: give one of them");
    }
    if (args.insecure || args.cacert.is_some()) && !any_tls {
        bail!(
            "{} applies to https:// targets, and every target is http://",
            if args.insecure {
                "--insecure"
            } else {
                "--cacert"
            }
        );
    }
    options.insecure = args.insecure;
    options.ca_file = args.cacert.clone();
    for r in &args.resolve {
        options.resolve.push(Resolve::parse(r)?);
    }
    Ok(options)
}

/// `--shard` (with the index from the environment for `auto/N`) and `--start-at`, checked
/// against the totals each shard takes a part of.
fn shard_and_start(
    args: &LoadArgs,
    model: &Model,
    limit: StepLimit,
    max_in_flight: u32,
    rounds: u32,
) -> anyhow::Result<(Shard, Option<StartAt>)> {
    let start_at = args.start_at.as_deref().map(StartAt::parse).transpose()?;
    if let Some(at) = start_at {
        // A day either way: further is a typo (milliseconds as seconds, a wrong year).
        let ahead = StartAt::now().seconds_until(at);
        if ahead.abs() > 86_400.0 {
            bail!(
                "--start-at {at} is {} hours {}: give a time within a day of now",
                (ahead.abs() / 3600.0).round(),
                if ahead > 0.0 { "ahead" } else { "ago" }
            );
        }
    }
    if let Some(id) = &args.run_id {
        check_run_id(id).map_err(|e| anyhow!(e))?;
        if args.shard.is_none() {
            bail!("--run-id names the shards of one run: give --shard too");
        }
    }
    let Some(spec) = &args.shard else {
        return Ok((Shard::WHOLE, start_at));
    };
    let job_index = std::env::var(JOB_INDEX_VAR).ok();
    let shard = Shard::parse(spec, job_index.as_deref())?;
    if start_at.is_none() && args.run_id.is_none() {
        bail!(
            "--shard needs --start-at TIME (so the shards start together) or --run-id ID (so \
             `scalpel report merge` knows they belong together)"
        );
    }
    // Every shard refuses alike: one that got nothing would make the set incomplete.
    let n = u64::from(shard.count());
    if u64::from(args.connections()) < n {
        bail!(
            "-c {} is the whole run's connections: {n} shards need at least {n}",
            args.connections()
        );
    }
    if !matches!(model, Model::Closed) && u64::from(max_in_flight) < n {
        bail!("--max-in-flight {max_in_flight} is the whole run's: {n} shards need at least {n}");
    }
    if let StepLimit::Requests(count) = limit
        && count < n * u64::from(rounds)
    {
        bail!(
            "-n {count} is the whole run's count per step: {n} shards need at least {}",
            n * u64::from(rounds)
        );
    }
    Ok((shard, start_at))
}

/// The run id and settings fingerprint of a shard: everything that shapes the traffic, so
/// shards started with different command lines are told apart by `scalpel report merge`.
/// Machine-local flags (threads, watched processes, output files, progress) are left out.
fn shard_identity(
    args: &LoadArgs,
    plan: &Plan,
    recorded: Option<&RecordedSource>,
) -> anyhow::Result<(String, String)> {
    let mut f = Fingerprint::new();
    f.field("url", args.url.as_deref().unwrap_or_default());
    for t in &args.targets {
        f.field("target", t);
    }
    for m in &args.methods {
        f.field("method", m);
    }
    for h in &args.headers {
        f.field("header", h);
    }
    // A mix and its body files are small: their bytes. A recording may be gigabytes: what
    // it was counted to hold (size, records, usable, skips, span) and how it is read.
    if let Some(path) = &args.mix {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        f.field("mix", "").bytes(&bytes);
        f.field("mix-seed", &args.mix_seed.to_string());
    }
    if let Some(recorded) = &recorded {
        let s = recorded.summary();
        f.field(
            "from",
            &format!(
                "{} {} bytes, {} read, {} usable, {:?} span, {}",
                s.format,
                s.bytes,
                s.read,
                s.usable,
                s.span,
                s.describe()
            ),
        );
        for (flag, values) in [
            ("include-path", &args.include_path),
            ("exclude-path", &args.exclude_path),
            ("set-header", &args.set_header),
            ("drop-header", &args.drop_header),
        ] {
            for v in values {
                f.field(flag, v);
            }
        }
        f.field("allow-unsafe", &args.allow_unsafe.to_string());
    }
    if let Some(body) = &args.body {
        f.field("body", body);
    }
    for (flag, path) in [("body-file", &args.body_file), ("data", &args.data)] {
        if let Some(path) = path {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            f.field(flag, "");
            f.bytes(&bytes);
        }
    }
    f.field("shuffle", &format!("{:?}", args.shuffle))
        .field("model", &format!("{:?}", plan.model))
        .field("limit", &format!("{:?}", plan.limit))
        .field("connections", &plan.connections.to_string())
        .field("max-in-flight", &plan.max_in_flight.to_string())
        .field("connect-timeout", &format!("{:?}", plan.connect_timeout))
        .field("timeout", &format!("{:?}", plan.timeout))
        .field("slo", plan.slo.as_ref().map_or("", |s| s.as_str()))
        .field("rounds", &plan.rounds.to_string())
        .field("shards", &plan.shard.count().to_string());
    let settings = f.hex();
    let id = match &args.run_id {
        Some(id) => id.clone(),
        None => run_id(
            &settings,
            &plan.start_at.map(|t| t.to_string()).unwrap_or_default(),
        ),
    };
    Ok((id, settings))
}

/// Says in the result which part of which run it is, and on stderr when it started late.
fn describe_shard(result: &mut RunResult, plan: &Plan, run_id: String, settings: String) {
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
    if late_steps > 0 {
        eprintln!(
            "scalpel: shard {} started {late_steps} step(s) more than a tenth of a step after \
             the common clock (the first {:.2} s after --start-at); `report merge` will flag it",
            plan.shard,
            first.unwrap_or(0.0)
        );
    }
    result.shard = Some(ShardInfo {
        run_id,
        index: plan.shard.index(),
        count: plan.shard.count(),
        start_at: plan.start_at.map(|t| t.to_string()),
        start_late_s: first,
        settings,
    });
}

/// Refuses a rate one generator cannot schedule (see [`MAX_RATE`]).
fn check_rate(flag: &str, rate: f64) -> anyhow::Result<()> {
    if rate > MAX_RATE {
        bail!(
            "{flag}: {rate} requests/s is more than one load generator can schedule (at most \
             10,000,000/s per target); run it from several machines and merge their results \
             with `scalpel report merge`"
        );
    }
    Ok(())
}

/// Splits `http[s]://host:port/path?q` into the base URL and the path template (default
/// `/`).
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some((scheme, rest)) = url
        .strip_prefix("http://")
        .map(|r| ("http", r))
        .or_else(|| url.strip_prefix("https://").map(|r| ("https", r)))
    else {
        bail!("bad URL `{url}`: expected http[s]://HOST[:PORT][/PATH]");
    };
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let path = &rest[cut..];
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok((format!("{scheme}://{}", &rest[..cut]), path))
}

/// The pid to watch for target `name`, from `--watch-pid`/`--watch-port` values that are
/// `NAME=N`, or plain `N` when there is only one target.
fn watch_for(
    name: &str,
    bases: &[(String, String)],
    pids: &[String],
    ports: &[String],
) -> anyhow::Result<Option<u32>> {
    let mut found = None;
    for (flag, values) in [("--watch-pid", pids), ("--watch-port", ports)] {
        for v in values {
            let (who, number) = match v.split_once('=') {
                Some((who, n)) => {
                    if !bases.iter().any(|(b, _)| b == who) {
                        bail!("{flag} `{v}`: no target named `{who}`");
                    }
                    (who, n)
                }
                None if bases.len() == 1 => (bases[0].0.as_str(), v.as_str()),
                None => bail!(
                    "{flag} `{v}`: with several targets, give NAME={}",
                    if flag == "--watch-pid" { "PID" } else { "PORT" }
                ),
            };
            if who != name {
                continue;
            }
            if found.is_some() {
                bail!("target `{name}` is watched twice");
            }
            let pid = if flag == "--watch-pid" {
                number
                    .parse::<u32>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| anyhow!("{flag} `{v}`: not a process id"))?
            } else {
                let port = number
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| anyhow!("{flag} `{v}`: not a TCP port"))?;
                scalpel_procstat::pid_listening_on(port).with_context(|| format!("{flag} `{v}`"))?
            };
            found = Some(pid);
        }
    }
    Ok(found)
}

/// `scalpel-procstat` behind the load crate's resource seam.
#[derive(Debug)]
struct ProcWatch {
    /// Shared with the dashboard, which shows its latest sample.
    sampler: Arc<TreeSampler>,
    mark: Option<SampleMark>,
}

impl ResourceWatch for ProcWatch {
    fn begin(&mut self) {
        self.mark = Some(self.sampler.mark());
    }

    fn end(&mut self) -> Option<ResourceUsage> {
        let s = self.sampler.summary_since(self.mark.take()?);
        // PSS is read once, at the end of the step; a tree that has exited by then reads
        // as 0 bytes. A live process never has a PSS of 0: that is "not measured".
        let pss = |bytes: Option<u64>| bytes.filter(|&b| b > 0);
        (s.samples > 0).then_some(ResourceUsage {
            samples: u64::from(s.samples),
            cpu_percent_mean: s.cpu_percent_mean,
            cpu_percent_peak: s.cpu_percent_peak,
            rss_bytes_mean: s.rss_bytes_mean,
            rss_bytes_peak: s.rss_bytes_peak,
            pss_bytes_mean: pss(s.pss_bytes_mean),
            pss_bytes_peak: pss(s.pss_bytes_peak),
        })
    }
}

/// The live line on stderr: rewritten in place on a terminal, one line a second otherwise.
struct ProgressLine {
    enabled: bool,
    tty: bool,
    last_print: Option<Instant>,
    printed: bool,
}

impl ProgressLine {
    fn show(&mut self, p: &Progress<'_>) {
        if !self.enabled {
            return;
        }
        let every = if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        if self.last_print.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last_print = Some(Instant::now());
        let step = if p.steps > 1 {
            format!(" step {}/{}", p.step + 1, p.steps)
        } else {
            String::new()
        };
        let offered = p
            .offered_rps
            .map(|r| format!(" @{r:.0}/s"))
            .unwrap_or_default();
        let left = p
            .left
            .map(|d| format!(" | {}s left", d.as_secs()))
            .unwrap_or_default();
        let text = format!(
            "[{}]{step}{offered} | {:.0} req/s | mean {:.2} ms | {} done, {} errors{left}",
            p.target, p.rps, p.mean_latency_ms, p.completed, p.errors
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r{text}\x1b[K")
        } else {
            writeln!(err, "{text}")
        };
        self.printed = true;
    }

    fn finish(&mut self) {
        if self.printed && self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

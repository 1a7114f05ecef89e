//! `scalpel load`: flags → a [`scalpel_load::Plan`] and [`scalpel_load::Target`]s, run,
//! print the summary table (on stderr when `--json -` takes stdout), write `--json`/`--html`
//! (with `--shard`, the JSON says which part of which run it is), exit 0 (SLO held or none), 1 (broken),
//! 2 (bad usage, or a result that could not be written), 128 + the signal (130 for
//! Ctrl-C) when interrupted — after printing and writing what was measured.
//!
//! Templates come from `scalpel-requests`, process sampling from `scalpel-procstat`, output
//! from `scalpel-report`; this module only adapts them to the load crate's two seams
//! ([`RequestSource`], [`ResourceWatch`]).

use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use scalpel_load::result::{RunResult, ShardInfo};
use scalpel_load::shard::{Fingerprint, JOB_INDEX_VAR, check_run_id, run_id};
use scalpel_load::{
    Model, Plan, Progress, RequestParts, RequestSource, ResourceUsage, ResourceWatch, Shard, Slo,
    StartAt, StepLimit, Stop, Target,
};
use scalpel_procstat::{SampleMark, TreeSampler};
use scalpel_requests::{DataSet, Order, RenderedRequest, RequestSet, RequestTemplate};

use crate::dashboard::{DashTarget, Dashboard};

/// Arguments of `scalpel load`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  scalpel load -c 50 -d 30s http://127.0.0.1:8080/\n  scalpel load --shard auto/10 --start-at 2030-01-01T12:00:00Z --rate 500000 -d 60s \\\n      --json - http://payments.default.svc:8080/   (on each of 10 Indexed Job pods)\n  scalpel load --rate 2000 -d 30s http://127.0.0.1:8080/v1/users/{id}/stats --data ids.txt\n  scalpel load --ramp 1000,1000,20000 --step-duration 10s --slo 'p99<50ms,errors<1%' \\\n      --target go=http://127.0.0.1:8080 --target rust=http://127.0.0.1:8081 \\\n      --watch-port go=8080 --watch-port rust=8081 /v1/users/{id}/stats --data ids.txt"
)]
pub(crate) struct LoadArgs {
    /// The target URL with the request's path template (`http://HOST:PORT/PATH?QUERY`), or,
    /// with --target, only the path template (default `/`).
    #[arg(value_name = "URL")]
    url: Option<String>,

    /// A named target `NAME=BASE_URL` (repeatable); targets are measured in alternation.
    #[arg(long = "target", value_name = "NAME=BASE_URL")]
    targets: Vec<String>,

    /// Closed model: connections sending back to back. Open models: connections opened
    /// before the clock starts.
    #[arg(short = 'c', long, default_value_t = 50, value_name = "N")]
    connections: u32,

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

    /// Time-out for establishing a connection.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    connect_timeout: String,

    /// Time-out for a whole request.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    timeout: String,

    /// The objective each step must hold, e.g. `p99<50ms,errors<1%` (p50 p90 p99 p999 max
    /// mean with us/ms/s; errors<N%; rps>N).
    #[arg(long, value_name = "SLO")]
    slo: Option<String>,

    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,

    /// A request header `Name: value` (repeatable; values may hold placeholders).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,

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
    let (plan, targets, watched) = build(&args)?;
    // Before any load: the data file is read for the fingerprint only when sharded.
    let shard_id = match args.shard {
        Some(_) => Some(shard_identity(&args, &plan)?),
        None => None,
    };
    let linger = duration_arg("--dashboard-linger", &args.dashboard_linger)?;
    let dashboard = match args.dashboard {
        Some(addr) => {
            let model = match plan.model {
                Model::Closed => "closed",
                Model::Open { .. } => "open",
                Model::Ramp { .. } => "ramp",
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
    let needed = u64::from(if open_model {
        args.connections.min(in_flight)
    } else {
        args.connections
    });
    if needed > room {
        bail!(
            "-c {} needs about {} open files, but this process may open {available} (ulimit -n; \
             hard limit {hard}): lower -c or raise the limit",
            args.connections,
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

/// Turns the raw flags into the plan and the targets; every error is one line.
fn build(args: &LoadArgs) -> anyhow::Result<(Plan, Vec<Target>, Vec<DashTarget>)> {
    // Targets and the path template.
    let (bases, template): (Vec<(String, String)>, String) = if args.targets.is_empty() {
        let url = args.url.as_deref().ok_or_else(|| {
            anyhow!("give a URL, e.g. http://127.0.0.1:8080/, or --target NAME=URL")
        })?;
        let (base, path) = split_url(url)?;
        (vec![("target".to_string(), base)], path)
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
            Some(p) if p.starts_with('/') => p.to_string(),
            Some(p) => bail!(
                "with --target, the positional argument is a path template starting with `/`, got `{p}`"
            ),
        };
        (bases, path)
    };

    // Requests.
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read body file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let request = RequestTemplate::parse(&args.method, &template, &args.headers, body.as_deref())?;
    let fixed = request.placeholders().is_empty();
    let data = match &args.data {
        Some(path) => Some(DataSet::from_path(path)?),
        None => None,
    };
    if args.shuffle.is_some() && data.is_none() {
        bail!("--shuffle needs --data");
    }
    let order = match args.shuffle {
        Some(seed) => Order::Shuffled { seed },
        None => Order::Sequential,
    };
    let set = RequestSet::new(request, data, order)?;
    let source: Arc<dyn RequestSource> = Arc::new(TemplateSource { set, fixed });

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
        (None, None) => Model::Closed,
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
    if args.connections == 0 {
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
    let threads = match args.threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    };
    let rounds = match args.rounds {
        Some(0) => bail!("--rounds must be at least 1"),
        Some(n) => n,
        None if bases.len() > 1 => 2,
        None => 1,
    };
    let (shard, start_at) = shard_and_start(args, &model, limit, max_in_flight, rounds)?;
    let plan = Plan {
        model,
        limit,
        connections: args.connections,
        max_in_flight,
        threads,
        connect_timeout,
        timeout,
        slo,
        rounds,
        request_label: format!("{} {template}", args.method.to_ascii_uppercase()),
        shard,
        start_at,
    };

    // Targets with their watchers.
    let mut targets = Vec::new();
    let mut watched = Vec::new();
    for (name, base) in &bases {
        let mut target = Target::new(name, base, source.clone())?;
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
    // `scalpel_load::run` probes every target with one request before any load.
    Ok((plan, targets, watched))
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
    if u64::from(args.connections) < n {
        bail!(
            "-c {} is the whole run's connections: {n} shards need at least {n}",
            args.connections
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
fn shard_identity(args: &LoadArgs, plan: &Plan) -> anyhow::Result<(String, String)> {
    let mut f = Fingerprint::new();
    f.field("url", args.url.as_deref().unwrap_or_default());
    for t in &args.targets {
        f.field("target", t);
    }
    f.field("method", &args.method.to_ascii_uppercase());
    for h in &args.headers {
        f.field("header", h);
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

/// Splits `http://host:port/path?q` into the base URL and the path template (default `/`).
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        if url.starts_with("https://") {
            bail!("bad URL `{url}`: https is not supported, use http://");
        }
        bail!("bad URL `{url}`: expected http://HOST[:PORT][/PATH]");
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
    Ok((format!("http://{}", &rest[..cut]), path))
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

/// `scalpel-requests` behind the load crate's request seam.
#[derive(Debug)]
struct TemplateSource {
    set: RequestSet,
    fixed: bool,
}

thread_local! {
    /// Each load thread renders into its own reused request.
    static RENDERED: RefCell<RenderedRequest> = RefCell::new(RenderedRequest::default());
}

impl RequestSource for TemplateSource {
    fn is_fixed(&self) -> bool {
        self.fixed
    }

    fn render(&self, index: u64, out: &mut RequestParts) {
        RENDERED.with_borrow_mut(|r| {
            self.set.render_into(index, r);
            out.method.clear();
            out.method.push_str(r.method.as_str());
            out.path_and_query.clear();
            out.path_and_query.push_str(&r.path_and_query);
            out.headers.truncate(r.headers.len());
            for (i, (name, value)) in r.headers.iter().enumerate() {
                let value = String::from_utf8_lossy(value.as_bytes());
                match out.headers.get_mut(i) {
                    Some((n, v)) => {
                        n.clear();
                        n.push_str(name.as_str());
                        v.clear();
                        v.push_str(&value);
                    }
                    None => out.headers.push((name.to_string(), value.into_owned())),
                }
            }
            out.body.clear();
            out.body.extend_from_slice(&r.body);
        });
    }
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

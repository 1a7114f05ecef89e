//! `scalpel shadow replay`: flags → the requests ([`ReplaySource`]) and a
//! [`ReplayConfig`], replay, print the table and the verdict, write `--json`/`--html`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use scalpel_requests::{DataSet, Order, RecordedSource, RequestSet, RequestTemplate};
use scalpel_shadow::{
    MinConsistency, Recorder, Replay, ReplayConfig, ReplayProgress, ReplaySource, ReplayStats,
    Schedule, Summary, text_table,
};

use super::{
    CompareArgs, OutputArgs, UpstreamArgs, check_writable, positive_duration, print_verdict,
    recorder, runtime, show_upstreams, shutdown_signal, size, store_lost_writes, write_outputs,
};
use crate::recorded::RecordedFlags;

/// Arguments of `scalpel shadow replay`.
#[derive(Debug, clap::Args)]
pub(super) struct ReplayArgs {
    /// The service that is right by definition.
    #[arg(long, value_name = "URL")]
    primary: String,
    /// The service under test.
    #[arg(long, value_name = "URL")]
    candidate: String,
    /// Request path and query with `{name}` placeholders, e.g. `/v1/users/{id}/stats?days=30`.
    #[arg(
        long,
        value_name = "TEMPLATE",
        required_unless_present = "from",
        conflicts_with = "from"
    )]
    template: Option<String>,
    /// Values for the placeholders: one per line, or CSV with a header row.
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    data: Option<PathBuf>,
    /// HTTP method of the template (default GET); with --from, keep only requests of this method (repeatable).
    #[arg(short = 'm', long, value_name = "METHOD")]
    method: Vec<String>,
    /// A request header `Name: value` (placeholders allowed). Repeatable.
    #[arg(
        short = 'H',
        long = "header",
        value_name = "HEADER",
        conflicts_with = "from"
    )]
    header: Vec<String>,
    /// Request body (placeholders allowed).
    #[arg(long, conflicts_with = "from")]
    body: Option<String>,
    /// Send the data rows in a seeded shuffled order.
    #[arg(long, value_name = "SEED", conflicts_with = "from")]
    shuffle: Option<u64>,
    /// Replay recorded traffic: an nginx/Apache access log, a HAR file or a capture of `shadow proxy --capture` (told by content).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Read --from as this format instead of telling it by content: access-log, har, capture.
    #[arg(long = "from-format", value_name = "FORMAT", requires = "from")]
    from_format: Option<String>,
    /// Send recorded requests on their recorded schedule, this many times faster (the default with --from, at 1).
    #[arg(long, value_name = "X", requires = "from")]
    speed: Option<f64>,
    /// Keep only recorded requests whose path and query match this regex. Repeatable.
    #[arg(long = "include-path", value_name = "REGEX", requires = "from")]
    include_path: Vec<String>,
    /// Skip recorded requests whose path and query match this regex. Repeatable.
    #[arg(long = "exclude-path", value_name = "REGEX", requires = "from")]
    exclude_path: Vec<String>,
    /// Set this header on every recorded request, replacing recorded ones of that name. Repeatable.
    #[arg(long = "set-header", value_name = "'NAME: VALUE'", requires = "from")]
    set_header: Vec<String>,
    /// Remove this header from every recorded request. Repeatable.
    #[arg(long = "drop-header", value_name = "NAME", requires = "from")]
    drop_header: Vec<String>,
    /// Also replay POST, PUT, PATCH, DELETE… (skipped by default: replaying a payment moves money twice).
    #[arg(long = "allow-unsafe", requires = "from")]
    allow_unsafe: bool,
    /// Requests in flight at once (default 16). With --from and no --speed: use the records as a pool, this many at a time, as fast as they are answered; with --speed: the most in flight.
    #[arg(short = 'c', long, value_name = "N")]
    concurrency: Option<usize>,
    /// Time-out of one exchange with one side.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration)]
    timeout: Duration,
    /// Largest response body read.
    #[arg(long = "max-body", value_name = "SIZE", default_value = "8MiB", value_parser = size)]
    max_body: usize,
    #[command(flatten)]
    outputs: OutputArgs,
    #[command(flatten)]
    compare: Box<CompareArgs>,
    #[command(flatten)]
    upstreams: Box<UpstreamArgs>,
}

/// Requests in flight when `-c` is not given: a template replay's workers, and the cap of
/// a recorded schedule (requests are sent at their times; this only bounds a slow side).
const DEFAULT_CONCURRENCY: usize = 16;
const DEFAULT_SCHEDULE_CAP: usize = 256;

/// What a replay sends: a template over data, or recorded traffic and its schedule.
struct Plan {
    /// Taken when the replay starts.
    source: Option<ReplaySource>,
    concurrency: usize,
    /// For the report: where the requests came from, in words and as JSON.
    lines: Vec<String>,
    json: serde_json::Value,
    describe: String,
    /// Sent on the recorded schedule (its lag is reported).
    scheduled: bool,
}

fn template_plan(a: &ReplayArgs) -> anyhow::Result<Plan> {
    let Some(path) = &a.template else {
        bail!("--template or --from is required");
    };
    if a.method.len() > 1 {
        bail!("--method: a template has one method (several are a filter for --from)");
    }
    let method = a.method.first().map_or("GET", String::as_str);
    let template = RequestTemplate::parse(method, path, &a.header, a.body.as_deref())?;
    let data = a.data.as_deref().map(DataSet::from_path).transpose()?;
    let order = a
        .shuffle
        .map_or(Order::Sequential, |seed| Order::Shuffled { seed });
    let set = Arc::new(RequestSet::new(template, data, order)?);
    Ok(Plan {
        source: Some(ReplaySource::Set(set)),
        concurrency: a.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
        lines: Vec::new(),
        json: serde_json::json!({"template": format!("{method} {path}")}),
        describe: format!("{method} {path}"),
        scheduled: false,
    })
}

fn recorded_plan(a: &ReplayArgs, path: &Path) -> anyhow::Result<Plan> {
    let options = RecordedFlags {
        format: a.from_format.as_deref(),
        include_path: &a.include_path,
        exclude_path: &a.exclude_path,
        methods: &a.method,
        set_header: &a.set_header,
        drop_header: &a.drop_header,
        allow_unsafe: a.allow_unsafe,
    }
    .source_options()?;
    let (schedule, concurrency) = match (a.speed, a.concurrency) {
        (None, Some(c)) => (Schedule::Pool, c),
        (speed, c) => (
            Schedule::recorded(speed.unwrap_or(1.0))?,
            c.unwrap_or(DEFAULT_SCHEDULE_CAP),
        ),
    };
    // Opening reads the file once, counts every record, and fails when none is usable.
    let source = RecordedSource::open(path, options)?;
    let summary = source.summary().clone();
    let mut lines = vec![format!(
        "from {} ({}): {}",
        path.display(),
        summary.format,
        summary_counts(&summary)
    )];
    for bad in &summary.first_malformed {
        lines.push(format!("  malformed line {}: {}", bad.line, bad.message));
    }
    let schedule_text = match schedule {
        Schedule::Pool => format!("as a pool, {concurrency} at a time"),
        Schedule::Recorded { speed } => format!(
            "recorded schedule: {} span at --speed {speed} = {}, at most {concurrency} in flight",
            scalpel_units::format_duration(summary.span),
            scalpel_units::format_duration(summary.span.div_f64(speed))
        ),
    };
    lines.push(format!("schedule: {schedule_text}"));
    let skipped: serde_json::Map<String, serde_json::Value> = summary
        .skipped
        .iter()
        .map(|(r, n)| (r.name().to_string(), n.into()))
        .collect();
    let json = serde_json::json!({
        "from": path.display().to_string(),
        "format": summary.format.name(),
        "records": summary.read,
        "usable": summary.usable,
        "skipped": skipped,
        "first_malformed": summary.first_malformed.iter()
            .map(|b| serde_json::json!({"line": b.line, "message": b.message}))
            .collect::<Vec<_>>(),
        "span_seconds": summary.span.as_secs_f64(),
        "schedule": match schedule { Schedule::Pool => "pool", Schedule::Recorded { .. } => "recorded" },
        "speed": match schedule { Schedule::Pool => None, Schedule::Recorded { speed } => Some(speed) },
        "concurrency": concurrency,
    });
    Ok(Plan {
        source: Some(ReplaySource::Recorded { source, schedule }),
        concurrency,
        lines,
        json,
        describe: format!("--from {}", path.display()),
        scheduled: matches!(schedule, Schedule::Recorded { .. }),
    })
}

/// A source's counts in words, without the first malformed line (listed apart).
fn summary_counts(s: &scalpel_requests::SourceSummary) -> String {
    let mut text = format!("{} records: {} usable", s.read, s.usable);
    for (reason, n) in s.skipped.iter() {
        let _ = write!(text, ", {n} skipped ({})", reason.describe());
    }
    text
}

/// Runs `scalpel shadow replay`: every request to both sides, then the table, the files
/// and the verdict.
pub(super) fn run(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (primary, candidate, secondary) =
        a.upstreams
            .sides(&a.primary, &a.candidate, a.compare.secondary.as_deref())?;
    let min = MinConsistency::new(a.outputs.min_consistency)?;
    let mut plan = match &a.from {
        Some(path) => recorded_plan(&a, path)?,
        None => template_plan(&a)?,
    };
    let cfg = ReplayConfig {
        primary: primary.clone(),
        candidate: candidate.clone(),
        secondary: secondary.clone(),
        concurrency: plan.concurrency,
        timeout: a.timeout,
        max_body: a.max_body,
    };
    cfg.validate()?;
    // Create output files' folders early: a typo should fail before the run, not after.
    for p in [&a.outputs.json, &a.outputs.html].into_iter().flatten() {
        check_writable(p)?;
    }
    let recorder = recorder(
        &a.compare,
        "replay",
        &primary,
        &candidate,
        secondary.as_ref(),
        a.from.is_some(),
    )?;
    let source = plan.source.take().expect("a replay plan is used once");
    let done = replay(cfg, source, recorder.clone())?;
    recorder.flush_and_sync();
    let summary = recorder.summary();
    print_run(&plan, &done, &summary);
    let mut meta = BTreeMap::from([
        ("mode".to_string(), "replay".to_string()),
        ("primary".to_string(), primary.describe()),
        ("candidate".to_string(), candidate.describe()),
        ("template".to_string(), plan.describe.clone()),
    ]);
    if let Some(s) = &secondary {
        meta.insert("secondary".to_string(), s.describe());
    }
    write_outputs(
        &summary,
        &recorder.samples(),
        &meta,
        Some(&done.json(&plan)),
        &a.outputs,
    )?;
    let lost = store_lost_writes(&recorder, a.compare.store.as_deref());
    if let Some(e) = done.read_error {
        // The file changed under the replay: the counts above are real but partial.
        return Err(e).context("the replay stopped early");
    }
    if done.interrupted {
        // 128 + SIGINT, like any interrupted command; a partial run is never a pass.
        return Ok(ExitCode::from(130));
    }
    let code = print_verdict(&summary, min);
    if lost {
        // The check may have passed, but its evidence on disk is not whole.
        println!("FAIL: the store is incomplete");
        return Ok(ExitCode::from(1));
    }
    Ok(code)
}

/// What a replay did: its figures, whether a signal or a recording that changed under it
/// cut it short, and the upstreams as they were reached.
struct Replayed {
    stats: ReplayStats,
    /// A recorded file that could not be read on: what was sent is still reported.
    read_error: Option<scalpel_shadow::ShadowError>,
    interrupted: bool,
    upstreams: Vec<String>,
}

/// Connects, sends every request (with a progress line on stderr), and stops sending at
/// SIGINT/SIGTERM: what was in flight is counted, and everything is still printed and
/// written (the counters of a half-done run are evidence too).
fn replay(
    cfg: ReplayConfig,
    source: ReplaySource,
    recorder: Arc<Recorder>,
) -> anyhow::Result<Replayed> {
    let rt = runtime()?;
    let progress = Arc::new(ReplayProgress::default());
    let interrupted = Arc::new(AtomicBool::new(false));
    let (stats, upstreams) = rt.block_on(async {
        let replay = Replay::connect(cfg).await?;
        show_upstreams("scalpel shadow replay", replay.upstreams());
        let ticker = tokio::spawn(show_progress(progress.clone(), recorder.clone()));
        let stopper = {
            let (progress, interrupted) = (progress.clone(), interrupted.clone());
            tokio::spawn(async move {
                shutdown_signal().await;
                interrupted.store(true, Ordering::SeqCst);
                progress.stop();
            })
        };
        let stats = replay.run(source, recorder, progress.clone()).await;
        ticker.abort();
        stopper.abort();
        let lines: Vec<String> = replay
            .upstreams()
            .iter()
            .map(|(role, url, _)| format!("{role} {url}"))
            .collect();
        anyhow::Ok((stats, lines))
    })?;
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
    let (stats, read_error) = match stats {
        Ok(s) => (s, None),
        Err(e) => (
            ReplayStats {
                requests: progress.done(),
                not_sent: progress.total().saturating_sub(progress.done()),
                elapsed: Duration::ZERO,
                waited_for_slot: 0,
                max_lag: Duration::ZERO,
            },
            Some(e),
        ),
    };
    Ok(Replayed {
        stats,
        read_error,
        interrupted: interrupted.load(Ordering::SeqCst),
        upstreams,
    })
}

impl Replayed {
    /// What `--json` says of the source and the replay beside the summary.
    fn json(&self, plan: &Plan) -> serde_json::Value {
        let stats = &self.stats;
        serde_json::json!({
            "source": plan.json,
            "upstreams": self.upstreams,
            "replay": {
                "requests": stats.requests,
                "not_sent": stats.not_sent,
                "elapsed_seconds": stats.elapsed.as_secs_f64(),
                "waited_for_slot": stats.waited_for_slot,
                "max_lag_seconds": stats.max_lag.as_secs_f64(),
            },
        })
    }
}

/// The source, the upstreams, the table, the pace, and what an interrupt left unsent.
fn print_run(plan: &Plan, done: &Replayed, summary: &Summary) {
    let stats = &done.stats;
    for line in &plan.lines {
        println!("{line}");
    }
    println!("upstreams: {}", done.upstreams.join(", "));
    print!("{}", text_table(summary));
    println!(
        "{} requests in {:.2} s ({:.0} pairs/s)",
        stats.requests,
        stats.elapsed.as_secs_f64(),
        stats.pairs_per_second()
    );
    if plan.scheduled {
        println!(
            "schedule kept: longest lag {}, {} requests waited for a free slot (-c {})",
            scalpel_units::format_duration(stats.max_lag),
            stats.waited_for_slot,
            plan.concurrency
        );
    }
    if done.interrupted {
        println!(
            "INTERRUPTED: {} of {} requests not sent",
            stats.not_sent,
            stats.requests + stats.not_sent
        );
    }
}

async fn show_progress(p: Arc<ReplayProgress>, r: Arc<Recorder>) {
    let tty = std::io::stderr().is_terminal();
    let every = Duration::from_millis(if tty { 250 } else { 5000 });
    let start = std::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let s = r.summary();
        let line = format!(
            "replay: {}/{} done, {} mismatched, {} errors, {:.0} req/s",
            p.done(),
            p.total(),
            s.mismatched,
            s.errors,
            p.done() as f64 / start.elapsed().as_secs_f64()
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

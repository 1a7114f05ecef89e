//! `scalpel shadow`: mirror live traffic (`proxy`), replay a data set (`replay`), or
//! rebuild a report from a store (`report`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use scalpel_diff::{Comparer, NoiseRule, RouteNormalizer, SampleKey, Sampler};
use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
use scalpel_shadow::{
    CompareSettings, Proxy, ProxyConfig, Recorder, Redactor, ReplayConfig, ReplayProgress, Sample,
    StoredRun, Summary, Upstream,
};

/// Arguments of `scalpel shadow`.
#[derive(Debug, clap::Args)]
pub(crate) struct ShadowArgs {
    #[command(subcommand)]
    command: ShadowCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ShadowCommand {
    /// Proxy clients to the primary and mirror a copy of each request to the candidate.
    Proxy(ProxyArgs),
    /// Send every request of a data set to primary and candidate and compare each pair.
    Replay(ReplayArgs),
    /// Rebuild the report of a run from its store.
    Report(ReportArgs),
}

/// Comparison flags shared by proxy and replay.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// A second copy of the old service: fields that differ between primary and secondary are noise.
    #[arg(long, value_name = "URL")]
    secondary: Option<String>,
    /// Also compare this response header (content-type is compared by default). Repeatable.
    #[arg(long = "compare-header", value_name = "NAME")]
    compare_header: Vec<String>,
    /// Ignore JSON fields matching this path: `$.generated_at`, `$.items[*].ts`, `$..trace_id`. Repeatable.
    #[arg(long, value_name = "PATH")]
    ignore: Vec<String>,
    /// Never compare this header. Repeatable.
    #[arg(long = "ignore-header", value_name = "NAME")]
    ignore_header: Vec<String>,
    /// A route pattern such as `/v1/users/{id}/stats` to group requests by. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    route: Vec<String>,
    /// Also redact this header, JSON field, query or form parameter in stored samples. Repeatable.
    #[arg(long, value_name = "NAME")]
    redact: Vec<String>,
    /// Full samples (request, responses, diff) to keep.
    #[arg(long, value_name = "N", default_value_t = 50)]
    samples: usize,
    /// SQLite file for counters and samples (WAL; survives crashes; resumed if it exists).
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Noise rule: minimum relative difference between the two difference rates, percent.
    #[arg(long, value_name = "PCT", default_value_t = 20.0)]
    noise_relative: f64,
    /// Noise rule: minimum absolute difference, percent of requests.
    #[arg(long, value_name = "PCT", default_value_t = 0.03)]
    noise_absolute: f64,
    /// Largest body once its Content-Encoding (gzip, deflate, br, zstd) is undone; a pair with a side over it is skipped (decoded_too_large).
    #[arg(long = "max-decoded-body", value_name = "SIZE", default_value = "16MiB", value_parser = size)]
    max_decoded_body: usize,
}

#[derive(Debug, clap::Args)]
struct ProxyArgs {
    /// Address clients connect to.
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// The service that answers clients.
    #[arg(long, value_name = "URL")]
    primary: String,
    /// The service under test.
    #[arg(long, value_name = "URL")]
    candidate: String,
    /// Serve Prometheus `/metrics` and `/summary.json` here.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// Percent of requests to mirror.
    #[arg(long, value_name = "P", default_value_t = 100.0)]
    sample: f64,
    /// Sample consistently by `header:NAME`, `query:NAME` or `path:N` (0-based segment).
    #[arg(long = "sample-key", value_name = "KEY")]
    sample_key: Option<String>,
    /// Mirror methods other than GET and HEAD too (the candidate must tolerate the side effects).
    #[arg(long = "mirror-unsafe")]
    mirror_unsafe: bool,
    /// Mirror jobs waiting for a slot before further mirrors are skipped (and counted).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    queue: usize,
    /// Mirror exchanges in flight at once.
    #[arg(long = "mirror-concurrency", value_name = "N", default_value_t = 64)]
    mirror_concurrency: usize,
    /// Time-out of one mirror exchange (e.g. 500ms, 5s); also the longest a shutdown waits for mirrors in flight.
    #[arg(long = "mirror-timeout", value_name = "DUR", default_value = "5s", value_parser = positive_duration)]
    mirror_timeout: Duration,
    /// Time-out for the primary's response head.
    #[arg(long = "primary-timeout", value_name = "DUR", default_value = "30s", value_parser = positive_duration)]
    primary_timeout: Duration,
    /// Largest request body mirrored (larger ones reach the primary only, counted as skipped).
    #[arg(long = "max-body", value_name = "SIZE", default_value = "1MiB", value_parser = size)]
    max_body: usize,
    /// Largest response body captured for comparison.
    #[arg(long = "max-response-body", value_name = "SIZE", default_value = "4MiB", value_parser = size)]
    max_response_body: usize,
    /// Bytes of bodies held at once for queued and in-flight mirrors; past it, mirrors are skipped (over_budget).
    #[arg(long = "mirror-budget", value_name = "SIZE", default_value = "256MiB", value_parser = size)]
    mirror_budget: usize,
    /// A mirror that waited longer than this in the queue is dropped (too_old) instead of compared late.
    #[arg(long = "mirror-max-age", value_name = "DUR", default_value = "10s", value_parser = positive_duration)]
    mirror_max_age: Duration,
    /// The most a client may take to send a request head or a mirrored request body (408 past it); idle client connections close after it.
    #[arg(long = "client-timeout", value_name = "DUR", default_value = "30s", value_parser = positive_duration)]
    client_timeout: Duration,
    /// How often counters are written to the store.
    #[arg(long = "flush-interval", value_name = "DUR", default_value = "1s", value_parser = positive_duration)]
    flush_interval: Duration,
    #[command(flatten)]
    compare: CompareArgs,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The service that is right by definition.
    #[arg(long, value_name = "URL")]
    primary: String,
    /// The service under test.
    #[arg(long, value_name = "URL")]
    candidate: String,
    /// Request path and query with `{name}` placeholders, e.g. `/v1/users/{id}/stats?days=30`.
    #[arg(long, value_name = "TEMPLATE")]
    template: String,
    /// Values for the placeholders: one per line, or CSV with a header row.
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// A request header `Name: value` (placeholders allowed). Repeatable.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    header: Vec<String>,
    /// Request body (placeholders allowed).
    #[arg(long)]
    body: Option<String>,
    /// Send the data rows in a seeded shuffled order.
    #[arg(long, value_name = "SEED")]
    shuffle: Option<u64>,
    /// Requests in flight at once.
    #[arg(short = 'c', long, value_name = "N", default_value_t = 16)]
    concurrency: usize,
    /// Time-out of one exchange with one side.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration)]
    timeout: Duration,
    /// Largest response body read.
    #[arg(long = "max-body", value_name = "SIZE", default_value = "8MiB", value_parser = size)]
    max_body: usize,
    /// Write the summary as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the self-contained HTML report here.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Pass when consistency is at least this percent (and no side failed).
    #[arg(long = "min-consistency", value_name = "PCT", default_value_t = 100.0)]
    min_consistency: f64,
    #[command(flatten)]
    compare: CompareArgs,
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// The store written by `proxy` or `replay`.
    #[arg(long, value_name = "FILE")]
    store: PathBuf,
    /// Write the summary as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the self-contained HTML report here.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Pass when consistency is at least this percent (and no side failed).
    #[arg(long = "min-consistency", value_name = "PCT", default_value_t = 100.0)]
    min_consistency: f64,
}

/// Runs `scalpel shadow`.
pub(crate) fn run(args: ShadowArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ShadowCommand::Proxy(a) => run_proxy(a),
        ShadowCommand::Replay(a) => run_replay(a),
        ShadowCommand::Report(a) => run_report(a),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A duration in the one grammar of `scalpel-units` (`500ms`, `5s`, `2m`), above zero: a
/// zero time-out or interval is never what a person meant.
fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = scalpel_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(format!("`{s}` is zero; give a duration above zero"));
    }
    Ok(d)
}

/// A size in the one grammar of `scalpel-units` (`65536`, `64KiB`, `1MiB`).
fn size(s: &str) -> Result<usize, String> {
    let n = scalpel_units::parse_size(s).map_err(|e| e.to_string())?;
    usize::try_from(n).map_err(|_| format!("size `{s}` does not fit in memory addresses here"))
}

fn upstream(flag: &str, url: &str) -> anyhow::Result<Upstream> {
    Upstream::parse(url).with_context(|| format!("--{flag}"))
}

fn settings(c: &CompareArgs) -> anyhow::Result<CompareSettings> {
    let mut comparer = Comparer::new();
    for h in &c.compare_header {
        comparer = comparer.compare_header(h)?;
    }
    for h in &c.ignore_header {
        comparer = comparer.ignore_header(h)?;
    }
    for p in &c.ignore {
        comparer = comparer.ignore(p)?;
    }
    let routes = RouteNormalizer::new(&c.route)?;
    for (name, v) in [
        ("noise-relative", c.noise_relative),
        ("noise-absolute", c.noise_absolute),
    ] {
        if !(0.0..=100.0).contains(&v) {
            bail!("--{name} {v}: expected a percentage from 0 to 100");
        }
    }
    Ok(CompareSettings::new(
        comparer,
        routes,
        NoiseRule::new(c.noise_relative, c.noise_absolute),
        Redactor::new(&c.redact),
        c.samples,
        c.secondary.is_some(),
    )
    .with_max_decoded_body(c.max_decoded_body))
}

fn recorder(
    c: &CompareArgs,
    mode: &str,
    primary: &Upstream,
    candidate: &Upstream,
    secondary: Option<&Upstream>,
) -> anyhow::Result<Arc<Recorder>> {
    let settings = settings(c)?;
    Ok(Arc::new(match &c.store {
        Some(path) => {
            let meta = [
                ("mode", mode.to_string()),
                ("primary", primary.to_string()),
                ("candidate", candidate.to_string()),
                (
                    "secondary_url",
                    secondary.map(ToString::to_string).unwrap_or_default(),
                ),
                ("scalpel_version", env!("CARGO_PKG_VERSION").to_string()),
            ];
            Recorder::with_store(settings, path, &meta)?
        }
        None => Recorder::new(settings, None),
    }))
}

fn run_proxy(a: ProxyArgs) -> anyhow::Result<ExitCode> {
    let primary = upstream("primary", &a.primary)?;
    let candidate = upstream("candidate", &a.candidate)?;
    let secondary = a
        .compare
        .secondary
        .as_deref()
        .map(|s| upstream("secondary", s))
        .transpose()?;
    let sampler = Sampler::new(a.sample).context("--sample")?;
    let sample_key = a.sample_key.as_deref().map(SampleKey::parse).transpose()?;
    if a.queue == 0 || a.mirror_concurrency == 0 {
        bail!("--queue and --mirror-concurrency must be at least 1");
    }
    if a.mirror_budget < a.max_response_body {
        // Allowed (a tight memory limit may matter more), but said once: answers larger
        // than the budget can never be compared.
        eprintln!(
            "scalpel: warning: --mirror-budget {} is below --max-response-body {}: larger answers are skipped as over_budget",
            scalpel_units::format_size(a.mirror_budget as u64),
            scalpel_units::format_size(a.max_response_body as u64)
        );
    }
    let cfg = ProxyConfig {
        listen: a.listen,
        primary: primary.clone(),
        candidate: candidate.clone(),
        secondary: secondary.clone(),
        admin: a.admin,
        sampler,
        sample_key,
        mirror_unsafe: a.mirror_unsafe,
        queue: a.queue,
        mirror_concurrency: a.mirror_concurrency,
        mirror_timeout: a.mirror_timeout,
        primary_timeout: a.primary_timeout,
        max_request_body: a.max_body,
        max_response_body: a.max_response_body,
        mirror_budget: a.mirror_budget as u64,
        mirror_max_age: a.mirror_max_age,
        client_timeout: a.client_timeout,
        flush_interval: a.flush_interval,
    };
    let recorder = recorder(
        &a.compare,
        "proxy",
        &primary,
        &candidate,
        secondary.as_ref(),
    )?;
    let rt = runtime()?;
    let stats = rt.block_on(async {
        let proxy = Proxy::bind(cfg, recorder.clone()).await?;
        let admin = proxy
            .admin_addr()
            .map_or(String::new(), |a| format!(", admin on http://{a}/metrics"));
        eprintln!(
            "scalpel shadow proxy: listening on {}{admin}; primary {primary}, candidate {candidate}",
            proxy.local_addr()
        );
        anyhow::Ok(proxy.run(shutdown_signal()).await?)
    })?;
    // Connections still streaming past the shutdown time end here, not later.
    rt.shutdown_background();
    let summary = recorder.summary();
    print!("{}", table(&summary));
    println!(
        "{} requests proxied, {} chosen for comparison; stopped in {:.1} s",
        stats.requests,
        stats.chosen,
        stats.shutdown.as_secs_f64()
    );
    Ok(
        if store_lost_writes(&recorder, a.compare.store.as_deref()) {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// Says so (one line on stderr) when the store's final counters did not reach the disk;
/// the run's figures on the terminal are then the only complete ones.
fn store_lost_writes(recorder: &Recorder, store: Option<&Path>) -> bool {
    let Some(path) = store else { return false };
    if recorder.store_complete() {
        return false;
    }
    eprintln!(
        "scalpel: store {}: the final counters could not be written ({} writes failed, {} dropped); the file is incomplete",
        path.display(),
        recorder.store_failed(),
        recorder.store_dropped()
    );
    true
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

fn run_replay(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let primary = upstream("primary", &a.primary)?;
    let candidate = upstream("candidate", &a.candidate)?;
    let secondary = a
        .compare
        .secondary
        .as_deref()
        .map(|s| upstream("secondary", s))
        .transpose()?;
    check_min("min-consistency", a.min_consistency)?;
    let template = RequestTemplate::parse(&a.method, &a.template, &a.header, a.body.as_deref())?;
    let data = a.data.as_deref().map(DataSet::from_path).transpose()?;
    let order = a
        .shuffle
        .map_or(Order::Sequential, |seed| Order::Shuffled { seed });
    let set = Arc::new(RequestSet::new(template, data, order)?);
    if a.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let cfg = ReplayConfig {
        primary: primary.clone(),
        candidate: candidate.clone(),
        secondary: secondary.clone(),
        concurrency: a.concurrency,
        timeout: a.timeout,
        max_body: a.max_body,
    };
    // Create output files' folders early: a typo should fail before the run, not after.
    for p in [&a.json, &a.html].into_iter().flatten() {
        check_writable(p)?;
    }
    let recorder = recorder(
        &a.compare,
        "replay",
        &primary,
        &candidate,
        secondary.as_ref(),
    )?;
    let rt = runtime()?;
    let progress = Arc::new(ReplayProgress::default());
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stats = rt.block_on(async {
        let ticker = tokio::spawn(show_progress(progress.clone(), recorder.clone()));
        // SIGINT/SIGTERM: stop sending, count what was in flight, and still print and
        // write everything (the counters of a half-done run are evidence too).
        let stopper = {
            let (progress, interrupted) = (progress.clone(), interrupted.clone());
            tokio::spawn(async move {
                shutdown_signal().await;
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                progress.stop();
            })
        };
        let stats = scalpel_shadow::replay(set, cfg, recorder.clone(), progress.clone()).await;
        ticker.abort();
        stopper.abort();
        stats
    });
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
    recorder.flush_and_sync();
    let summary = recorder.summary();
    print!("{}", table(&summary));
    println!(
        "{} requests in {:.2} s ({:.0} pairs/s)",
        stats.requests,
        stats.elapsed.as_secs_f64(),
        stats.pairs_per_second()
    );
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    if interrupted {
        println!(
            "INTERRUPTED: {} of {} requests not sent",
            stats.not_sent,
            stats.requests + stats.not_sent
        );
    }
    let meta = BTreeMap::from([
        ("mode".to_string(), "replay".to_string()),
        ("primary".to_string(), primary.to_string()),
        ("candidate".to_string(), candidate.to_string()),
        (
            "template".to_string(),
            format!("{} {}", a.method, a.template),
        ),
    ]);
    write_outputs(
        &summary,
        &recorder.samples(),
        &meta,
        a.json.as_deref(),
        a.html.as_deref(),
    )?;
    let lost = store_lost_writes(&recorder, a.compare.store.as_deref());
    if interrupted {
        // 128 + SIGINT, like any interrupted command; a partial run is never a pass.
        return Ok(ExitCode::from(130));
    }
    let code = verdict(&summary, a.min_consistency);
    if lost {
        // The check may have passed, but its evidence on disk is not whole.
        println!("FAIL: the store is incomplete");
        return Ok(ExitCode::from(1));
    }
    Ok(code)
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

fn run_report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    check_min("min-consistency", a.min_consistency)?;
    let run: StoredRun = scalpel_shadow::Store::read(&a.store)?;
    let summary = run.summary(None);
    print!("{}", table(&summary));
    write_outputs(
        &summary,
        run.samples(),
        run.meta(),
        a.json.as_deref(),
        a.html.as_deref(),
    )?;
    Ok(verdict(&summary, a.min_consistency))
}

fn check_min(flag: &str, v: f64) -> anyhow::Result<()> {
    if !(0.0..=100.0).contains(&v) {
        bail!("--{flag} {v}: expected a percentage from 0 to 100");
    }
    Ok(())
}

fn check_writable(p: &Path) -> anyhow::Result<()> {
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!(
            "cannot write {}: no such directory {}",
            p.display(),
            dir.display()
        );
    }
    Ok(())
}

fn write_outputs(
    summary: &Summary,
    samples: &[Sample],
    meta: &BTreeMap<String, String>,
    json: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(p) = json {
        let mut v = serde_json::to_value(summary)?;
        v["samples"] = serde_json::to_value(samples)?;
        std::fs::write(p, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = html {
        std::fs::write(p, scalpel_shadow::render_html(summary, samples, meta))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// 0 when every pair compared matched (or at least `min` percent did) and no side failed
/// (a failed secondary included: the noise figures would be missing).
fn verdict(s: &Summary, min: f64) -> ExitCode {
    let side_failures: u64 = s.errors_by_kind.values().sum();
    let pass = s.compared > 0 && side_failures == 0 && s.consistency_percent >= min;
    let why = if s.compared == 0 {
        "nothing was compared".to_string()
    } else if s.errors > 0 {
        format!("{} requests where a side failed", s.errors)
    } else if side_failures > 0 {
        format!("{side_failures} requests where the secondary failed")
    } else {
        let mut why = format!("{}% consistent, need {min}%", floor2(s.consistency_percent));
        if s.not_compared > 0 {
            let _ = write!(
                why,
                " (over the {} compared; {} chosen requests were not compared)",
                s.compared, s.not_compared
            );
        }
        why
    };
    if pass {
        println!("PASS: {why}");
        ExitCode::SUCCESS
    } else {
        println!("FAIL: {why}");
        ExitCode::from(1)
    }
}

fn floor2(v: f64) -> String {
    format!("{:.2}", (v * 100.0).floor() / 100.0)
}

/// The terminal summary: endpoints, then the fields that differ, then noise.
fn table(s: &Summary) -> String {
    let mut o = String::new();
    let w = s
        .endpoints
        .iter()
        .map(|e| e.endpoint.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        o,
        "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
        "endpoint", "compared", "matched", "mismatched", "errors", "skipped", "consistency"
    );
    // Consistency is a range wherever chosen requests were not compared (see
    // `consistency_text`): never 100 % over requests nobody compared.
    for e in &s.endpoints {
        let _ = writeln!(
            o,
            "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
            e.endpoint,
            e.compared,
            e.matched,
            e.mismatched,
            e.errors,
            "",
            e.consistency_text()
        );
    }
    let _ = writeln!(
        o,
        "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
        "TOTAL",
        s.compared,
        s.matched,
        s.mismatched,
        s.errors,
        s.skipped,
        s.consistency_text()
    );
    if s.not_compared > 0 {
        let _ = writeln!(
            o,
            "not compared: {} of {} chosen ({:.2}% compared)",
            s.not_compared,
            s.compared + s.not_compared,
            s.coverage_percent
        );
    }
    if s.skipped > 0 {
        let reasons: Vec<String> = s
            .skipped_by_reason
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(o, "skipped: {} ({})", s.skipped, reasons.join(", "));
    }
    if !s.errors_by_kind.is_empty() {
        let kinds: Vec<String> = s
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(o, "failed sides: {}", kinds.join(", "));
    }
    let fields: Vec<_> = s
        .endpoints
        .iter()
        .flat_map(|e| e.fields.iter().map(move |f| (&e.endpoint, f)))
        .collect();
    if !fields.is_empty() {
        let _ = writeln!(o, "\nfields that differ:");
        for (ep, f) in fields {
            let _ = writeln!(o, "  {ep}  {}  {}  {}", f.path, f.kind, f.count);
        }
    }
    if !s.noise.is_empty() {
        let _ = writeln!(
            o,
            "\nnoise (also differs between primary and secondary; not counted):"
        );
        for f in &s.noise {
            let _ = writeln!(
                o,
                "  {}  {}  {}  candidate {} / secondary {}",
                f.endpoint, f.path, f.kind, f.count, f.noise_count
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_use_the_shared_grammar_and_refuse_zero_and_overflow() {
        assert_eq!(
            positive_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(positive_duration("1m").unwrap(), Duration::from_secs(60));
        for bad in [
            "0s",
            "2",
            "5x",
            "99999999999999999999999",
            "99999999999999999999999s",
            "-1s",
            "NaNs",
        ] {
            assert!(positive_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(size("1MiB").unwrap(), 1 << 20);
        assert_eq!(size("64kb").unwrap(), 64_000);
        assert!(size("x").is_err());
        assert!(size("99999999999999999999999").is_err());
    }
}

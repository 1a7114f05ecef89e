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
use scalpel_http::{HttpVersion, IpNet, PeerOptions, Resolve, ServerTls};
use scalpel_requests::{
    CaptureOptions, CaptureSink, CaptureStats, CaptureWriter, DataSet, Order, RecordedSource,
    RequestSet, RequestTemplate,
};
use scalpel_shadow::{
    CompareSettings, Proxy, ProxyConfig, Reach, Recorder, Redactor, Replay, ReplayConfig,
    ReplayProgress, ReplaySource, ReplayStats, Sample, Schedule, StoredRun, Summary, Upstream,
};

use crate::recorded::RecordedFlags;

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
    /// Send every request of a data set or of recorded traffic to primary and candidate and compare each pair.
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

/// How upstreams are reached: TLS trust, address overrides, HTTP/2. The plain flags apply
/// to every upstream (as `scalpel load`'s do to its targets); the `--primary-…`,
/// `--candidate-…` and `--secondary-…` forms to one, and win over the plain ones.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Upstream TLS and HTTP/2 (plain flags: every upstream)")]
struct UpstreamArgs {
    /// Trust the CA certificates in this PEM file (one or several) instead of the system's store.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Do not verify certificates: encrypted, but the server unauthenticated (said in the report).
    #[arg(long)]
    insecure: bool,
    /// Connect to ADDR when an upstream is HOST:PORT (as curl's); SNI, certificate name and Host stay HOST. Repeatable.
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    resolve: Vec<String>,
    /// Speak HTTP/2: by ALPN over https (a server that refuses it is an error), prior knowledge (h2c) over http.
    #[arg(long)]
    http2: bool,
    /// --cacert for the primary only.
    #[arg(long = "primary-cacert", value_name = "FILE")]
    primary_cacert: Option<PathBuf>,
    /// --insecure for the primary only.
    #[arg(long = "primary-insecure")]
    primary_insecure: bool,
    /// --resolve for the primary only. Repeatable.
    #[arg(long = "primary-resolve", value_name = "HOST:PORT:ADDR")]
    primary_resolve: Vec<String>,
    /// --http2 for the primary only.
    #[arg(long = "primary-http2")]
    primary_http2: bool,
    /// --cacert for the candidate only.
    #[arg(long = "candidate-cacert", value_name = "FILE")]
    candidate_cacert: Option<PathBuf>,
    /// --insecure for the candidate only.
    #[arg(long = "candidate-insecure")]
    candidate_insecure: bool,
    /// --resolve for the candidate only. Repeatable.
    #[arg(long = "candidate-resolve", value_name = "HOST:PORT:ADDR")]
    candidate_resolve: Vec<String>,
    /// --http2 for the candidate only.
    #[arg(long = "candidate-http2")]
    candidate_http2: bool,
    /// --cacert for the secondary only.
    #[arg(long = "secondary-cacert", value_name = "FILE")]
    secondary_cacert: Option<PathBuf>,
    /// --insecure for the secondary only.
    #[arg(long = "secondary-insecure")]
    secondary_insecure: bool,
    /// --resolve for the secondary only. Repeatable.
    #[arg(long = "secondary-resolve", value_name = "HOST:PORT:ADDR")]
    secondary_resolve: Vec<String>,
    /// --http2 for the secondary only.
    #[arg(long = "secondary-http2")]
    secondary_http2: bool,
}

impl UpstreamArgs {
    /// The settings of one upstream: its own flags, then the plain ones.
    fn options(&self, role: &str) -> anyhow::Result<PeerOptions> {
        let (cacert, insecure, resolve, http2) = match role {
            "primary" => (
                &self.primary_cacert,
                self.primary_insecure,
                &self.primary_resolve,
                self.primary_http2,
            ),
            "candidate" => (
                &self.candidate_cacert,
                self.candidate_insecure,
                &self.candidate_resolve,
                self.candidate_http2,
            ),
            _ => (
                &self.secondary_cacert,
                self.secondary_insecure,
                &self.secondary_resolve,
                self.secondary_http2,
            ),
        };
        let mut o = PeerOptions::default();
        o.ca_file = cacert.clone().or_else(|| self.cacert.clone());
        o.insecure = insecure || self.insecure;
        o.version = if http2 || self.http2 {
            HttpVersion::Http2
        } else {
            HttpVersion::Http1
        };
        // The upstream's own entries first: the first match wins.
        for r in resolve.iter().chain(&self.resolve) {
            o.resolve.push(Resolve::parse(r)?);
        }
        Ok(o)
    }

    /// The upstream `url` with its settings (`role`: `primary`, `candidate`, `secondary`).
    fn upstream(&self, role: &str, url: &str) -> anyhow::Result<Upstream> {
        let up = Upstream::parse(url).with_context(|| format!("--{role}"))?;
        Ok(up.with_options(self.options(role)?))
    }

    /// The primary, the candidate and the optional secondary, each with its own
    /// options; an error names the flag.
    fn sides(
        &self,
        primary: &str,
        candidate: &str,
        secondary: Option<&str>,
    ) -> anyhow::Result<(Upstream, Upstream, Option<Upstream>)> {
        Ok((
            self.upstream("primary", primary)?,
            self.upstream("candidate", candidate)?,
            secondary
                .map(|s| self.upstream("secondary", s))
                .transpose()?,
        ))
    }
}

/// Says what the check of each upstream found: one line each on stderr, a warning for
/// one that did not answer (the run goes on; its requests fail and are counted).
fn show_upstreams(tool: &str, list: &[(&'static str, String, Reach)]) {
    for (role, url, reach) in list {
        match reach {
            Reach::Ok(proto) => eprintln!("{tool}: {role} {url}: {proto}"),
            Reach::Unreachable(why) => eprintln!(
                "scalpel: warning: {role} {url} did not answer the check ({why}); its requests fail until it does, counted by kind"
            ),
        }
    }
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
    /// Serve the live page (`/`), Prometheus `/metrics` and `/summary.json` here.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// A name (or name:port) clients use for the admin address besides its IP addresses and localhost; other Host names get 421. Repeatable.
    #[arg(long = "admin-host", value_name = "NAME", requires = "admin")]
    admin_hosts: Vec<String>,
    /// A proxy in front (ADDR or ADDR/BITS) whose X-Forwarded-*, Forwarded and X-Real-IP headers reach the upstreams; every other client's are removed. Repeatable.
    #[arg(long = "trusted-proxy", value_name = "RANGE", value_parser = ip_range)]
    trusted_proxies: Vec<IpNet>,
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
    /// Listen with TLS: this certificate (PEM, the server's first, then intermediates); ALPN h2 and http/1.1.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Write each sampled request (redacted with the --redact rules) to this capture file, which `replay --from` reads.
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// Rotate the capture file before it would grow past this size (FILE.1, FILE.2, …).
    #[arg(long = "capture-max-size", value_name = "SIZE", requires = "capture", value_parser = size)]
    capture_max_size: Option<usize>,
    /// Rotated capture files kept beside the current one.
    #[arg(
        long = "capture-keep",
        value_name = "N",
        default_value_t = 1,
        requires = "capture"
    )]
    capture_keep: u32,
    #[command(flatten)]
    compare: Box<CompareArgs>,
    #[command(flatten)]
    upstreams: Box<UpstreamArgs>,
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
    compare: Box<CompareArgs>,
    #[command(flatten)]
    upstreams: Box<UpstreamArgs>,
}

/// Requests in flight when `-c` is not given: a template replay's workers, and the cap of
/// a recorded schedule (requests are sent at their times; this only bounds a slow side).
const DEFAULT_CONCURRENCY: usize = 16;
const DEFAULT_SCHEDULE_CAP: usize = 256;

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

fn settings(c: &CompareArgs, method_routes: bool) -> anyhow::Result<CompareSettings> {
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
    .with_max_decoded_body(c.max_decoded_body)
    .with_method_routes(method_routes))
}

fn recorder(
    c: &CompareArgs,
    mode: &str,
    primary: &Upstream,
    candidate: &Upstream,
    secondary: Option<&Upstream>,
    method_routes: bool,
) -> anyhow::Result<Arc<Recorder>> {
    let settings = settings(c, method_routes)?;
    Ok(Arc::new(match &c.store {
        Some(path) => {
            let meta = [
                ("mode", mode.to_string()),
                ("primary", primary.describe()),
                ("candidate", candidate.describe()),
                (
                    "secondary_url",
                    secondary.map(Upstream::describe).unwrap_or_default(),
                ),
                ("scalpel_version", env!("CARGO_PKG_VERSION").to_string()),
            ];
            Recorder::with_store(settings, path, &meta)?
        }
        None => Recorder::new(settings, None),
    }))
}

fn run_proxy(a: ProxyArgs) -> anyhow::Result<ExitCode> {
    let (primary, candidate, secondary) =
        a.upstreams
            .sides(&a.primary, &a.candidate, a.compare.secondary.as_deref())?;
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
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_pem_files(cert, key, true)?),
        _ => None,
    };
    let capture = a
        .capture
        .as_deref()
        .map(|p| open_capture(p, &a))
        .transpose()?;
    let cfg = ProxyConfig {
        listen: a.listen,
        primary: primary.clone(),
        candidate: candidate.clone(),
        secondary: secondary.clone(),
        admin: a.admin,
        admin_hosts: a.admin_hosts.clone(),
        trusted_proxies: a.trusted_proxies.clone(),
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
        tls,
    };
    let recorder = recorder(
        &a.compare,
        "proxy",
        &primary,
        &candidate,
        secondary.as_ref(),
        false,
    )?;
    let rt = runtime()?;
    let tls_note = if cfg.tls.is_some() {
        " (TLS: h2, http/1.1)"
    } else {
        ""
    };
    let stats = rt.block_on(async {
        let mut proxy = Proxy::bind(cfg, recorder.clone()).await?;
        show_upstreams("scalpel shadow proxy", proxy.upstreams());
        if let Some(sink) = capture {
            proxy = proxy.with_capture(sink);
        }
        let admin = proxy
            .admin_addr()
            .map_or(String::new(), |a| format!(", admin on http://{a}/metrics"));
        eprintln!(
            "scalpel shadow proxy: listening on {}{tls_note}{admin}; primary {primary}, candidate {candidate}",
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
    if let (Some(k), Some(path)) = (stats.capture, &a.capture) {
        println!("{}", capture_line(path, &k));
        let (bodies, queries) = stats.capture_withheld;
        if bodies + queries > 0 {
            println!(
                "capture: --redact withheld {bodies} bodies and {queries} queries it could not read (written as [REDACTED])"
            );
        }
    }
    Ok(
        if store_lost_writes(&recorder, a.compare.store.as_deref()) {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// `--trusted-proxy`: an address or a range.
fn ip_range(text: &str) -> Result<IpNet, String> {
    IpNet::parse(text).ok_or_else(|| format!("{text:?} is not an address or ADDR/BITS"))
}

/// Opens the capture file (created, or appended to) and its writer thread.
fn open_capture(path: &Path, a: &ProxyArgs) -> anyhow::Result<CaptureSink> {
    let options = CaptureOptions {
        max_size: a.capture_max_size.map(|n| n as u64),
        keep: a.capture_keep,
    };
    let writer = CaptureWriter::open(path, options)?;
    // The writer's queue: as many records as the mirror queue, at most 64 MiB of them.
    Ok(CaptureSink::start(writer, a.queue, CAPTURE_QUEUE_BYTES)?)
}

/// Bytes of records waiting for the capture writer before new ones are dropped.
const CAPTURE_QUEUE_BYTES: u64 = 64 << 20;

fn capture_line(path: &Path, k: &CaptureStats) -> String {
    let mut line = format!(
        "capture: {} requests written to {} ({} bytes, {} rotations)",
        k.written,
        path.display(),
        k.bytes_written,
        k.rotations
    );
    let dropped = k.dropped_queue_full + k.dropped_too_large + k.write_errors;
    if dropped > 0 {
        let _ = write!(
            line,
            "; not written: {} (queue full {}, too large {}, write errors {})",
            dropped, k.dropped_queue_full, k.dropped_too_large, k.write_errors
        );
    }
    line
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

/// What a replay sends: a template over data, or recorded traffic and its schedule.
struct Plan {
    source: ReplaySource,
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
        source: ReplaySource::Set(set),
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
    if let Some(x) = a.speed
        && !(x.is_finite() && x > 0.0)
    {
        bail!("--speed {x}: expected a number above 0 (2 replays twice as fast)");
    }
    // Opening reads the file once, counts every record, and fails when none is usable.
    let source = RecordedSource::open(path, options)?;
    let summary = source.summary().clone();
    let (schedule, concurrency) = match (a.speed, a.concurrency) {
        (None, Some(c)) => (Schedule::Pool, c),
        (speed, c) => (
            Schedule::Recorded {
                speed: speed.unwrap_or(1.0),
            },
            c.unwrap_or(DEFAULT_SCHEDULE_CAP),
        ),
    };
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
        source: ReplaySource::Recorded { source, schedule },
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

fn run_replay(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (primary, candidate, secondary) =
        a.upstreams
            .sides(&a.primary, &a.candidate, a.compare.secondary.as_deref())?;
    check_min("min-consistency", a.min_consistency)?;
    let plan = match &a.from {
        Some(path) => recorded_plan(&a, path)?,
        None => template_plan(&a)?,
    };
    if plan.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let cfg = ReplayConfig {
        primary: primary.clone(),
        candidate: candidate.clone(),
        secondary: secondary.clone(),
        concurrency: plan.concurrency,
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
        a.from.is_some(),
    )?;
    let rt = runtime()?;
    let progress = Arc::new(ReplayProgress::default());
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (stats, upstream_lines) = rt.block_on(async {
        let replay = Replay::connect(cfg).await?;
        show_upstreams("scalpel shadow replay", replay.upstreams());
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
        let stats = replay
            .run(plan.source, recorder.clone(), progress.clone())
            .await;
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
    recorder.flush_and_sync();
    // A recorded file that could not be read on: what was sent is still reported.
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
    let summary = recorder.summary();
    for line in &plan.lines {
        println!("{line}");
    }
    println!("upstreams: {}", upstream_lines.join(", "));
    print!("{}", table(&summary));
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
    let interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    if interrupted {
        println!(
            "INTERRUPTED: {} of {} requests not sent",
            stats.not_sent,
            stats.requests + stats.not_sent
        );
    }
    let mut meta = BTreeMap::from([
        ("mode".to_string(), "replay".to_string()),
        ("primary".to_string(), primary.describe()),
        ("candidate".to_string(), candidate.describe()),
        ("template".to_string(), plan.describe.clone()),
    ]);
    if let Some(s) = &secondary {
        meta.insert("secondary".to_string(), s.describe());
    }
    let extra = serde_json::json!({
        "source": plan.json,
        "upstreams": upstream_lines,
        "replay": {
            "requests": stats.requests,
            "not_sent": stats.not_sent,
            "elapsed_seconds": stats.elapsed.as_secs_f64(),
            "waited_for_slot": stats.waited_for_slot,
            "max_lag_seconds": stats.max_lag.as_secs_f64(),
        },
    });
    write_outputs(
        &summary,
        &recorder.samples(),
        &meta,
        Some(&extra),
        a.json.as_deref(),
        a.html.as_deref(),
    )?;
    let lost = store_lost_writes(&recorder, a.compare.store.as_deref());
    if let Some(e) = read_error {
        // The file changed under the replay: the counts above are real but partial.
        return Err(e).context("the replay stopped early");
    }
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
        None,
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
    extra: Option<&serde_json::Value>,
    json: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(p) = json {
        let mut v = serde_json::to_value(summary)?;
        v["samples"] = serde_json::to_value(samples)?;
        if let Some(serde_json::Value::Object(more)) = extra {
            for (k, x) in more {
                v[k] = x.clone();
            }
        }
        write_private(p, (serde_json::to_string_pretty(&v)? + "\n").as_bytes())?;
    }
    if let Some(p) = html {
        write_private(
            p,
            scalpel_shadow::render_html(summary, samples, meta).as_bytes(),
        )?;
    }
    Ok(())
}

/// Writes a report that holds samples of traffic: created readable by its owner only.
fn write_private(p: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    scalpel_requests::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
        .and_then(|mut f| f.write_all(bytes))
        .with_context(|| format!("cannot write {}", p.display()))
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
    if !s.redaction_withheld.is_empty() {
        let parts: Vec<String> = s
            .redaction_withheld
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            o,
            "redaction withheld (unreadable, stored as [REDACTED]): {}",
            parts.join(", ")
        );
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

//! `scalpel shadow proxy`: flags → [`ProxyConfig`], run until a signal, print the table.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use scalpel_diff::{SampleKey, Sampler};
use scalpel_http::{IpNet, ServerTls};
use scalpel_requests::{CaptureOptions, CaptureSink, CaptureStats, CaptureWriter};
use scalpel_shadow::{Proxy, ProxyConfig, ProxyStats, Recorder, text_table};

use super::{
    CompareArgs, UpstreamArgs, positive_duration, recorder, runtime, show_upstreams,
    shutdown_signal, size, store_lost_writes,
};

/// Arguments of `scalpel shadow proxy`.
#[derive(Debug, clap::Args)]
pub(super) struct ProxyArgs {
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

/// Runs `scalpel shadow proxy` until SIGINT or SIGTERM, then prints what was compared.
pub(super) fn run(a: ProxyArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&a)?;
    if a.mirror_budget < a.max_response_body {
        // Allowed (a tight memory limit may matter more), but said once: answers larger
        // than the budget can never be compared.
        eprintln!(
            "scalpel: warning: --mirror-budget {} is below --max-response-body {}: larger answers are skipped as over_budget",
            scalpel_units::format_size(a.mirror_budget as u64),
            scalpel_units::format_size(a.max_response_body as u64)
        );
    }
    let capture = a
        .capture
        .as_deref()
        .map(|p| open_capture(p, &a))
        .transpose()?;
    let recorder = recorder(
        &a.compare,
        "proxy",
        &cfg.primary,
        &cfg.candidate,
        cfg.secondary.as_ref(),
        false,
    )?;
    let stats = serve(cfg, recorder.clone(), capture)?;
    print!("{}", text_table(&recorder.summary()));
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

/// The flags as the proxy's config, checked (each refusal names its flag) before any file
/// is opened.
fn config(a: &ProxyArgs) -> anyhow::Result<ProxyConfig> {
    let (primary, candidate, secondary) =
        a.upstreams
            .sides(&a.primary, &a.candidate, a.compare.secondary.as_deref())?;
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_pem_files(cert, key, true)?),
        _ => None,
    };
    let cfg = ProxyConfig {
        listen: a.listen,
        primary,
        candidate,
        secondary,
        admin: a.admin,
        admin_hosts: a.admin_hosts.clone(),
        trusted_proxies: a.trusted_proxies.clone(),
        sampler: Sampler::new(a.sample).context("--sample")?,
        sample_key: a.sample_key.as_deref().map(SampleKey::parse).transpose()?,
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
    cfg.validate()?;
    Ok(cfg)
}

/// Binds, says where it listens, and proxies until a signal; the runtime is shut down
/// without waiting for connections still streaming.
fn serve(
    cfg: ProxyConfig,
    recorder: Arc<Recorder>,
    capture: Option<CaptureSink>,
) -> anyhow::Result<ProxyStats> {
    let rt = runtime()?;
    let tls_note = if cfg.tls.is_some() {
        " (TLS: h2, http/1.1)"
    } else {
        ""
    };
    let (primary, candidate) = (cfg.primary.clone(), cfg.candidate.clone());
    let stats = rt.block_on(async {
        let mut proxy = Proxy::bind(cfg, recorder).await?;
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
    Ok(stats)
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

/// `--trusted-proxy`: an address or a range.
fn ip_range(text: &str) -> Result<IpNet, String> {
    IpNet::parse(text).ok_or_else(|| format!("{text:?} is not an address or ADDR/BITS"))
}

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

//! `scalpel shadow`: mirror live traffic (`proxy`), replay a data set (`replay`), or
//! rebuild a report from a store (`report`).
//!
//! Flags map to `scalpel-shadow`'s configs, which check their own values (each refusal
//! naming its flag); the verdict, the terminal table and the HTML page are the library's
//! (`Verdict`, `text_table`, `render_html`). This module prints them and maps the verdict
//! to the exit code: 0 pass, 1 fail (or an incomplete store), 2 bad usage.

mod proxy;
mod replay;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use scalpel_diff::{Comparer, NoiseRule, RouteNormalizer};
use scalpel_http::{HttpVersion, PeerOptions, Resolve};
use scalpel_shadow::{
    CompareSettings, MinConsistency, Reach, Recorder, Redactor, Sample, StoredRun, Summary,
    Upstream, Verdict, text_table,
};

use proxy::ProxyArgs;
use replay::ReplayArgs;

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
struct ReportArgs {
    /// The store written by `proxy` or `replay`.
    #[arg(long, value_name = "FILE")]
    store: PathBuf,
    #[command(flatten)]
    outputs: OutputArgs,
}

/// What replay and report write, and the bar their verdict is judged by.
#[derive(Debug, clap::Args)]
struct OutputArgs {
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
        ShadowCommand::Proxy(a) => proxy::run(a),
        ShadowCommand::Replay(a) => replay::run(a),
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

fn run_report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let min = MinConsistency::new(a.outputs.min_consistency)?;
    let run: StoredRun = scalpel_shadow::Store::read(&a.store)?;
    let summary = run.summary(None);
    print!("{}", text_table(&summary));
    write_outputs(&summary, run.samples(), run.meta(), None, &a.outputs)?;
    Ok(print_verdict(&summary, min))
}

/// `PASS: …` or `FAIL: …` on stdout; exit 0 or 1.
fn print_verdict(summary: &Summary, min: MinConsistency) -> ExitCode {
    let verdict = Verdict::judge(summary, min);
    println!("{verdict}");
    if verdict.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
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

/// `--json` (the summary, the samples and `extra`) and `--html`.
fn write_outputs(
    summary: &Summary,
    samples: &[Sample],
    meta: &BTreeMap<String, String>,
    extra: Option<&serde_json::Value>,
    outputs: &OutputArgs,
) -> anyhow::Result<()> {
    if let Some(p) = &outputs.json {
        let mut v = serde_json::to_value(summary)?;
        v["samples"] = serde_json::to_value(samples)?;
        if let Some(serde_json::Value::Object(more)) = extra {
            for (k, x) in more {
                v[k] = x.clone();
            }
        }
        write_private(p, (serde_json::to_string_pretty(&v)? + "\n").as_bytes())?;
    }
    if let Some(p) = &outputs.html {
        write_private(
            p,
            scalpel_shadow::render_html(summary, samples, meta).as_bytes(),
        )?;
    }
    Ok(())
}

/// Writes a report that holds samples of traffic: created readable by its owner only.
fn write_private(p: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    scalpel_requests::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
        .and_then(|mut f| f.write_all(bytes))
        .with_context(|| format!("cannot write {}", p.display()))
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

//! Flags → a [`Plan`], its [`Target`]s and what the dashboard watches. Values are checked
//! where they belong: [`Plan::validate`] holds every rule of a plan (rates, counts,
//! shards, the common clock), each naming its flag; this module refuses only what needs
//! the flags themselves — a flag given where it has no effect (`--step-duration` without
//! `--ramp`, `--streams` without `--http2`), text that does not parse — and reads the files
//! the requests are made of.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use scalpel_load::shard::{Fingerprint, JOB_INDEX_VAR, check_run_id};
use scalpel_load::{
    HttpVersion, Model, PeerOptions, Plan, RequestSource, Resolve, Shard, Slo, StartAt, StepLimit,
    Target,
};
use scalpel_procstat::TreeSampler;
use scalpel_requests::{DataSet, Mix, Order, RecordedSource, RequestSet, RequestTemplate};

use super::args::LoadArgs;
use super::watch::{ProcWatch, watch_for};
use crate::dashboard::DashTarget;
use crate::recorded::RecordedFlags;
use crate::sources::{MixSource, RecordedRequests, TemplateSource};

/// What the flags make: the plan, the targets, what the dashboard watches, and, with
/// --from, the recording (for the report).
pub(super) struct Built {
    pub(super) plan: Plan,
    pub(super) targets: Vec<Target>,
    pub(super) watched: Vec<DashTarget>,
    pub(super) recorded: Option<Arc<RecordedRequests>>,
}

/// Turns the raw flags into the plan, the targets and the rest; every error is one line.
/// `scalpel_load::run` probes every target with a connection (no request) before any
/// load.
pub(super) fn build(args: &LoadArgs) -> anyhow::Result<Built> {
    let (bases, template) = bases_and_path(args)?;
    let requests = requests(args, &template)?;
    // A recording on its own schedule; with --rate, --ramp or -c its records are a pool.
    let pool = args.rate.is_some() || args.ramp.is_some() || args.connections.is_some();
    let replay = requests.recorded.as_deref().filter(|_| !pool);
    let model = model(args, replay.is_some())?;
    let limit = step_limit(args, &model, replay)?;
    let plan = plan(args, model, limit, requests.label, replay.is_some())?;
    if let Some(slo) = &plan.slo {
        check_slo_endpoints(slo, args.mix.as_deref(), requests.mix.as_deref())?;
    }
    let (targets, watched) = targets(args, &bases, &requests.source)?;
    plan.validate(&targets)?;
    Ok(Built {
        plan,
        targets,
        watched,
        recorded: requests.recorded,
    })
}

/// Descriptors a run needs beside its connections: stdio, each thread's epoll, eventfd and
/// timerfd, /proc files of the samplers, the result files.
const SPARE_FDS: u64 = 64;

/// Raises the soft limit on open files up to the hard one, so the connections asked for
/// fit; refuses `-c` that still does not (the generator's own `EMFILE` would otherwise
/// show as the target's connect errors), and lowers a default `--max-in-flight` to fit.
pub(super) fn fit_descriptors(args: &mut LoadArgs) -> anyhow::Result<()> {
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
    let in_flight = args.max_in_flight();
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

/// Each target's name and base URL, and the path template. A mix or a recording brings
/// its own paths: the URL is then only the base.
fn bases_and_path(args: &LoadArgs) -> anyhow::Result<(Vec<(String, String)>, String)> {
    let whole = args.mix.is_some() || args.from.is_some();
    if args.targets.is_empty() {
        let url = args.url.as_deref().ok_or_else(|| {
            anyhow!("give a URL, e.g. http://127.0.0.1:8080/, or --target NAME=URL")
        })?;
        let (base, path) = split_url(url)?;
        return Ok(if whole {
            (vec![("target".into(), url.into())], "/".into())
        } else {
            (vec![("target".into(), base)], path)
        });
    }
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
    Ok((bases, path))
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

/// What every target is sent: a template over data, a mix, or a recording.
struct Requests {
    source: Arc<dyn RequestSource>,
    /// For the result: `GET /v1/users/{id}`, `mix mix.toml (seed 1): …`, `recorded …`.
    label: String,
    mix: Option<Arc<MixSource>>,
    recorded: Option<Arc<RecordedRequests>>,
}

fn requests(args: &LoadArgs, template: &str) -> anyhow::Result<Requests> {
    if let Some(path) = &args.mix {
        let (mix, label) = mix_source(args, path)?;
        return Ok(Requests {
            source: mix.clone(),
            label,
            mix: Some(mix),
            recorded: None,
        });
    }
    if let Some(path) = &args.from {
        let recorded = Arc::new(recorded_source(args, path)?);
        let label = format!(
            "recorded {} ({})",
            path.display(),
            recorded.source().format()
        );
        return Ok(Requests {
            source: recorded.clone(),
            label,
            mix: None,
            recorded: Some(recorded),
        });
    }
    let (source, label) = template_source(args, template)?;
    Ok(Requests {
        source,
        label,
        mix: None,
        recorded: None,
    })
}

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
fn mix_source(args: &LoadArgs, path: &Path) -> anyhow::Result<(Arc<MixSource>, String)> {
    if !args.methods.is_empty() {
        bail!("-m/--method does not apply to --mix: each [[request]] names its method");
    }
    let mix = Mix::from_path(path, data_set(args)?, order(args)?, args.mix_seed)?;
    let weights: Vec<String> = mix
        .entries()
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
fn recorded_source(args: &LoadArgs, path: &Path) -> anyhow::Result<RecordedRequests> {
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

/// The model the flags ask for: `--rate`, `--ramp`, a recording on its own schedule, or
/// the closed loop. Its numbers are checked by [`Plan::validate`].
fn model(args: &LoadArgs, replay: bool) -> anyhow::Result<Model> {
    if args.speed.is_some() && !replay && args.from.is_some() {
        bail!(
            "--speed is the pace of the recorded schedule; with --rate, --ramp or -c the \
             records are a pool sent at that load's pace"
        );
    }
    Ok(match (args.rate, &args.ramp) {
        (Some(rate), _) => Model::Open { rate },
        (None, Some(ramp)) => {
            let parts: Vec<f64> = ramp
                .split(',')
                .map(|p| p.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| anyhow!("--ramp takes START,STEP,MAX in requests/s, got `{ramp}`"))?;
            let [start, step, max] = parts[..] else {
                bail!("--ramp takes START,STEP,MAX in requests/s, got `{ramp}`");
            };
            Model::Ramp { start, step, max }
        }
        (None, None) if replay => Model::Recorded {
            speed: args.speed.unwrap_or(1.0),
        },
        (None, None) => Model::Closed,
    })
}

/// How long each step lasts: `-n`, `-d`, `--step-duration`, or 10 s; a recording on its
/// own schedule is replayed whole unless cut by `-n` or `-d`.
fn step_limit(
    args: &LoadArgs,
    model: &Model,
    replay: Option<&RecordedRequests>,
) -> anyhow::Result<StepLimit> {
    let is_ramp = matches!(model, Model::Ramp { .. });
    if args.step_duration.is_some() && !is_ramp {
        bail!("--step-duration applies to --ramp; use -d/--duration");
    }
    if is_ramp && args.duration.is_some() {
        bail!("with --ramp, give --step-duration (the length of each step), not -d");
    }
    if let Some(r) = replay {
        return replay_limit(args, r.source(), args.speed.unwrap_or(1.0));
    }
    Ok(match (args.requests, &args.duration, &args.step_duration) {
        (Some(n), _, _) => StepLimit::Requests(n),
        (None, Some(d), _) => StepLimit::Duration(duration_arg("--duration", d)?),
        (None, None, Some(d)) => StepLimit::Duration(duration_arg("--step-duration", d)?),
        (None, None, None) => StepLimit::Duration(Duration::from_secs(10)),
    })
}

/// The limit of a replay on the recorded schedule: the whole recording, its first `-n`
/// requests, or what falls due within `-d`.
fn replay_limit(args: &LoadArgs, source: &RecordedSource, speed: f64) -> anyhow::Result<StepLimit> {
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
        // Beyond the replay's own length, the whole recording (a zero is left for the
        // plan to refuse).
        if d.is_zero() || d.as_secs_f64() < source.summary().span.as_secs_f64() / speed {
            return Ok(StepLimit::Duration(d));
        }
    }
    Ok(StepLimit::Requests(usable))
}

/// The plan: the model and limit, and the rest of the flags mapped one to one.
fn plan(
    args: &LoadArgs,
    model: Model,
    limit: StepLimit,
    request_label: String,
    replay: bool,
) -> anyhow::Result<Plan> {
    let slo = args
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(|e| anyhow!("--slo: {e}"))?;
    let (shard, start_at) = shard_and_start(args)?;
    Ok(Plan {
        model,
        limit,
        connections: args.connections(),
        max_in_flight: args.max_in_flight(),
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32)),
        connect_timeout: duration_arg("--connect-timeout", &args.connect_timeout)?,
        timeout: duration_arg("--timeout", &args.timeout)?,
        slo,
        // Several targets alternate twice by default; a recording is replayed whole.
        rounds: args.rounds.unwrap_or(if args.targets.len() > 1 && !replay {
            2
        } else {
            1
        }),
        request_label,
        shard,
        start_at,
    })
}

/// `--shard` (with the index from the environment for `auto/N`), `--start-at` and
/// `--run-id`, and the flags each needs beside it. How the totals split over the shards
/// is the plan's to check.
fn shard_and_start(args: &LoadArgs) -> anyhow::Result<(Shard, Option<StartAt>)> {
    let start_at = args.start_at.as_deref().map(StartAt::parse).transpose()?;
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
    Ok((shard, start_at))
}

/// What shapes the traffic beside the plan, for a shard's identity: the URL, targets,
/// templates, and the files the requests are made of. A mix and body or data files are
/// small: their bytes. A recording may be gigabytes: what it was counted to hold (size,
/// records, usable, skips, span) and how it is read.
pub(super) fn traffic_fingerprint(
    args: &LoadArgs,
    recorded: Option<&RecordedSource>,
) -> anyhow::Result<Fingerprint> {
    let read = |path: &Path| {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let mut f = Fingerprint::new();
    f.field("url", args.url.as_deref().unwrap_or_default());
    for (name, values) in [
        ("target", &args.targets),
        ("method", &args.methods),
        ("header", &args.headers),
    ] {
        for v in values {
            f.field(name, v);
        }
    }
    if let Some(path) = &args.mix {
        f.field("mix", "").bytes(&read(path)?);
        f.field("mix-seed", &args.mix_seed.to_string());
    }
    if let Some(recorded) = recorded {
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
            f.field(flag, "").bytes(&read(path)?);
        }
    }
    f.field("shuffle", &format!("{:?}", args.shuffle));
    Ok(f)
}

/// An SLO that names endpoints needs a mix that has them, each with a weight.
fn check_slo_endpoints(
    slo: &Slo,
    path: Option<&Path>,
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

/// The targets with their connection settings and watchers, and the dashboard's view of
/// them.
fn targets(
    args: &LoadArgs,
    bases: &[(String, String)],
    source: &Arc<dyn RequestSource>,
) -> anyhow::Result<(Vec<Target>, Vec<DashTarget>)> {
    let options = peer_options(args, bases)?;
    if args.streams.is_some() && !args.http2 {
        bail!("--streams applies to HTTP/2: add --http2");
    }
    let mut targets = Vec::new();
    let mut watched = Vec::new();
    for (name, base) in bases {
        let mut target = Target::new(name, base, source.clone())?
            .with_options(options.clone())
            .with_streams(args.streams.unwrap_or(1))
            .with_no_reuse(args.no_reuse);
        let mut sampler_of = None;
        if let Some(pid) = watch_for(name, bases, &args.watch_pid, &args.watch_port)? {
            let sampler = Arc::new(
                TreeSampler::start(pid, Duration::from_millis(100))
                    .with_context(|| format!("cannot watch process {pid}"))?,
            );
            sampler_of = Some(sampler.clone());
            target = target.with_watch(Box::new(ProcWatch::new(sampler)));
        }
        targets.push(target);
        watched.push(DashTarget {
            name: name.clone(),
            url: base.clone(),
            sampler: sampler_of,
        });
    }
    Ok((targets, watched))
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

/// A duration flag in the one grammar of `scalpel-units`. The error's own message only:
/// the `{:#}` chain printed by main would repeat its cause.
pub(super) fn duration_arg(flag: &str, text: &str) -> anyhow::Result<Duration> {
    scalpel_units::parse_duration(text).map_err(|e| anyhow!("{flag}: {e}"))
}

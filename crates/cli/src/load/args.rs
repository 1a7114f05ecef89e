//! The flags of `scalpel load`, as clap parses them: raw values, turned into a plan by
//! `build`.

use std::path::PathBuf;

/// Arguments of `scalpel load`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  scalpel load -c 50 -d 30s http://127.0.0.1:8080/\n  scalpel load --shard auto/10 --start-at 2030-01-01T12:00:00Z --rate 500000 -d 60s \\\n      --json - http://payments.default.svc:8080/   (on each of 10 Indexed Job pods)\n  scalpel load --rate 2000 -d 30s http://127.0.0.1:8080/v1/users/{id}/stats --data ids.txt\n  scalpel load --ramp 1000,1000,20000 --step-duration 10s --slo 'p99<50ms,errors<1%' \\\n      --target go=http://127.0.0.1:8080 --target rust=http://127.0.0.1:8081 \\\n      --watch-port go=8080 --watch-port rust=8081 /v1/users/{id}/stats --data ids.txt\n  scalpel load --http2 -c 4 --streams 16 --cacert ca.pem https://api.test:8443/ \\\n      --resolve api.test:8443:127.0.0.1"
)]
pub(crate) struct LoadArgs {
    /// The target URL with the request's path template (`http[s]://HOST:PORT/PATH?QUERY`), or,
    /// with --target, only the path template (default `/`).
    #[arg(value_name = "URL")]
    pub(super) url: Option<String>,

    /// A named target `NAME=BASE_URL` (repeatable); targets are measured in alternation.
    #[arg(long = "target", value_name = "NAME=BASE_URL")]
    pub(super) targets: Vec<String>,

    /// Closed model: connections sending back to back (default 50). Open models and a
    /// recorded schedule: connections opened before the clock starts. With --from, giving
    /// -c means a closed loop over the records as a pool.
    #[arg(short = 'c', long, value_name = "N")]
    pub(super) connections: Option<u32>,

    /// Open model: requests per second on a fixed schedule (at most 10,000,000: above that
    /// one generator cannot even schedule the requests; run several and merge).
    #[arg(long, value_name = "R", conflicts_with = "ramp")]
    pub(super) rate: Option<f64>,

    /// Ramp: rates START, START+STEP, … up to MAX, one step each, until the SLO breaks.
    #[arg(long, value_name = "START,STEP,MAX")]
    pub(super) ramp: Option<String>,

    /// How long to run (closed and open models), e.g. 30s. Default 10s.
    #[arg(
        short = 'd',
        long,
        value_name = "DURATION",
        conflicts_with = "requests"
    )]
    pub(super) duration: Option<String>,

    /// Run this many requests (per step with --ramp) instead of a duration.
    #[arg(short = 'n', long, value_name = "COUNT")]
    pub(super) requests: Option<u64>,

    /// Length of each ramp step. Default 10s.
    #[arg(long, value_name = "DURATION")]
    pub(super) step_duration: Option<String>,

    /// Open models: most requests in flight per target (and connections). Default 1000,
    /// lowered to fit the open-file limit.
    #[arg(long, value_name = "N")]
    pub(super) max_in_flight: Option<u32>,

    /// OS threads generating load, each with its own runtime. Default: the number of CPUs.
    #[arg(long, value_name = "N")]
    pub(super) threads: Option<u32>,

    /// Time-out for establishing a connection (TCP, and again the TLS handshake).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub(super) connect_timeout: String,

    /// HTTP/2: negotiated by ALPN over https://, with prior knowledge (h2c) over http://.
    #[arg(long)]
    pub(super) http2: bool,

    /// HTTP/2: concurrent streams on each of the -c connections (as h2load's -m). The
    /// closed model keeps connections × streams requests in flight. Default 1.
    #[arg(long, value_name = "M")]
    pub(super) streams: Option<u32>,

    /// Open a new connection for every request (HTTP/1.1, `Connection: close`), to
    /// measure connecting and the TLS handshake (as oha's --disable-keepalive).
    #[arg(long)]
    pub(super) no_reuse: bool,

    /// https: trust the CA certificates in this PEM file (one or several) instead of the
    /// system's trust store.
    #[arg(long, value_name = "FILE")]
    pub(super) cacert: Option<PathBuf>,

    /// https: do not verify the server's certificate (encrypted, but to whoever answers);
    /// said in the results.
    #[arg(long)]
    pub(super) insecure: bool,

    /// Connect to ADDR when a target is HOST:PORT, as curl's --resolve; SNI, the
    /// certificate's name and Host stay HOST (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    pub(super) resolve: Vec<String>,

    /// Time-out for a whole request.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(super) timeout: String,

    /// The objective each step must hold, e.g. `p99<50ms,errors<1%` (p50 p90 p99 p999 max
    /// mean with us/ms/s; errors<N%; rps>N).
    #[arg(long, value_name = "SLO")]
    pub(super) slo: Option<String>,

    /// HTTP method of the request (default GET). With --from: keep only recorded requests
    /// with this method (repeatable, upper case).
    #[arg(short = 'm', long = "method", value_name = "METHOD")]
    pub(super) methods: Vec<String>,

    /// A request header `Name: value` (repeatable; values may hold placeholders).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub(super) headers: Vec<String>,

    /// A mix of endpoints: a TOML file of [[request]] tables (name, method, path, headers,
    /// body or body_file, weight); every figure is kept per endpoint too. Placeholders draw
    /// from --data.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "body", "body_file", "headers"])]
    pub(super) mix: Option<PathBuf>,

    /// Seed of a mix's picks: the same seed sends every target the same sequence.
    #[arg(long, value_name = "SEED", default_value_t = 1, requires = "mix")]
    pub(super) mix_seed: u64,

    /// Recorded traffic as the requests: an nginx/Apache access log, a HAR file or a
    /// capture. Replayed on its recorded schedule (see --speed), or, with --rate, --ramp
    /// or -c, used in file order as a pool (looped when the run outlasts it).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["data", "shuffle", "body", "body_file", "headers"])]
    pub(super) from: Option<PathBuf>,

    /// Read --from as this format instead of telling it from the content: access-log, har
    /// or capture.
    #[arg(long, value_name = "FORMAT", requires = "from")]
    pub(super) from_format: Option<String>,

    /// With --from: keep only requests whose path and query match this regular expression
    /// (repeatable: any of them).
    #[arg(long, value_name = "REGEX", requires = "from")]
    pub(super) include_path: Vec<String>,

    /// With --from: skip requests whose path and query match this regular expression
    /// (repeatable).
    #[arg(long, value_name = "REGEX", requires = "from")]
    pub(super) exclude_path: Vec<String>,

    /// With --from: set this header `Name: value` on every request, replacing recorded
    /// ones of that name (repeatable).
    #[arg(long, value_name = "HEADER", requires = "from")]
    pub(super) set_header: Vec<String>,

    /// With --from: remove every recorded header of this name (repeatable).
    #[arg(long, value_name = "NAME", requires = "from")]
    pub(super) drop_header: Vec<String>,

    /// With --from: also replay unsafe methods (anything but GET, HEAD, OPTIONS, TRACE),
    /// which are skipped by default — replaying a POST can move money twice.
    #[arg(long, requires = "from")]
    pub(super) allow_unsafe: bool,

    /// With --from on its recorded schedule: replay this many times faster (0.5 = half
    /// speed). Default 1.
    #[arg(long, value_name = "X", requires = "from")]
    pub(super) speed: Option<f64>,

    /// Request body (may hold placeholders).
    #[arg(long, conflicts_with = "body_file")]
    pub(super) body: Option<String>,

    /// Request body read from a file (may hold placeholders).
    #[arg(long, value_name = "FILE")]
    pub(super) body_file: Option<PathBuf>,

    /// Values for the `{name}` placeholders: one value per line, or CSV with a header.
    #[arg(long, value_name = "FILE")]
    pub(super) data: Option<PathBuf>,

    /// Walk the data in a shuffled order fixed by this seed (default: file order).
    #[arg(long, value_name = "SEED")]
    pub(super) shuffle: Option<u64>,

    /// Sample CPU and memory of this process and its descendants (`PID`, or `NAME=PID`).
    #[arg(long, value_name = "[NAME=]PID")]
    pub(super) watch_pid: Vec<String>,

    /// Like --watch-pid, for the process listening on this TCP port (`PORT` or `NAME=PORT`).
    #[arg(long, value_name = "[NAME=]PORT")]
    pub(super) watch_port: Vec<String>,

    /// Segments per step and target, in alternating target order (A,B then B,A). Default 2
    /// with several targets, else 1.
    #[arg(long, value_name = "N")]
    pub(super) rounds: Option<u32>,

    /// Write all results, histograms included, to this JSON file; `-` writes them to stdout
    /// on one line (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,

    /// This process's part of a run spread over several machines: `I/N` (from 1) or
    /// `auto/N` (the index, from 0, from JOB_COMPLETION_INDEX, as Kubernetes sets it on
    /// Indexed Job pods). --rate, --ramp, -n, -c and --max-in-flight stay the whole run's;
    /// each shard takes its part and a disjoint part of --data. Needs --start-at or --run-id.
    #[arg(long, value_name = "I/N|auto/N")]
    pub(super) shard: Option<String>,

    /// Start the clock at this time, RFC 3339 (2030-01-01T12:00:00Z) or Unix seconds: every
    /// shard starts then and time-bound steps line up across machines.
    #[arg(long, value_name = "TIME")]
    pub(super) start_at: Option<String>,

    /// The run's id, the same on every shard, checked by `scalpel report merge` (default:
    /// derived from the settings and --start-at).
    #[arg(long, value_name = "ID")]
    pub(super) run_id: Option<String>,

    /// Write a self-contained HTML page with plots to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) html: Option<PathBuf>,

    /// Serve a live page of the run at this address (e.g. 127.0.0.1:9300): rates,
    /// latency over time with the SLO line, CPU and memory, the ramp's step; at the end,
    /// the same report as --html.
    #[arg(long, value_name = "ADDR")]
    pub(super) dashboard: Option<std::net::SocketAddr>,

    /// How long the dashboard keeps serving the final report after the run.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        requires = "dashboard"
    )]
    pub(super) dashboard_linger: String,

    /// Show the live progress line even when stderr is not a terminal.
    #[arg(long, conflicts_with = "no_progress")]
    pub(super) progress: bool,

    /// Never show the live progress line.
    #[arg(long)]
    pub(super) no_progress: bool,
}

/// `--max-in-flight` when not given.
pub(super) const DEFAULT_MAX_IN_FLIGHT: u32 = 1000;

/// `-c` when not given.
pub(super) const DEFAULT_CONNECTIONS: u32 = 50;

impl LoadArgs {
    /// `-c`, or its default.
    pub(super) fn connections(&self) -> u32 {
        self.connections.unwrap_or(DEFAULT_CONNECTIONS)
    }

    /// `--max-in-flight`, or its default.
    pub(super) fn max_in_flight(&self) -> u32 {
        self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT)
    }

    /// `--json -`: the result goes to stdout, the table to stderr.
    pub(super) fn json_to_stdout(&self) -> bool {
        self.json.as_deref() == Some(std::path::Path::new("-"))
    }
}

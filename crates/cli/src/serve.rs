//! `scalpel serve`: load and check the config, start the supervisor and balancer, and
//! map signals — SIGHUP to a TLS certificate reload and a live reload of the config file
//! (refused, with its file and line, when it does not check), SIGTERM/SIGINT to drain-then-stop, and a
//! second SIGTERM/SIGINT to stop at once. `--from-pm2` prints the serve.toml of a pm2
//! ecosystem file, which `node` evaluates (it is JavaScript).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use scalpel_serve::{Config, ServeError, ServeOptions, Server};
use tokio::signal::unix::{SignalKind, signal};

/// Arguments of `scalpel serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The TOML config (see docs/serve.md and examples/serve/serve.toml).
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        required_unless_present = "from_pm2"
    )]
    config: Option<PathBuf>,
    /// Check the config, print what would run, and exit (0 valid, 2 invalid).
    #[arg(long)]
    check: bool,
    /// Print the serve.toml equivalent to a pm2 ecosystem file (evaluated with `node`),
    /// what has no equivalent said as comments, and exit.
    #[arg(long, value_name = "ECOSYSTEM", conflicts_with_all = ["config", "check"])]
    from_pm2: Option<PathBuf>,
}

/// Runs `scalpel serve`.
pub(crate) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(eco) = &args.from_pm2 {
        return from_pm2(eco);
    }
    let path = args.config.clone().unwrap_or_default();
    // The programs and directories too: a config that passes --check must not fail
    // at start for a missing one.
    let config = match Config::from_file(&path).and_then(|c| c.check_programs().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("scalpel serve: invalid config: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if args.check {
        // Start logs them through tracing; --check says them on stderr.
        for w in config.writable_by_others() {
            eprintln!("scalpel serve: warning: {w}");
        }
        let problems = config.check_tls();
        if !problems.is_empty() {
            for p in &problems {
                eprintln!("scalpel serve: invalid config: {}: {p}", path.display());
            }
            return Ok(ExitCode::from(2));
        }
        println!(
            "{}: ok (listen {}{}, admin {}, apps: {})",
            config.path().display(),
            config.listen(),
            if config.tls() { " tls" } else { "" },
            config
                .admin()
                .map_or_else(|| "none".to_string(), |a| a.to_string()),
            config.app_names().join(", ")
        );
        for line in config.requirements() {
            println!("  {line}");
        }
        for w in config.warnings() {
            eprintln!("scalpel serve: warning: {w}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    // The control plane (supervision, health, admin) only: the proxy runs on its own
    // data-plane threads (`[server] threads`).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<ExitCode> {
    let path = config.path().to_path_buf();
    // Signal handlers first, so a SIGTERM during start-up drains instead of killing.
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let server = match Server::start(config, ServeOptions::default()).await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("scalpel serve: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    tracing::info!(
        listen = %server.listen_addr(),
        admin = %server.admin_addr().map_or_else(|| "none".into(), |a| a.to_string()),
        "scalpel serve: listening"
    );
    {
        let server = server.clone();
        tokio::spawn(async move {
            if server.wait_ready(Duration::from_secs(3600)).await {
                tracing::info!("all workers ready");
            }
        });
    }
    let why = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            _ = hup.recv() => {
                tracing::info!(
                    config = %path.display(),
                    "SIGHUP: TLS certificates (if any), then the config file again (a rolling reload)"
                );
                // The certificates first, at once: the worker roll takes a while and
                // does not depend on them. A bad file keeps the certificate in use.
                if let Err(e) = server.reload_tls() {
                    tracing::error!(error = %e, "TLS reload: the certificate in use stays");
                }
                let server = server.clone();
                tokio::spawn(async move {
                    // A refused config is logged by the server with its file and line.
                    if let Err(e @ ServeError::Reload(_)) = server.reload().await {
                        tracing::error!(error = %e, "reload");
                    }
                });
            }
        }
    };
    tracing::info!(
        signal = why,
        "draining, then stopping workers (send it again to stop at once)"
    );
    let shutdown = server.shutdown();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second signal: stopping now, requests in flight are cut off");
        server.hurry();
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `node` may take to evaluate an ecosystem file.
const PM2_EVAL_LIMIT: Duration = Duration::from_secs(10);

/// Evaluates `module.exports` of an ecosystem file (CommonJS, JSON, or an ES module's
/// default export) and prints it as JSON; functions are left out.
const PM2_EVAL: &str = r#"
const path = require('node:path');
const file = path.resolve(process.argv[1]);
const load = /\.mjs$/.test(file)
  ? import(require('node:url').pathToFileURL(file)).then((m) => m.default)
  : new Promise((resolve) => resolve(require(file))); // a SyntaxError rejects, one line
load.then((c) => process.stdout.write(JSON.stringify(c, (k, v) => (typeof v === 'function' ? undefined : v))))
  .catch((e) => { process.stderr.write(String((e && e.message) || e).split('\n')[0]); process.exit(1); });
"#;

/// `--from-pm2 FILE`: the file evaluated by `node`, its apps printed as serve.toml.
fn from_pm2(eco: &std::path::Path) -> anyhow::Result<ExitCode> {
    let fail = |why: String| {
        eprintln!("scalpel serve: --from-pm2 {}: {why}", eco.display());
        Ok(ExitCode::from(2))
    };
    if !eco.is_file() {
        return fail("no such file".into());
    }
    let json = match eval_with_node(eco) {
        Ok(j) => j,
        Err(why) => return fail(why),
    };
    let value: serde_json::Value = match serde_json::from_str(&json) {
        Ok(v) => v,
        Err(e) => return fail(format!("node printed no JSON: {e}")),
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    match scalpel_serve::toml_from_pm2(&value, eco, cpus) {
        Ok(toml) => {
            print!("{toml}");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => fail(why),
    }
}

/// Runs `node -e PM2_EVAL FILE` with a time limit; its stdout, or one line of why not.
fn eval_with_node(eco: &std::path::Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut child = std::process::Command::new("node")
        .arg("-e")
        .arg(PM2_EVAL)
        .arg(eco)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run node (an ecosystem file is JavaScript): {e}"))?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let deadline = std::time::Instant::now() + PM2_EVAL_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "node did not finish within {} s",
                    PM2_EVAL_LIMIT.as_secs()
                ));
            }
        }
    };
    let stdout = reader.join().unwrap_or_default();
    if !status.success() {
        let mut why = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut why);
        }
        // One line, whatever node printed (its first non-empty one).
        let why = why
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        return Err(format!("node could not evaluate it: {why}"));
    }
    Ok(stdout)
}

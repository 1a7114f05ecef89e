//! `scalpel serve`: load and check the config, start the supervisor and balancer, and
//! map signals — SIGHUP to a TLS certificate reload and a live reload of the config file
//! (refused, with its file and line, when it does not check), SIGTERM/SIGINT to drain-then-stop, and a
//! second SIGTERM/SIGINT to stop at once.

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
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Check the config, print what would run, and exit (0 valid, 2 invalid).
    #[arg(long)]
    check: bool,
}

/// Runs `scalpel serve`.
pub(crate) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // The programs and directories too: a config that passes --check must not fail
    // at start for a missing one.
    let config = match Config::from_file(&args.config).and_then(|c| c.check_programs().map(|()| c))
    {
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
                eprintln!(
                    "scalpel serve: invalid config: {}: {p}",
                    args.config.display()
                );
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

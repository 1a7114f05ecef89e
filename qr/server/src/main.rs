//! `qr-server`: tier 4 of the QR ladder, the whole endpoint as a Rust HTTP server.
//!
//! `qr-server --port P [--host H]` listens (127.0.0.1 by default; port 0 picks a free
//! port), prints exactly one line `qr-server listening on http://HOST:PORT` on stdout,
//! and serves the contract of `docs/qr.md`:
//! `GET /qrcode?text=…` → the PNG of `qr_core::png`; 400/413/405/404 with JSON bodies;
//! `GET /healthz`. SIGTERM or SIGINT: stop accepting, finish in-flight requests (up to a
//! grace period), exit 0.
//!
//! It must NOT render PNGs on the async worker threads (they go to tokio's blocking
//! pool, capped at the CPU count), and must NOT accept without limits (connection cap,
//! header read time-out, request-line size).

mod http;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// Command line of `qr-server`.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Tier 4 of the QR ladder: GET /qrcode?text=... as PNG"
)]
struct Args {
    /// Port to listen on; 0 picks a free one (the real port is printed).
    #[arg(long)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Most connections open at once; further clients wait in the kernel's backlog.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Seconds a client may take to send its request headers.
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Seconds in-flight requests get to finish after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Threads that render PNGs (tokio blocking pool); default: the CPU count.
    #[arg(long)]
    render_threads: Option<usize>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qr-server: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Rendering is CPU-bound: more render threads than cores only adds switching.
        .max_blocking_threads(args.render_threads.unwrap_or(cpus).max(1))
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Handlers first: a signal that arrives right after the "listening" line must not
    // hit the default action (terminate with no exit code).
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let addr: SocketAddr = listener.local_addr()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "qr-server listening on http://{addr}")?;
        out.flush()?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(args.max_connections.max(1)));
    let header_timeout = Duration::from_secs(args.header_timeout.max(1));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    });

    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => permit.context("semaphore closed")?,
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let _permit = permit;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(
                    TokioIo::new(stream),
                    hyper::service::service_fn(http::handle),
                );
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    // Finish the request in flight, then close; idle keep-alives close now.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }

    drop(listener); // stop accepting: new clients are refused from here on
    let _ = stop_tx.send(true);
    let grace = Duration::from_secs(args.grace);
    if tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            left = connections.len(),
            "grace period over, dropping connections"
        );
        connections.abort_all();
    }
    Ok(())
}

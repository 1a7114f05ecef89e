//! `qr-server`: tier 4 of the QR ladder, the whole endpoint as a Rust HTTP server.
//!
//! `qr-server --port P [--host H]` listens (127.0.0.1 by default; port 0 picks a free
//! port), prints exactly one line `qr-server listening on http://HOST:PORT` on stdout,
//! and serves the contract of `docs/qr.md`:
//! `GET /qrcode?text=…` → the PNG of `qr_core::png`; 400/413/405/404 with JSON bodies;
//! `GET /healthz`. SIGTERM or SIGINT: stop accepting, finish in-flight requests (up to a
//! grace period), exit 0.
//!
//! # Design: thread per core, short renders inline
//!
//! One thread per CPU the process may run on (`taskset` is honoured), each with its own
//! single-threaded tokio runtime accepting from the one shared listener and serving the
//! connections it accepted. A text of at most `--inline-max` bytes is rendered on that
//! thread, in the request's own task; a longer one goes to the thread's blocking pool so
//! that it does not hold up the thread's other connections for milliseconds.
//!
//! Measured on one pinned core (docs/qr.md, "Tier 4"): the earlier design — a
//! work-stealing runtime handing every render to the blocking pool — spent most of a short
//! request on the hand-off (two thread wake-ups, the two threads taking turns on the one
//! core) and served fewer requests than Node with the napi addon (tier 3).
//!
//! It must NOT render long texts on the connection threads, and must NOT accept without
//! limits (connection cap, header read time-out, request-line size).

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

/// Texts up to this many UTF-8 bytes render inline by default (docs/qr.md, "Tier 4").
const DEFAULT_INLINE_MAX: usize = 128;

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
    /// Connection threads, each with its own runtime; default: the CPUs this process may
    /// run on.
    #[arg(long)]
    threads: Option<usize>,
    /// Texts of at most this many UTF-8 bytes render on the connection's thread; longer
    /// ones on the blocking pool (0: every render on the pool).
    #[arg(long, default_value_t = DEFAULT_INLINE_MAX)]
    inline_max: usize,
    /// Threads that render long texts (the blocking pools, all threads together); default:
    /// the CPUs this process may run on.
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

/// What every connection thread shares.
#[derive(Debug, Clone)]
struct Shared {
    slots: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    header_timeout: Duration,
    grace: Duration,
    inline_max: usize,
}

fn runtime(blocking_threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Rendering is CPU-bound: more render threads than cores only adds switching.
        .max_blocking_threads(blocking_threads)
        .build()
        .context("building a tokio runtime")
}

fn run(args: Args) -> anyhow::Result<()> {
    // available_parallelism follows the affinity mask, so `taskset -c 1` gives 1.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.threads.unwrap_or(cpus).max(1);
    let blocking = args.render_threads.unwrap_or(cpus).max(1).div_ceil(threads);
    let main_rt = runtime(blocking)?;

    // Handlers first: a signal that arrives right after the "listening" line must not
    // hit the default action (terminate with no exit code).
    let (mut term, mut int) = main_rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        anyhow::Ok((
            signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
            signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
        ))
    })?;
    // tokio's bind sets SO_REUSEADDR and a backlog of 1024; the std socket is then shared.
    let listener = main_rt
        .block_on(TcpListener::bind((args.host.as_str(), args.port)))
        .with_context(|| format!("binding {}:{}", args.host, args.port))?
        .into_std()
        .context("detaching the listener")?;
    let addr: SocketAddr = listener.local_addr()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "qr-server listening on http://{addr}")?;
        out.flush()?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Shared {
        slots: Arc::new(Semaphore::new(args.max_connections.max(1))),
        stop: stop_rx,
        header_timeout: Duration::from_secs(args.header_timeout.max(1)),
        grace: Duration::from_secs(args.grace),
        inline_max: args.inline_max,
    };

    let mut others = Vec::with_capacity(threads - 1);
    for i in 1..threads {
        let listener = listener.try_clone().context("sharing the listener")?;
        let shared = shared.clone();
        let rt = runtime(blocking)?;
        let handle = std::thread::Builder::new()
            .name(format!("qr-conn-{i}"))
            .spawn(move || rt.block_on(accept_loop(listener, shared)))
            .context("starting a connection thread")?;
        others.push(handle);
    }
    main_rt.block_on(async {
        let own = accept_loop(listener, shared);
        let signals = async {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
            let _ = stop_tx.send(true);
        };
        let (served, ()) = tokio::join!(own, signals);
        served
    })?;
    for handle in others {
        match handle.join() {
            Ok(result) => result?,
            Err(_) => anyhow::bail!("a connection thread panicked"),
        }
    }
    Ok(())
}

/// Accepts and serves connections on this thread until the stop signal, then lets the
/// connections finish their request in flight for up to the grace period.
async fn accept_loop(listener: std::net::TcpListener, shared: Shared) -> anyhow::Result<()> {
    let listener = TcpListener::from_std(listener).context("registering the listener")?;
    let mut connections = JoinSet::new();
    let mut stop = shared.stop.clone();
    let mut stopped = std::pin::pin!(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    loop {
        let permit = tokio::select! {
            () = &mut stopped => break,
            permit = shared.slots.clone().acquire_owned() => permit.context("semaphore closed")?,
        };
        let (stream, peer) = tokio::select! {
            () = &mut stopped => break,
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
        let mut stop = shared.stop.clone();
        let (header_timeout, inline_max) = (shared.header_timeout, shared.inline_max);
        connections.spawn(async move {
            let _permit = permit;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(
                    TokioIo::new(stream),
                    hyper::service::service_fn(move |req| http::handle(req, inline_max)),
                );
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
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

    drop(listener); // this thread stops accepting (the socket closes with the last thread's)
    if tokio::time::timeout(shared.grace, async {
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

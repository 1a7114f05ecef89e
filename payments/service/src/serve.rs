//! The HTTP side: accept loop, limits, graceful shutdown, and the tail (a thread over
//! SQLite, a task over the PostgreSQL pool). Every connection's request heads pass the
//! SPEC's checks (head.rs) before hyper reads them.

use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use payments_core::{Db, PgTailer, ReadModel, Scratch, Tailer};

use crate::head::Checked;
use crate::metrics::{self, Pool};
use crate::pgtail;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Semaphore, watch};

/// How often the tail looks for new ledger rows (SPEC: 100 ms).
pub(crate) const TAIL_EVERY: Duration = Duration::from_millis(100);
/// How long shutdown waits for in-flight requests.
const DRAIN_FOR: Duration = Duration::from_secs(10);

/// What `serve` needs.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) db: Db,
    pub(crate) db_pool: usize,
    pub(crate) addr: SocketAddr,
    pub(crate) max_connections: u32,
    pub(crate) header_timeout: Duration,
}

thread_local! {
    // One set of buffers per runtime thread: requests allocate only the response bytes.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// Answers inline on the runtime thread: a whole request costs ~37 µs of CPU on average
/// under load (docs/payments.md), about what a `spawn_blocking` hop would add.
fn handle(model: &ReadModel, pool: &Pool, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.uri().path() == "/metrics" {
        if req.method() != hyper::Method::GET {
            let e = payments_core::ApiError::MethodNotAllowed;
            let mut response = Response::new(Full::new(Bytes::from_static(e.body())));
            *response.status_mut() = hyper::StatusCode::METHOD_NOT_ALLOWED;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return response;
        }
        let mut response = Response::new(Full::new(Bytes::from(metrics::render(pool, model))));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        );
        return response;
    }
    let snapshot = model.snapshot();
    let (status, body) = SCRATCH.with_borrow_mut(|scratch| {
        let reply = payments_core::respond(
            &snapshot,
            req.method().as_str(),
            req.uri().path(),
            req.uri().query(),
            scratch,
        );
        (reply.status, Bytes::copy_from_slice(reply.body))
    });
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) async fn run(config: Config) -> anyhow::Result<()> {
    // Signals first: a SIGTERM while a big (or locked) ledger loads is a requested stop,
    // exit 0, not a kill by the default action. The abandoned load only reads.
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let (model, follow) = tokio::select! {
        loaded = load(&config) => loaded.with_context(|| format!("loading {}", config.db))?,
        _ = sigterm.recv() => {
            stopped_while_loading();
            return Ok(());
        },
        _ = sigint.recv() => {
            stopped_while_loading();
            return Ok(());
        },
    };
    let listener = TcpListener::bind(config.addr)
        .await
        .with_context(|| format!("binding {}", config.addr))?;
    let local = listener.local_addr().context("reading the bound address")?;

    let stop_tail = Arc::new(AtomicBool::new(false));
    let (tail, pool) = start_tail(follow, &model, &stop_tail)?;

    {
        let snapshot = model.snapshot();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "payments listening on http://{local} (seq {}, {} users, {} transactions)",
            snapshot.seq(),
            snapshot.user_count(),
            snapshot.transaction_count()
        );
        let _ = out.flush();
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(config.max_connections as usize));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true)
        // After a refused head the checked stream ends early: answer the requests
        // before it instead of taking the end for a client gone (head.rs).
        .half_close(true);

    loop {
        // Take a connection slot before accepting: past the limit, clients wait in the
        // kernel's accept queue instead of piling up in memory.
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => p.context("connection limit closed")?,
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        };
        let _ = stream.set_nodelay(true);
        let model = Arc::clone(&model);
        let pool = pool.clone();
        let mut shutdown = shutdown_rx.clone();
        let conn = builder.serve_connection(
            TokioIo::new(Checked::new(stream)),
            service_fn(move |req| {
                let response = handle(&model, &pool, &req);
                async move { Ok::<_, std::convert::Infallible>(response) }
            }),
        );
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                _ = shutdown.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }

    tracing::info!("shutting down: draining connections");
    drop(listener);
    let _ = shutdown_tx.send(true);
    let drained =
        tokio::time::timeout(DRAIN_FOR, permits.acquire_many(config.max_connections)).await;
    if drained.is_err() {
        tracing::warn!("some connections did not finish within {DRAIN_FOR:?}");
    }
    stop_tail.store(true, Ordering::Relaxed);
    match tail {
        TailHandle::Thread(thread) => {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        TailHandle::Task(task) => {
            let _ = task.await;
        }
    }
    Ok(())
}

/// What keeps the read model current after loading.
enum Follow {
    Sqlite(Tailer),
    /// The tailer, its pool, and the configuration of the LISTEN connection.
    Postgres(
        PgTailer,
        deadpool_postgres::Pool,
        Box<deadpool_postgres::tokio_postgres::Config>,
    ),
}

enum TailHandle {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

/// Starts what keeps `model` current: the SQLite tail thread, or the PostgreSQL tail task
/// with its LISTEN connection. Returns its handle and where /metrics reads the pool from.
fn start_tail(
    follow: Follow,
    model: &Arc<ReadModel>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(TailHandle, Pool)> {
    Ok(match follow {
        Follow::Sqlite(tailer) => {
            let busy = Arc::new(AtomicBool::new(false));
            let thread = spawn_tail(
                tailer,
                Arc::clone(model),
                Arc::clone(stop),
                Arc::clone(&busy),
            )?;
            (TailHandle::Thread(thread), Pool::Sqlite(busy))
        }
        Follow::Postgres(tailer, pool, listen) => {
            let listening = Arc::new(AtomicBool::new(false));
            let task = tokio::spawn(pgtail::follow(
                tailer,
                pool.clone(),
                pgtail::Wakeups::listen(*listen, Arc::clone(&listening)),
                Arc::clone(model),
                Arc::clone(stop),
                TAIL_EVERY,
            ));
            (TailHandle::Task(task), Pool::Postgres(pool, listening))
        }
    })
}

/// Loads the ledger: an SQLite file on a blocking thread (rusqlite blocks), a PostgreSQL
/// database over a pooled connection (pgtail.rs).
async fn load(config: &Config) -> anyhow::Result<(Arc<ReadModel>, Follow)> {
    match &config.db {
        Db::Sqlite(path) => {
            let path = path.clone();
            let (model, tailer) = tokio::task::spawn_blocking(move || payments_core::open(&path))
                .await
                .context("loading the ledger")??;
            Ok((model, Follow::Sqlite(tailer)))
        }
        Db::Postgres(pg) => {
            let (model, tailer, pool) = pgtail::load(pg, config.db_pool).await?;
            let listen = pg.config().clone();
            Ok((model, Follow::Postgres(tailer, pool, Box::new(listen))))
        }
    }
}

fn stopped_while_loading() {
    eprintln!("payments: stopped by a signal while loading the ledger");
}

/// The tail loop runs on its own OS thread: rusqlite blocks, and the runtime's threads
/// should only ever serve requests.
fn spawn_tail(
    mut tailer: Tailer,
    model: Arc<ReadModel>,
    stop: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ledger-tail".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(TAIL_EVERY);
                busy.store(true, Ordering::Relaxed);
                let polled = tailer.poll(&model);
                busy.store(false, Ordering::Relaxed);
                match polled {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(rows = n, seq = tailer.seq(), "applied new rows"),
                    Err(e) => tracing::warn!(error = %e, "tailing the ledger failed; retrying"),
                }
            }
        })
        .context("starting the tail thread")
}

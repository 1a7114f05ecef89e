//! Following a PostgreSQL ledger: the pool, the load, and the tail woken by LISTEN/NOTIFY.
//!
//! The tail polls as the SPEC says (`seq > last`, at least every 100 ms), over a pooled
//! connection. It is also woken at once by a notification: the schema's statement trigger
//! on `transactions` sends `NOTIFY payments_ledger` with every insert, delivered when the
//! writer commits. So a transfer reaches the read model in about a round trip instead of
//! half a poll period on average. The notification carries nothing but the wake-up: the
//! rows are always read by `seq`, so a notification lost while the LISTEN connection is
//! being re-made costs at most one poll period, never a row.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use deadpool_postgres::tokio_postgres::{AsyncMessage, Config, NoTls};
use futures_util::future::poll_fn;
use payments_core::{PgDb, PgTailer, ReadModel};
use tokio::sync::Notify;

/// Longest one tail poll may take before it is given up (and retried).
const POLL_LIMIT: Duration = Duration::from_secs(10);
/// Wait before re-making a lost LISTEN connection.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);
/// Subscribes to the channel the schema's trigger notifies (payments/schema.sql).
const LISTEN: &str = "LISTEN payments_ledger";

/// Builds the pool (`max_size` connections; a connection the server dropped is noticed and
/// replaced) and loads the read model over one of its connections.
pub(crate) async fn load(
    pg: &PgDb,
    max_size: usize,
) -> anyhow::Result<(Arc<ReadModel>, PgTailer, deadpool_postgres::Pool)> {
    let manager = deadpool_postgres::Manager::from_config(
        pg.config().clone(),
        NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(max_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .build()
        .context("building the PostgreSQL pool")?;
    let mut client = pool.get().await.context("connecting")?;
    let (model, tailer) = payments_core::open_pg(&mut client, &pg.to_string()).await?;
    drop(client);
    Ok((model, tailer, pool))
}

/// What wakes the tail besides its clock.
#[derive(Debug)]
pub(crate) struct Wakeups {
    notify: Arc<Notify>,
    listener: tokio::task::JoinHandle<()>,
}

impl Wakeups {
    /// Starts the LISTEN connection's task; `listening` is true while it is connected.
    pub(crate) fn listen(config: Config, listening: Arc<AtomicBool>) -> Wakeups {
        let notify = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(config, Arc::clone(&notify), listening));
        Wakeups { notify, listener }
    }
}

/// Keeps a LISTEN connection and turns each notification into a wake-up, re-connecting
/// after RELISTEN_AFTER whenever the connection is lost.
async fn listen(config: Config, notify: Arc<Notify>, listening: Arc<AtomicBool>) {
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                // The connection must be polled for LISTEN itself to complete.
                let subscribe = client.batch_execute(LISTEN);
                let mut subscribe = std::pin::pin!(subscribe);
                let mut subscribed = false;
                let ended = poll_fn(|cx| {
                    if !subscribed {
                        match subscribe.as_mut().poll(cx) {
                            std::task::Poll::Ready(Ok(())) => {
                                subscribed = true;
                                listening.store(true, Ordering::Relaxed);
                                // Rows committed before LISTEN took effect: look once.
                                notify.notify_one();
                            }
                            std::task::Poll::Ready(Err(e)) => {
                                return std::task::Poll::Ready(Some(e));
                            }
                            std::task::Poll::Pending => {}
                        }
                    }
                    loop {
                        match connection.poll_message(cx) {
                            std::task::Poll::Ready(Some(Ok(AsyncMessage::Notification(_)))) => {
                                notify.notify_one();
                            }
                            std::task::Poll::Ready(Some(Ok(_))) => {}
                            std::task::Poll::Ready(Some(Err(e))) => {
                                return std::task::Poll::Ready(Some(e));
                            }
                            std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
                            std::task::Poll::Pending => return std::task::Poll::Pending,
                        }
                    }
                })
                .await;
                listening.store(false, Ordering::Relaxed);
                match ended {
                    Some(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost; polling meanwhile")
                    }
                    None => tracing::warn!("LISTEN connection closed; polling meanwhile"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "no LISTEN connection; polling meanwhile"),
        }
        tokio::time::sleep(RELISTEN_AFTER).await;
    }
}

/// The tail: at every tick of `every` (the service's tail interval) and at every notification, a pooled connection
/// reads what is new. A lost connection fails one poll (logged) and the pool opens another
/// for the next.
pub(crate) async fn follow(
    mut tailer: PgTailer,
    pool: deadpool_postgres::Pool,
    wakeups: Wakeups,
    model: Arc<ReadModel>,
    stop: Arc<AtomicBool>,
    every: Duration,
) {
    let mut every = tokio::time::interval(every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            _ = every.tick() => {}
            _ = wakeups.notify.notified() => {}
        }
        let polled = match pool.get().await {
            Ok(client) => tokio::time::timeout(POLL_LIMIT, tailer.poll(&**client, &model))
                .await
                .unwrap_or_else(|_| Err(payments_core::Error::TimedOut("tailing the ledger"))),
            Err(e) => {
                tracing::warn!(error = %e, "no PostgreSQL connection for tailing; retrying");
                continue;
            }
        };
        match polled {
            Ok(0) => {}
            Ok(n) => tracing::debug!(rows = n, seq = tailer.seq(), "applied new rows"),
            Err(e) => tracing::warn!(error = %e, "tailing the ledger failed; retrying"),
        }
    }
    wakeups.listener.abort();
}

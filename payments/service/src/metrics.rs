//! `GET /metrics` (Prometheus text): the ledger store's connection pool and the read
//! model's `seq`. The names are the Go service's where both have the figure (SPEC
//! "GET /metrics"); the Go service's pools are a reader and a writer, this one's is the
//! reader alone (it never writes).

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use payments_core::ReadModel;

/// Where the pool figures come from.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// The SQLite tail thread's one connection; `true` while a poll runs.
    Sqlite(Arc<AtomicBool>),
    /// The PostgreSQL pool, and whether the LISTEN connection is up.
    Postgres(deadpool_postgres::Pool, Arc<AtomicBool>),
}

/// The pool's figures now: (max, open, in use, idle, waiting).
fn figures(pool: &Pool) -> (usize, usize, usize, usize, usize) {
    match pool {
        Pool::Sqlite(busy) => {
            let busy = usize::from(busy.load(Ordering::Relaxed));
            (1, 1, busy, 1 - busy, 0)
        }
        Pool::Postgres(pool, _) => {
            let s = pool.status();
            (
                s.max_size,
                s.size,
                s.size - s.available.min(s.size),
                s.available,
                s.waiting,
            )
        }
    }
}

/// The `/metrics` body.
pub(crate) fn render(pool: &Pool, model: &ReadModel) -> String {
    let store = match pool {
        Pool::Sqlite(_) => "sqlite",
        Pool::Postgres(..) => "postgres",
    };
    let (max, open, in_use, idle, waiting) = figures(pool);
    let mut out = String::new();
    for (name, help, value) in [
        (
            "payments_db_pool_max",
            "Most connections the pool opens.",
            max,
        ),
        ("payments_db_pool_open", "Connections open now.", open),
        ("payments_db_pool_in_use", "Connections in use now.", in_use),
        (
            "payments_db_pool_idle",
            "Connections open and idle now.",
            idle,
        ),
        (
            "payments_db_pool_waiting",
            "Callers waiting for a connection now.",
            waiting,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{store=\"{store}\",pool=\"reader\"}} {value}"
        );
    }
    if let Pool::Postgres(_, listening) = pool {
        let _ = writeln!(
            out,
            "# HELP payments_db_listening 1 while the LISTEN connection (tail wake-ups) is up.\n\
             # TYPE payments_db_listening gauge\npayments_db_listening{{store=\"postgres\"}} {}",
            u8::from(listening.load(Ordering::Relaxed))
        );
    }
    let _ = writeln!(
        out,
        "# HELP payments_ledger_seq The last ledger seq applied to the read model.\n\
         # TYPE payments_ledger_seq gauge\npayments_ledger_seq{{store=\"{store}\"}} {}",
        model.snapshot().seq()
    );
    out
}

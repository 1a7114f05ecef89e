//! `payments`: the Rust side of the payments example.
//!
//! - `payments generate --users N --seed S --db DB [--ids-out FILE] [--force]` writes a
//!   deterministic ledger (see `payments_core::generate`).
//! - `payments serve --db DB --port P [--host H] [--db-pool N]` serves the hot endpoints
//!   (balance, stats, healthz, metrics) from an in-memory read model tailed from the ledger.
//!
//! `DB` is `sqlite:PATH` or a bare path (an SQLite file), or a PostgreSQL URL such as
//! `postgres://user@/db?host=/socket/dir&port=5432`. On PostgreSQL, `serve` keeps a
//! `deadpool-postgres` pool (small: the load at start and the tail use one connection at a
//! time; `--db-pool` sizes it, `/metrics` shows it): a connection the server dropped (a
//! restart, `pg_terminate_backend`) is replaced on the next tail instead of failing it for
//! good, which a single long-lived client would need hand-written reconnects for. One more
//! connection LISTENs for the ledger's NOTIFY to wake the tail (pgtail.rs).
//!
//! The contract is `payments/SPEC.md`; the logic is in `payments-core`, this binary only
//! parses flags and moves bytes between sockets and the core.

use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;

use payments_core::Db;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};

mod head;
mod metrics;
mod pgtail;
mod serve;

#[derive(Debug, Parser)]
#[command(
    name = "payments",
    version,
    about = "Payments example: ledger generator and hot-path service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a deterministic, realistically skewed ledger.
    Generate {
        /// Number of users.
        #[arg(long, default_value_t = 16_000)]
        users: u32,
        /// Seed: the same seed gives the same rows.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The ledger to create: sqlite:PATH or PATH, or a postgres:// URL.
        #[arg(long)]
        db: Db,
        /// Also write the user ids, one per line.
        #[arg(long)]
        ids_out: Option<PathBuf>,
        /// Replace an existing file, or a database's ledger tables.
        #[arg(long)]
        force: bool,
    },
    /// Serve balance, stats and healthz.
    Serve {
        /// The ledger (read-only): sqlite:PATH or PATH, or a postgres:// URL.
        #[arg(long)]
        db: Db,
        /// Port to listen on (0 = any free port).
        #[arg(long)]
        port: u16,
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
        /// Most connections served at once; further ones wait in the accept queue.
        #[arg(long, default_value_t = 10_000)]
        max_connections: u32,
        /// Seconds a client may take to send a request's headers.
        #[arg(long, default_value_t = 10)]
        header_timeout: u64,
        /// PostgreSQL connections kept at most (load and tail; SQLite: one connection).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=100))]
        db_pool: u16,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: escape codes garble log files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("payments: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Generate {
            users,
            seed,
            db,
            ids_out,
            force,
        } => {
            let started = Instant::now();
            let options = payments_core::GenerateOptions::new(users, seed).force(force);
            let summary = match &db {
                Db::Sqlite(path) => payments_core::generate(path, &options)?,
                Db::Postgres(pg) => generate_pg(pg, &db.to_string(), &options)?,
            };
            if let Some(path) = ids_out {
                let mut text = summary.user_ids().join("\n");
                text.push('\n');
                std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
            }
            let mut out = std::io::stdout().lock();
            // A closed stdout is not an error worth a non-zero exit.
            let _ = writeln!(
                out,
                "generated {} users ({} creators), {} transactions in {:.2} s -> {}",
                summary.user_ids().len(),
                summary.creators(),
                summary.transactions(),
                started.elapsed().as_secs_f64(),
                db
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            db,
            port,
            host,
            max_connections,
            header_timeout,
            db_pool,
        } => {
            let config = serve::Config {
                db,
                db_pool: db_pool.into(),
                addr: (host, port).into(),
                max_connections: max_connections.max(1),
                header_timeout: Duration::from_secs(header_timeout.max(1)),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the runtime")?;
            let served = runtime.block_on(serve::run(config));
            // Do not wait for a load abandoned at a signal (dropping the runtime would).
            runtime.shutdown_background();
            served?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `generate` into PostgreSQL: one connection on a small runtime of its own.
fn generate_pg(
    pg: &payments_core::PgDb,
    name: &str,
    options: &payments_core::GenerateOptions,
) -> anyhow::Result<payments_core::GenerateSummary> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let (mut client, connection) = pg
            .config()
            .connect(deadpool_postgres::tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to {name}"))?;
        let driver = tokio::spawn(connection);
        let summary = payments_core::generate_pg(&mut client, name, options).await?;
        drop(client);
        let _ = driver.await;
        Ok(summary)
    })
}

//! `scalpel`: the command line over the toolkit crates.
//!
//! This file only parses flags, sets up logging and dispatches; each subcommand
//! lives in its own module, which turns its raw clap arguments into the library
//! objects that do the work and maps the outcome to an exit code:
//! 0 success, 1 the check failed (SLO broken, responses differ), 2 bad usage.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod dashboard;
mod load;
mod logs;
mod procstat;
mod recorded;
mod report;
mod serve;
mod shadow;
mod sources;

/// Move a service's hot paths to Rust, and prove it.
#[derive(Debug, Parser)]
#[command(name = "scalpel", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Open- or closed-model load, ramping to the breaking point, with the targets' CPU and memory.
    Load(load::LoadArgs),
    /// Work with result files: merge runs exactly, print tables, write HTML.
    Report(report::ReportArgs),
    /// Mirror or replay traffic to two services and compare every response.
    Shadow(shadow::ShadowArgs),
    /// Run a service's workers on per-worker ports behind a built-in balancer.
    Serve(serve::ServeArgs),
    /// CPU time and memory (RSS, PSS) of process trees now, as load and serve measure them.
    Procstat(procstat::ProcstatArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr.
            if !err.use_stderr() {
                let _ = err.print();
                return ExitCode::SUCCESS;
            }
            // Bad usage is one line on stderr, like every other bad input. A first line
            // ending in `:` lists on the next lines what it means (the missing arguments).
            let text = err.render().to_string();
            let mut lines = text.lines();
            let first = lines.next().unwrap_or_default();
            let mut line = first.strip_prefix("error: ").unwrap_or(first).to_owned();
            if line.ends_with(':') {
                let listed: Vec<&str> = lines
                    .take_while(|l| l.starts_with(' '))
                    .map(str::trim)
                    .collect();
                line = format!("{} {}", line, listed.join(", "));
            }
            eprintln!("scalpel: {line} (see --help)");
            return ExitCode::from(2);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SCALPEL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Colour codes only for a person at a terminal, never in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal());
    // `serve` supervises for hours: its log lines must never wait for a stderr nobody
    // reads (they are dropped past a bound instead, and counted); the short-lived
    // commands write directly.
    let mut flush = None;
    if matches!(cli.command, Command::Serve(_)) {
        let (writer, f) = logs::lossy_stderr();
        logs.with_writer(writer).init();
        flush = Some(f);
    } else {
        logs.with_writer(std::io::stderr).init();
    }
    let result = match cli.command {
        Command::Load(args) => load::run(args),
        Command::Report(args) => report::run(args),
        Command::Shadow(args) => shadow::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Procstat(args) => procstat::run(args),
    };
    if let Some(f) = flush {
        f.wait(std::time::Duration::from_secs(5));
    }
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("scalpel: {err:#}");
            ExitCode::from(2)
        }
    }
}

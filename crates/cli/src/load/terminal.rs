//! What `scalpel load` shows and hears while it runs: the live progress line on stderr, and
//! SIGINT/SIGTERM (the first ends the run early with a report, the second quits).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use scalpel_load::{Progress, Stop};

/// Blocks SIGINT and SIGTERM in this (still the only) thread and starts one thread that
/// waits for them: the first raises `stop` (the run ends its step early and reports), the
/// second exits at once. Returns the number of the first signal, 0 until there is one.
pub(super) fn watch_signals(stop: Stop) -> anyhow::Result<Arc<AtomicI32>> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()
        .context("cannot block SIGINT and SIGTERM")?;
    let first = Arc::new(AtomicI32::new(0));
    let seen = first.clone();
    std::thread::Builder::new()
        .name("scalpel-signals".into())
        .spawn(move || {
            while let Ok(signal) = set.wait() {
                if seen.load(Ordering::Acquire) != 0 {
                    eprintln!("scalpel: {signal} again: quitting without a report");
                    std::process::exit(128 + signal as i32);
                }
                seen.store(signal as i32, Ordering::Release);
                eprintln!(
                    "scalpel: {signal}: stopping; the steps so far are reported \
                     (send it again to quit at once)"
                );
                stop.stop();
            }
        })
        .context("cannot start the signal thread")?;
    Ok(first)
}

/// The live line on stderr: rewritten in place on a terminal, one line a second otherwise.
pub(super) struct ProgressLine {
    enabled: bool,
    tty: bool,
    last_print: Option<Instant>,
    printed: bool,
}

impl ProgressLine {
    /// Shown on a terminal, or everywhere with `--progress`; never with `--no-progress`.
    pub(super) fn new(progress: bool, no_progress: bool) -> ProgressLine {
        let tty = std::io::stderr().is_terminal();
        ProgressLine {
            enabled: !no_progress && (progress || tty),
            tty,
            last_print: None,
            printed: false,
        }
    }

    pub(super) fn show(&mut self, p: &Progress<'_>) {
        if !self.enabled {
            return;
        }
        let every = if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        if self.last_print.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last_print = Some(Instant::now());
        let step = if p.steps > 1 {
            format!(" step {}/{}", p.step + 1, p.steps)
        } else {
            String::new()
        };
        let offered = p
            .offered_rps
            .map(|r| format!(" @{r:.0}/s"))
            .unwrap_or_default();
        let left = p
            .left
            .map(|d| format!(" | {}s left", d.as_secs()))
            .unwrap_or_default();
        let text = format!(
            "[{}]{step}{offered} | {:.0} req/s | mean {:.2} ms | {} done, {} errors{left}",
            p.target, p.rps, p.mean_latency_ms, p.completed, p.errors
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r{text}\x1b[K")
        } else {
            writeln!(err, "{text}")
        };
        self.printed = true;
    }

    pub(super) fn finish(&mut self) {
        if self.printed && self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

//! `scalpel load`: flags → a [`scalpel_load::Plan`] and [`scalpel_load::Target`]s, run,
//! print the summary table (on stderr when `--json -` takes stdout), write `--json`/`--html`
//! (with `--shard`, the JSON says which part of which run it is), exit 0 (SLO held or none),
//! 1 (broken), 2 (bad usage, or a result that could not be written), 128 + the signal (130
//! for Ctrl-C) when interrupted — after printing and writing what was measured.
//!
//! Templates come from `scalpel-requests`, process sampling from `scalpel-procstat`, output
//! from `scalpel-report`; the rules a plan must keep are `scalpel-load`'s
//! ([`scalpel_load::Plan::validate`]). This module maps flags (`args`, `build`), adapts the
//! request and process crates to the load crate's seams (`crate::sources`, `watch`), and
//! prints (`terminal`).

mod args;
mod build;
mod terminal;
mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use scalpel_load::result::RunResult;
use scalpel_load::{Model, Plan, StartAt, Stop};

pub(crate) use args::LoadArgs;
use build::{Built, build, duration_arg, fit_descriptors, traffic_fingerprint};
use terminal::{ProgressLine, watch_signals};

use crate::dashboard::Dashboard;
use crate::sources::RecordedRequests;

/// Runs `scalpel load`.
pub(crate) fn run(mut args: LoadArgs) -> anyhow::Result<ExitCode> {
    // Before any thread exists, so every thread inherits the mask and only the watcher
    // receives SIGINT and SIGTERM.
    let stop = Stop::new();
    let signal = watch_signals(stop.clone())?;
    let outputs = Outputs::check(&args)?;
    fit_descriptors(&mut args)?;
    let Built {
        plan,
        targets,
        watched,
        recorded,
    } = build(&args)?;
    if let Some(r) = &recorded {
        // Before a replay that may be long: what the file holds and what is skipped.
        let summary = r.source().summary();
        eprintln!(
            "scalpel: {} ({}): {}",
            r.source().path().display(),
            summary.format,
            summary.describe()
        );
    }
    // Before any load: the data file is read for the fingerprint only when sharded.
    let identity = match args.shard {
        Some(_) => {
            let traffic = traffic_fingerprint(&args, recorded.as_deref().map(|r| r.source()))?;
            Some(plan.identity(traffic, args.run_id.as_deref()))
        }
        None => None,
    };
    let linger = duration_arg("--dashboard-linger", &args.dashboard_linger)?;
    let dashboard = match args.dashboard {
        Some(addr) => {
            let d = Dashboard::start(addr, plan.model.name(), plan.slo.clone(), watched)?;
            tracing::info!("dashboard: http://{}/", d.addr());
            Some(d)
        }
        None => None,
    };
    let mut line = ProgressLine::new(args.progress, args.no_progress);
    say_when_the_clock_starts(&plan);
    let mut result = scalpel_load::run_until(
        &plan,
        targets,
        &mut |p| {
            line.show(p);
            if let Some(d) = &dashboard {
                d.progress(p);
            }
        },
        &stop,
    )?;
    line.finish();
    describe_run(&mut result, &plan, recorded.as_deref(), identity);
    if let Some(d) = &dashboard {
        d.finish(scalpel_report::html(&result));
    }
    let write_failed = outputs.write(&result)?;
    if let Some(d) = dashboard {
        // An open page fetches the report meanwhile; SIGINT or SIGTERM cut it short.
        d.close(linger, &stop);
    }
    let signal = signal.load(Ordering::Acquire);
    let broke = result.targets.iter().any(|t| t.breaking_point.is_some());
    Ok(if signal > 0 {
        ExitCode::from(128 + signal as u8)
    } else if write_failed {
        ExitCode::from(2)
    } else if broke {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// In a pod's log: why nothing happens yet.
fn say_when_the_clock_starts(plan: &Plan) {
    if let Some(at) = plan.start_at {
        let wait = StartAt::now().seconds_until(at);
        if wait > 1.0 {
            eprintln!("scalpel: the clock starts at {at} (in {wait:.0} s)");
        }
    }
}

/// What the engine cannot know: the recording the requests came from, and which part of
/// which run this shard is (said on stderr too when it started late).
fn describe_run(
    result: &mut RunResult,
    plan: &Plan,
    recorded: Option<&RecordedRequests>,
    identity: Option<scalpel_load::RunIdentity>,
) {
    if let Some(r) = recorded {
        let speed = match plan.model {
            Model::Recorded { speed } => Some(speed),
            _ => None,
        };
        result.config.recorded = Some(r.info(speed));
    }
    let Some(identity) = identity else { return };
    let late_steps = identity.stamp(result, plan);
    if late_steps > 0 {
        let first = result.shard.as_ref().and_then(|s| s.start_late_s);
        eprintln!(
            "scalpel: shard {} started {late_steps} step(s) more than a tenth of a step after \
             the common clock (the first {:.2} s after --start-at); `report merge` will flag it",
            plan.shard,
            first.unwrap_or(0.0)
        );
    }
}

/// Where the result goes: the table to stdout (stderr when `--json -`), `--json`, `--html`.
struct Outputs {
    json_to_stdout: bool,
    json: Option<PathBuf>,
    html: Option<PathBuf>,
}

impl Outputs {
    /// Checks, before any load, that the result files can be written.
    fn check(args: &LoadArgs) -> anyhow::Result<Outputs> {
        let json_to_stdout = args.json_to_stdout();
        let json = args.json.clone().filter(|_| !json_to_stdout);
        for path in json.iter().chain(&args.html) {
            scalpel_report::check_writable(path)?;
        }
        Ok(Outputs {
            json_to_stdout,
            json,
            html: args.html.clone(),
        })
    }

    /// The table first: whatever happens to the files, what was measured is on screen.
    /// Returns whether a file could not be written (each said on stderr); an error only
    /// when the table itself could not be shown.
    fn write(&self, result: &RunResult) -> anyhow::Result<bool> {
        let table = scalpel_report::summary_table(result);
        let shown = if self.json_to_stdout {
            let mut err = std::io::stderr().lock();
            err.write_all(table.as_bytes()).and_then(|()| err.flush())
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(table.as_bytes()).and_then(|()| out.flush())
        };
        if let Err(e) = shown
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            return Err(e.into());
        }
        let mut failed = false;
        let mut report = |written: Result<(), scalpel_report::ReportError>| {
            if let Err(e) = written {
                eprintln!("scalpel: {e}");
                failed = true;
            }
        };
        if self.json_to_stdout {
            // One line, so it can be picked out of a log that holds stderr too (kubectl logs).
            let mut out = std::io::stdout().lock();
            if let Err(e) = out
                .write_all(scalpel_report::to_json_line(result).as_bytes())
                .and_then(|()| out.flush())
            {
                report(Err(scalpel_report::ReportError::Write {
                    path: "stdout".into(),
                    error: e,
                }));
            }
        } else if let Some(path) = &self.json {
            report(scalpel_report::write_json(result, path));
        }
        if let Some(path) = &self.html {
            report(scalpel_report::write_html(result, path));
        }
        Ok(failed)
    }
}

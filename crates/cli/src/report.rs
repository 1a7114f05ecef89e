//! `scalpel report`: merge result files exactly, print the summary table, write the HTML page,
//! project the cost of a fleet.
//!
//! `merge` writes the merged JSON (stdout, or `-o`), the summary table on stderr and, with
//! `--html`, the page; it exits 1 when the merged run broke its SLO, 2 when the files cannot
//! be merged (a shard set that is incomplete, holds a shard twice, or mixes runs or settings
//! is named as such).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;

/// Arguments of `scalpel report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    #[command(subcommand)]
    command: ReportCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ReportCommand {
    /// Merge runs made at the same time on several machines, or the N shards of one
    /// `scalpel load --shard` run (histograms added, percentiles recomputed, the SLO judged
    /// again on the whole); JSON to stdout or to -o, the table on stderr; exit 1 when the
    /// merged run broke its SLO.
    Merge {
        /// Result files from `scalpel load --json`, two or more (or the one shard of a 1/1 run).
        #[arg(value_name = "RUN")]
        runs: Vec<PathBuf>,
        /// Write the merged result here (atomically) instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also write the self-contained HTML page of the merged run here.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Merge a target whose URL differs between the runs (the same service reached by
        /// another address from each machine).
        #[arg(long)]
        allow_different_urls: bool,
        /// Merge runs written by different scalpel versions.
        #[arg(long)]
        allow_different_versions: bool,
    },
    /// Print the summary table of a result file.
    Show {
        /// A result file.
        run: PathBuf,
    },
    /// Write one self-contained HTML page (tables and SVG plots) for a result file.
    Html {
        /// A result file.
        run: PathBuf,
        /// The page to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Project a fleet's vCPUs and yearly saving from each target's measured CPU per
    /// request (the first target is the baseline).
    Cost(CostArgs),
}

/// Arguments of `scalpel report cost`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  scalpel report cost fixed.json --fleet-qps 80000 --vcpu-hour-price 0.0416 --headroom 0.3\n\nvCPUs = fleet rate × CPU seconds per request ÷ (1 − headroom), rounded up;\nsaving = (baseline vCPUs − target vCPUs) × price × 8,760 h a year."
)]
struct CostArgs {
    /// A result file of `scalpel load` with --watch-pid/--watch-port (CPU sampled).
    run: PathBuf,
    /// The fleet's total rate, requests per second.
    #[arg(long, value_name = "N")]
    fleet_qps: f64,
    /// Price of one vCPU for one hour, in US dollars (e.g. 0.0416).
    #[arg(long, value_name = "DOLLARS")]
    vcpu_hour_price: String,
    /// Share of each vCPU kept idle, 0 to below 1 (0.3 = run at most 70% busy).
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    headroom: f64,
    /// The step to read (1 = first, as the tables number them); needed when the run has
    /// several steps (a ramp).
    #[arg(long, value_name = "K")]
    step: Option<u32>,
    /// Print the projection as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs `scalpel report`.
pub(crate) fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ReportCommand::Merge {
            runs,
            output,
            html,
            allow_different_urls,
            allow_different_versions,
        } => {
            if runs.is_empty() {
                bail!(
                    "report merge: missing the result files to merge (RUN...): give two or \
                     more files written by `scalpel load --json`"
                );
            }
            refuse_repeated(&runs)?;
            for path in [&output, &html].into_iter().flatten() {
                scalpel_report::check_writable(path)?;
            }
            let paths = runs;
            let runs = read_all(&paths)?;
            // One shard file is not refused here: the merge names the shards missing.
            if let [one] = runs.as_slice()
                && one.shard.is_none()
            {
                bail!(
                    "report merge: one result file ({}) is not a merge: give two or more",
                    paths[0].display()
                );
            }
            let options = scalpel_report::MergeOptions {
                allow_different_urls,
                allow_different_versions,
            };
            let merged = scalpel_report::merge_with(&runs, options)
                .map_err(|err| name_the_file(err, &paths))?;
            // The table on stderr: stdout may be the JSON, and is a file's content either way.
            let table = scalpel_report::summary_table(&merged);
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(table.as_bytes()).and_then(|()| err.flush());
            match output {
                Some(path) => scalpel_report::write_json(&merged, &path)?,
                None => print_stdout(&scalpel_report::to_json_string(&merged))?,
            }
            if let Some(path) = &html {
                scalpel_report::write_html(&merged, path)?;
            }
            if merged.targets.iter().any(|t| t.breaking_point.is_some()) {
                return Ok(ExitCode::from(1));
            }
        }
        ReportCommand::Show { run } => {
            let result = scalpel_report::read_json(&run)?;
            print_stdout(&scalpel_report::summary_table(&result))?;
        }
        ReportCommand::Html { run, output } => {
            let result = scalpel_report::read_json(&run)?;
            scalpel_report::write_html(&result, &output)?;
        }
        ReportCommand::Cost(args) => cost(args)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn cost(args: CostArgs) -> anyhow::Result<()> {
    let price = scalpel_report::VcpuHourPrice::parse(&args.vcpu_hour_price)?;
    let mut options =
        scalpel_report::CostOptions::new(args.fleet_qps, price)?.headroom(args.headroom)?;
    if let Some(step) = args.step {
        options = options.step(step);
    }
    let result = scalpel_report::read_json(&args.run)?;
    let projection =
        scalpel_report::cost_projection(&result, &args.run.display().to_string(), &options)?;
    if args.json {
        let mut text = anyhow::Context::context(
            serde_json::to_string_pretty(&projection.to_json()),
            "cannot serialize the projection",
        )?;
        text.push('\n');
        print_stdout(&text)
    } else {
        print_stdout(&projection.table())
    }
}

/// A histogram that does not decode is found by the merge, which knows the run by its
/// position: say which file it is.
fn name_the_file(err: scalpel_report::ReportError, paths: &[PathBuf]) -> anyhow::Error {
    match &err {
        scalpel_report::ReportError::RunHistogram { run, .. } => match paths.get(run - 1) {
            Some(path) => anyhow::anyhow!("{}: {err}", path.display()),
            None => err.into(),
        },
        _ => err.into(),
    }
}

/// Reads result files on up to as many threads as there are cores; the first bad file in
/// the order given is the one reported. Histograms are not decoded here: the merge decodes
/// each once (it was twice, a check here and the merge, about half of a large merge's time).
fn read_all(
    paths: &[PathBuf],
) -> Result<Vec<scalpel_load::result::RunResult>, scalpel_report::ReportError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(paths.len())
        .max(1);
    let chunk = paths.len().div_ceil(threads).max(1);
    let read = std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|p| scalpel_report::read_json_for_merge(p))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a reading thread panicked"))
            .collect::<Vec<_>>()
    });
    read.into_iter().collect()
}

/// Refuses a file named twice (also through another path to it): merged with itself, a
/// run would count every request twice.
fn refuse_repeated(runs: &[PathBuf]) -> anyhow::Result<()> {
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for path in runs {
        // A file that cannot be resolved is reported by the read that follows.
        let Ok(real) = std::fs::canonicalize(path) else {
            continue;
        };
        if let Some((_, earlier)) = seen.iter().find(|(r, _)| *r == real) {
            bail!(
                "report merge: {} and {} are the same file; a run merged with itself would \
                 count every request twice",
                earlier.display(),
                path.display()
            );
        }
        seen.push((real, path));
    }
    Ok(())
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly, as ripgrep does.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => anyhow::Context::context(other, "cannot write to stdout"),
    }
}

//! `scalpel report`: merge result files exactly, print the summary table, write the HTML page,
//! project the cost of a fleet.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `scalpel report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    #[command(subcommand)]
    command: ReportCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ReportCommand {
    /// Merge runs made at the same time on several machines (histograms added, percentiles
    /// recomputed); JSON to stdout or to -o.
    Merge {
        /// Result files from `scalpel load --json`, two or more.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        /// Write the merged result here (atomically) instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
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
        ReportCommand::Merge { runs, output } => {
            let runs = runs
                .iter()
                .map(|path| scalpel_report::read_json(path))
                .collect::<Result<Vec<_>, _>>()?;
            let merged = scalpel_report::merge(&runs)?;
            match output {
                Some(path) => scalpel_report::write_json(&merged, &path)?,
                None => print_stdout(&scalpel_report::to_json_string(&merged))?,
            }
        }
        ReportCommand::Show { run } => {
            let result = scalpel_report::read_json(&run)?;
            print_stdout(&scalpel_report::summary_table(&result))?;
        }
        ReportCommand::Html { run, output } => {
            let result = scalpel_report::read_json(&run)?;
            std::fs::write(&output, scalpel_report::html(&result))
                .with_context(|| format!("cannot write {}", output.display()))?;
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
        let mut text = serde_json::to_string_pretty(&projection.to_json())
            .context("cannot serialize the projection")?;
        text.push('\n');
        print_stdout(&text)
    } else {
        print_stdout(&projection.table())
    }
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly, as ripgrep does.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

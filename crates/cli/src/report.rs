//! `scalpel report`: merge result files exactly, print the summary table, write the HTML page.

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
    }
    Ok(ExitCode::SUCCESS)
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

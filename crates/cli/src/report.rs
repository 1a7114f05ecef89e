//! `scalpel report`: merge result files exactly, print the summary table, write the HTML page.

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
    /// Merge runs made at the same time on several machines (histograms added, percentiles
    /// recomputed); JSON to stdout or to -o.
    Merge {
        /// Result files from `scalpel load --json`, two or more.
        #[arg(value_name = "RUN")]
        runs: Vec<PathBuf>,
        /// Write the merged result here (atomically) instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
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
}

/// Runs `scalpel report`.
pub(crate) fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ReportCommand::Merge {
            runs,
            output,
            allow_different_urls,
            allow_different_versions,
        } => {
            match runs.as_slice() {
                [] => bail!(
                    "report merge: missing the result files to merge (RUN...): give two or \
                     more files written by `scalpel load --json`"
                ),
                [one] => bail!(
                    "report merge: one result file ({}) is not a merge: give two or more",
                    one.display()
                ),
                _ => {}
            }
            refuse_repeated(&runs)?;
            if let Some(path) = &output {
                scalpel_report::check_writable(path)?;
            }
            let runs = runs
                .iter()
                .map(|path| scalpel_report::read_json(path))
                .collect::<Result<Vec<_>, _>>()?;
            let options = scalpel_report::MergeOptions {
                allow_different_urls,
                allow_different_versions,
            };
            let merged = scalpel_report::merge_with(&runs, options)?;
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
            scalpel_report::write_html(&result, &output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
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

//! `scalpel report`.

use std::process::ExitCode;

/// Arguments of `scalpel report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {}

/// Runs `scalpel report`.
pub(crate) fn run(_args: ReportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("scalpel report: not built yet")
}

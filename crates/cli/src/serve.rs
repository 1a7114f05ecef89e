//! `scalpel serve`.

use std::process::ExitCode;

/// Arguments of `scalpel serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {}

/// Runs `scalpel serve`.
pub(crate) fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("scalpel serve: not built yet")
}

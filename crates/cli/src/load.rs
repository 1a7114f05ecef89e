//! `scalpel load`.

use std::process::ExitCode;

/// Arguments of `scalpel load`.
#[derive(Debug, clap::Args)]
pub(crate) struct LoadArgs {}

/// Runs `scalpel load`.
pub(crate) fn run(_args: LoadArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("scalpel load: not built yet")
}

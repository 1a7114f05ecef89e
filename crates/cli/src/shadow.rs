//! `scalpel shadow`.

use std::process::ExitCode;

/// Arguments of `scalpel shadow`.
#[derive(Debug, clap::Args)]
pub(crate) struct ShadowArgs {}

/// Runs `scalpel shadow`.
pub(crate) fn run(_args: ShadowArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("scalpel shadow: not built yet")
}

//! `dlrs bench`: throughput workloads through the core's loader.

use std::process::ExitCode;

use anyhow::Result;

use crate::args::BenchArgs;

/// Runs `dlrs bench`.
pub fn run(_args: &BenchArgs) -> Result<ExitCode> {
    anyhow::bail!("not yet")
}

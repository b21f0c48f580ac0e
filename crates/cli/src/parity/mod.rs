//! `dlrs parity`: transform chains in Rust against Pillow/NumPy.

use std::process::ExitCode;

use anyhow::Result;

use crate::args::ParityArgs;

/// Runs `dlrs parity`.
pub fn run(_args: &ParityArgs) -> Result<ExitCode> {
    anyhow::bail!("not yet")
}

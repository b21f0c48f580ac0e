//! The `dlrs` command: prefetch templated items into a directory, run throughput benchmarks,
//! check the transforms against Pillow, serve test bodies with latency.
//!
//! [`run`] is the whole command: the `dlrs` binary calls it with the process's arguments, and
//! the Python package's `dlrs` console script calls it through `_native.cli_main`.
//!
//! - [`args`]: the command line (clap), its help and examples.
//! - [`prefetch`]: `dlrs prefetch`: templated items fetched into files, resumable.
//! - [`bench`](mod@bench): `dlrs bench`: loader overhead, files, images and HTTP workloads through the core.
//! - [`parity`]: `dlrs parity`: transform chains in Rust against Pillow/NumPy in a Python.
//! - [`server`]: the loopback HTTP server with latency that `bench http` (and tests) start, and
//!   `dlrs serve`, which runs it in a process of its own (the server of the Python benchmarks).
//! - [`values`]: parsing `NAME=VALUES` columns, headers and options.
//! - [`synth`]: synthetic images (gradients with noise) and their PNG encoding.
//! - [`progress`]: the progress bar on stderr, drawn only on a terminal.
//!
//! Exit codes: 0 success; 1 the work failed (an item not fetched, a transform that differs, an
//! I/O error); 2 a bad argument.

pub mod args;
pub mod bench;
pub mod parity;
pub mod prefetch;
pub mod progress;
pub mod server;
pub mod synth;
mod table;
pub mod values;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use args::{Cli, Command};

/// The exit code of a run whose work failed.
pub const EXIT_FAILED: u8 = 1;
/// The exit code of a bad argument (clap's own code for usage errors).
pub const EXIT_USAGE: u8 = 2;

/// A bad argument found after parsing (a template that does not parse, a column file that cannot
/// be read): reported like clap's errors, with exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// What `dlrs --version` names as the command's runtime when no Python runs it (the binary).
pub const WITHOUT_PYTHON: &str = "Rust binary, without Python";

/// The line `dlrs --version` prints after `dlrs `: this crate's version (the workspace's, which
/// is also the Python package's) and what runs the command, e.g. `0.3.0 (CPython 3.14.7,
/// free-threaded)`.
pub fn version(runtime: &str) -> String {
    format!("{} ({runtime})", env!("CARGO_PKG_VERSION"))
}

/// Runs the `dlrs` command with `args` (the first one is the program name) and returns its exit
/// code. Messages go to stdout (results) and stderr (progress, errors).
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    ExitCode::from(run_status(args, WITHOUT_PYTHON))
}

/// [`run`], returning the exit status as a number (for callers that hand it on, such as the
/// Python console script), with `runtime` naming what runs the command in `--version`.
pub fn run_status(args: impl IntoIterator<Item = OsString>, runtime: &str) -> u8 {
    let parsed = Cli::command()
        .version(version(runtime))
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with code 0; errors to stderr with code 2.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE);
        }
    };
    let outcome = match cli.command {
        Command::Prefetch(a) => prefetch::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Parity(a) => parity::run(&a),
        Command::Serve(a) => server::run(
            &a,
            &mut std::io::stdout(),
            &mut std::io::stdin().lock(),
            &mut std::io::stderr(),
        ),
    };
    outcome.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        if is_usage(&e) {
            EXIT_USAGE
        } else {
            EXIT_FAILED
        }
    })
}

/// Whether `e` is a bad argument: ours, or an invalid argument that dlrs-io refused.
fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<UsageError>()
            || matches!(
                cause.downcast_ref::<dlrs_io::Error>(),
                Some(dlrs_io::Error::InvalidArgument(_) | dlrs_io::Error::InvalidType(_))
            )
    })
}

//! `dlrs`: the command-line front of dataloader-rs (everything is in the `dlrs_cli` library).

fn main() -> std::process::ExitCode {
    dlrs_cli::run(std::env::args_os())
}

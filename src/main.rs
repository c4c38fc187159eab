//! The `tenantplane` binary: parses the command line and runs the chosen subcommand.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tenantplane::cli::Cli::parse().run().await
}

//! The client commands of the `tenantplane` binary: they talk to a Tenantplane server's REST API
//! (`login`, `cp`, `kubeconfig`, `join-token`, `op`, `credential`, `completion`).
//! Exit codes: [`error::EXIT_CODES`].

pub mod config;
pub mod cp;
pub mod credential;
pub mod error;
pub mod fs;
pub mod http;
pub mod join_token;
pub mod kubeconfig;
pub mod login;
pub mod op;
pub mod origin;
pub mod output;
pub mod progress;

pub use error::{EXIT_CODES, exit};

/// `tenantplane completion SHELL`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl CompletionArgs {
    /// Prints the completion script of `command` for the shell.
    pub fn run(self, command: &mut clap::Command) {
        clap_complete::generate(self.shell, command, "tenantplane", &mut std::io::stdout());
    }
}

//! `tenantplane op get|wait ID`, and the wait every `--wait` uses: long polls until the operation is done,
//! with its stages on stderr; Ctrl-C stops waiting (the operation goes on on the server).

use clap::Subcommand;

use super::{
    config::Session,
    error::{ClientError, Result},
    http::{Api, WAIT_SECONDS},
    output::{self, Format},
    progress::Progress,
};
use crate::{domain::OperationState, service::model::Operation};

/// `tenantplane op …`: an operation of the tenant.
#[derive(Debug, clap::Args)]
pub struct OpArgs {
    /// Tenant slug (default: the one saved by `login`).
    #[arg(long, env = "TENANTPLANE_TENANT", global = true)]
    tenant: Option<String>,
    #[command(subcommand)]
    command: OpCommand,
}

/// The operation subcommands.
#[derive(Debug, Subcommand)]
enum OpCommand {
    /// Print an operation.
    Get {
        /// Operation id.
        id: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Wait until an operation is done, showing its stages; exits 5 if it failed.
    Wait {
        /// Operation id.
        id: String,
        /// Output format of the finished operation.
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
}

impl OpArgs {
    /// Runs the subcommand.
    pub async fn run(self) -> Result<()> {
        let session = Session::load(self.tenant)?;
        let tenant = session.tenant()?;
        match self.command {
            OpCommand::Get { id, output } => {
                let op = session.api.operation(tenant, &id, None).await?;
                output::print(output, &op, || output::operation(&op))
            }
            OpCommand::Wait { id, output } => {
                let first = session.api.operation(tenant, &id, None).await?;
                let done = wait(&session.api, tenant, first, &format!("operation {id}")).await?;
                output::print(output, &done, || output::operation(&done))
            }
        }
    }
}

/// Waits until `op` of `tenant` is done, showing its stages under `label`. A failed operation is
/// [`ClientError::OperationFailed`]; Ctrl-C is [`ClientError::Interrupted`].
pub async fn wait(api: &Api, tenant: &str, op: Operation, label: &str) -> Result<Operation> {
    // Registered before anything is shown, so a Ctrl-C from then on is ours.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| ClientError::Other(format!("cannot handle Ctrl-C: {e}")))?;
    let id = op.id.to_string();
    let mut progress = Progress::start(label);
    progress.update(&op);
    let poll = async {
        let mut current = op;
        while !current.done {
            current = api.operation(tenant, &id, Some(WAIT_SECONDS)).await?;
            progress.update(&current);
        }
        Ok::<_, ClientError>(current)
    };
    let result = tokio::select! {
        done = poll => done,
        _ = interrupt.recv() => Err(ClientError::Interrupted { id: id.clone(), tenant: tenant.to_string() }),
    };
    progress.finish();
    let done = result?;
    if done.state == OperationState::Failed {
        return Err(ClientError::OperationFailed {
            id,
            reason: done.reason,
            error: done.error,
        });
    }
    Ok(done)
}

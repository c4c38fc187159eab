//! `tenantplane-dev`: the development tools of one machine, `up` (the stack `make run` starts), `runner`
//! (the pod-less runner against any management cluster), `join` (a hollow node joins a tenant cluster
//! with a `kubeadm join` command) and `test-env` (the shared services of a nextest run). Not part of
//! the production binary.

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// Tenantplane's development tools.
#[derive(Debug, Parser)]
#[command(name = "tenantplane-dev", version, about)]
struct Cli {
    /// Log format; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, env = "TENANTPLANE_LOG_FORMAT", value_enum, default_value_t = tenantplane_runtime::telemetry::LogFormat::Pretty, global = true)]
    log_format: tenantplane_runtime::telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run control-plane Deployments of a management cluster as local processes (the pod-less runner).
    Runner(RunnerArgs),
    /// Start PostgreSQL, etcd, kube-apiserver and Tenantplane with the runner; print URLs and tokens.
    Up(UpArgs),
    /// Join a hollow node (kubemark's kubelet) to a tenant cluster with a `kubeadm join` command; runs
    /// until Ctrl-C.
    Join(JoinArgs),
    /// The shared services of a nextest run (nextest's setup script; see `.config/nextest.toml`).
    #[command(subcommand)]
    TestEnv(TestEnvCommand),
}

/// `tenantplane-dev test-env`.
#[derive(Debug, Subcommand)]
enum TestEnvCommand {
    /// Start the services detached and wait until they serve; write `TENANTPLANE_TEST_ENV=<dir>` to
    /// `$NEXTEST_ENV` (or print it). They stop when the watched process ends.
    Start {
        /// Process to outlive no longer than (default: the nearest `cargo-nextest` ancestor, else the parent).
        #[arg(long)]
        watch: Option<u32>,
        /// Seconds to wait for the services.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// The daemon `start` launches.
    #[command(hide = true)]
    Serve {
        /// Process whose end stops the services.
        #[arg(long)]
        watch: u32,
        /// The daemon's own log, removed at a clean end.
        #[arg(long)]
        log: std::path::PathBuf,
    },
}

/// `tenantplane-dev join`.
#[derive(Debug, clap::Args)]
struct JoinArgs {
    /// The whole `kubeadm join <host:port> --token <id>.<secret> --discovery-token-ca-cert-hash sha256:<hex>`
    /// command, as one (quoted) argument.
    command: String,
    /// The node's name (default: the command's `--node-name`, else `hollow-<random>`).
    #[arg(long)]
    name: Option<String>,
    /// Directory for the node's files (default: a scratch directory, removed at the end).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// A kubeconfig of the tenant cluster that may delete Nodes, to delete the Node at the end (the
    /// node's own credentials may not).
    #[arg(long)]
    tenant_kubeconfig: Option<std::path::PathBuf>,
    /// Seconds that discovery, and then the way to Ready, may each take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

/// `tenantplane-dev runner`.
#[derive(Debug, clap::Args)]
struct RunnerArgs {
    /// Path of a kubeconfig for the management cluster; default: in-cluster or `KUBECONFIG`.
    #[arg(long, env = "TENANTPLANE_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Directory of the pods (volumes, logs); default `$TMPDIR/tenantplane-<pid>/pods`.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Only Deployments of these namespaces (repeatable; default: all).
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
}

/// `tenantplane-dev up`.
#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Address of the HTTP API.
    #[arg(long, env = "TENANTPLANE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tenantplane_runtime::telemetry::init(cli.log_format);
    tenantplane_runtime::install_crypto_provider();
    let result = match cli.command {
        Command::Runner(args) => runner(args).await,
        Command::Up(args) => up(args).await,
        Command::Join(args) => join(args).await,
        Command::TestEnv(command) => test_env(command).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `tenantplane-dev runner`.
async fn runner(args: RunnerArgs) -> anyhow::Result<()> {
    let client = tenantplane_crd::client(args.kubeconfig.as_deref())
        .await
        .context("connect to the management cluster")?;
    let dir = match args.dir {
        Some(dir) => dir,
        None => tenantplane_devenv::localenv::workdir()?.join("pods"),
    };
    let mut settings = tenantplane_devenv::runner::RunnerSettings::new(dir.clone());
    if !args.namespaces.is_empty() {
        settings.namespaces = Some(args.namespaces.into_iter().collect());
    }
    let mut runner =
        tenantplane_devenv::runner::Runner::start(client, settings).context("start the runner")?;
    println!("tenantplane runner running; pods in {}", dir.display());
    tenantplane_runtime::shutdown_signal().await;
    runner.stop().await;
    Ok(())
}

/// `tenantplane-dev up` (what `make run` starts).
async fn up(args: UpArgs) -> anyhow::Result<()> {
    let stack = tenantplane_devenv::dev::DevStack::start(tenantplane_devenv::dev::DevOptions {
        listen: args.listen,
        progress: true,
    })
    .await?;
    println!("{}", stack.banner());
    tenantplane_runtime::shutdown_signal().await;
    eprintln!("[dev up] stopping");
    stack.stop().await;
    eprintln!("[dev up] stopped; nothing left running");
    Ok(())
}

/// `tenantplane-dev test-env`.
async fn test_env(command: TestEnvCommand) -> anyhow::Result<()> {
    use std::io::Write as _;
    use tenantplane_devenv::testenv;
    match command {
        TestEnvCommand::Start { watch, timeout } => {
            let timeout = std::time::Duration::from_secs(timeout);
            let dir = tokio::task::spawn_blocking(move || testenv::start(watch, timeout)).await??;
            let line = format!("{}={}", testenv::ENV_VAR, dir.display());
            match std::env::var_os("NEXTEST_ENV") {
                Some(path) => writeln!(std::fs::OpenOptions::new().append(true).open(path)?, "{line}")?,
                None => println!("export {line}"),
            }
            Ok(())
        }
        TestEnvCommand::Serve { watch, log } => testenv::serve(watch, &log).await,
    }
}

/// `tenantplane-dev join`.
async fn join(args: JoinArgs) -> anyhow::Result<()> {
    use tenantplane_devenv::localenv::node::session;
    session::join(session::JoinOptions {
        command: args.command,
        name: args.name,
        dir: args.dir,
        tenant_kubeconfig: args.tenant_kubeconfig,
        timeout: std::time::Duration::from_secs(args.timeout),
    })
    .await
}

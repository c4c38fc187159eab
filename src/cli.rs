//! Command-line entry point: `tenantplane <subcommand>`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use sqlx::postgres::PgPoolOptions;

use crate::{
    api,
    config::{GlobalArgs, ServeArgs},
    localenv::postgres::LocalPostgres,
    telemetry,
};

/// Tenantplane: control-plane-as-a-service for Kamaji-compatible tenant control planes.
#[derive(Debug, Parser)]
#[command(name = "tenantplane", version, about)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version.
    Version,
    /// Serve the HTTP API (`/healthz`, `/readyz`).
    Serve(ServeArgs),
    /// Write the CRD YAML of TenantControlPlane and DataStore.
    Crdgen(crate::k8s::crd::CrdgenArgs),
}

impl Cli {
    /// Runs the chosen subcommand and maps errors to a non-zero exit code.
    pub async fn run(self) -> ExitCode {
        telemetry::init(self.global.log_format);
        let result = match self.command {
            Command::Version => {
                println!("tenantplane {}", crate::VERSION);
                Ok(())
            }
            Command::Serve(args) => serve(args).await,
            Command::Crdgen(args) => args.run(),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!("{err:#}");
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        }
    }
}

/// `tenantplane serve`: connects to PostgreSQL (starting a local one when `DATABASE_URL` is unset) and serves HTTP.
async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    args.validate().map_err(anyhow::Error::msg)?;
    let mut _local_pg = None;
    let database_url = match args.database_url.as_ref().filter(|url| !url.expose().is_empty()) {
        Some(url) => url.expose().clone(),
        None => {
            tracing::info!(dir = %args.local_dir.display(), "DATABASE_URL is unset: starting a local PostgreSQL");
            let pg = LocalPostgres::start(args.local_dir.clone())
                .await
                .context("start the local PostgreSQL")?;
            let url = pg.url();
            tracing::info!(port = pg.port(), "local PostgreSQL is ready");
            _local_pg = Some(pg);
            url
        }
    };
    let db = PgPoolOptions::new()
        .max_connections(args.db_max_connections)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&database_url)
        .await
        .context("connect to PostgreSQL")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving HTTP");
    println!("tenantplane serving on http://{addr}");
    axum::serve(listener, api::router(api::AppState { db }))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("stopped");
    drop(_local_pg);
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

//! Tenantplane: control-plane-as-a-service in front of Kamaji-compatible `TenantControlPlane`s.
//!
//! The binary (`src/main.rs`) only dispatches to [`cli`]; everything lives here so that tests and
//! every subcommand link the same code.

pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod controller;
pub mod datastore;
pub mod dev;
pub mod domain;
pub mod k8s;
pub mod localenv;
pub mod pki;
pub mod placement;
pub mod runner;
pub mod secret;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod translate;
pub mod worker;

/// The crate version, as printed by `tenantplane version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

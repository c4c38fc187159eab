//! Tenantplane: control-plane-as-a-service in front of Kamaji-compatible `TenantControlPlane`s.
//!
//! This package is the `tenantplane` binary. Its own modules are the command line ([`cli`]), the API
//! client commands ([`client`]), its configuration ([`config`]) and logging ([`telemetry`]); the rest
//! lives in the workspace crates, re-exported here under the module names the binary and the tests use.
//! The dev-tooling crate (`tenantplane-devenv`) is not among them: only tests and benches depend on it.

pub use tenantplane_api as api;
pub use tenantplane_controller as controller;
pub use tenantplane_core::{domain, placement, secret, translate};
pub use tenantplane_crd as k8s;
pub use tenantplane_datastore as datastore;
pub use tenantplane_pki as pki;
pub use tenantplane_runtime::{self as runtime, telemetry};
pub use tenantplane_service::{self as service, auth};
pub use tenantplane_store as store;
pub use tenantplane_worker as worker;

pub mod cli;
pub mod client;
pub mod config;

/// The crate version, as printed by `tenantplane version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

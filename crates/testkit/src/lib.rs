//! What Tenantplane's tests and benchmarks share: the one TenantControlPlane fixture builder ([`tcp`]),
//! the test app builder ([`app::spawn`]), which starts the production app ([`crate::api::App`]) on
//! `127.0.0.1:0` with test defaults, and polling helpers ([`eventually`]).
//!
//! The server and controller crates use it as a dev-dependency in their unit tests too: the fixture's
//! type is `tenantplane-crd`'s, which both sides link once.

use tenantplane_api as api;
use tenantplane_core::{domain, translate};
use tenantplane_crd as k8s;
use tenantplane_service::{self as service, auth};
use tenantplane_store as store;

pub mod app;
mod fixtures;
mod wait;

pub use fixtures::{TcpFixture, tcp};
pub use wait::{eventually, processes_mentioning};

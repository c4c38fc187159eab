//! What Tenantplane's integration tests (`tests/it`) and benchmarks share: the one TenantControlPlane
//! fixture builder ([`tcp`]) and the test app builder ([`app::spawn`]), which starts the production app
//! ([`crate::api::App`]) on `127.0.0.1:0` with test defaults.
//!
//! Unit tests inside `src/` cannot use this crate's types (it links its own copy of the library), but
//! they can use a fixture's JSON: `serde_json::from_value(tcp("ns", "a").json())`.

use tenantplane_core::domain;
use tenantplane_crd as k8s;
use tenantplane_server::{api, auth, service, store};

pub mod app;
mod fixtures;

mod wait;

pub use fixtures::{TcpFixture, tcp};
pub use wait::{eventually, processes_mentioning};

//! What Tenantplane's integration tests (`tests/it`) and benchmarks share: the one TenantControlPlane
//! fixture builder ([`tcp`]) and the test app builder ([`app::spawn`]), which starts the production app
//! ([`tenantplane::api::App`]) on `127.0.0.1:0` with test defaults.
//!
//! Unit tests inside `src/` cannot use this crate's types (it links its own copy of the library), but
//! they can use a fixture's JSON: `serde_json::from_value(tcp("ns", "a").json())`.

pub mod app;
mod fixtures;

pub use fixtures::{TcpFixture, tcp};

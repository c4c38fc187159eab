//! The API (REST, GraphQL), its service layer, authentication, the PostgreSQL store and the sync worker.

use tenantplane_core::domain;
use tenantplane_core::placement;
use tenantplane_core::translate;
use tenantplane_crd as k8s;

pub mod api;
pub mod auth;
pub mod service;
pub mod store;
pub mod worker;

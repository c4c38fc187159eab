//! Pure domain rules, placement and translation of a request into a TenantControlPlane.

use tenantplane_crd as k8s;

pub mod domain;
pub mod placement;
pub mod secret;
pub mod translate;

//! Attacks on the sync worker's status-back through a decoy TenantControlPlane.

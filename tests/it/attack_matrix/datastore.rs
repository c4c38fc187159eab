//! Attacks on a shared DataStore through the TenantControlPlane spec and status.

//! Status fields of a TenantControlPlane.

use super::*;

fn now_rfc3339(now: Timestamp) -> String {
    now.to_string()
}

/// A `SecretStatus` for an applied Secret; `lastUpdate` moves only when the checksum changes, so an
/// unchanged reconcile writes an identical status (and triggers no watch event).
pub fn secret_status(
    secret: &Secret,
    previous: Option<&crate::k8s::crd::SecretStatus>,
    now: Timestamp,
) -> crate::k8s::crd::SecretStatus {
    let checksum = secret.annotations().get(CHECKSUM_ANNOTATION).cloned();
    let last_update = match previous {
        Some(p) if p.checksum == checksum && p.last_update.is_some() => p.last_update.clone(),
        _ => Some(now_rfc3339(now)),
    };
    crate::k8s::crd::SecretStatus {
        secret_name: secret.metadata.name.clone(),
        checksum,
        last_update,
    }
}

/// A `SetupStatus`; `lastUpdate` moves only when something else changed.
pub fn setup_status(
    space: &TenantSpace,
    checksum: Option<String>,
    previous: Option<&SetupStatus>,
    now: Timestamp,
) -> SetupStatus {
    let mut setup = SetupStatus {
        schema: Some(space.schema().to_string()),
        user: Some(space.user().to_string()),
        last_update: None,
        checksum,
    };
    setup.last_update = match previous {
        Some(p) if p.schema == setup.schema && p.user == setup.user && p.checksum == setup.checksum => {
            p.last_update.clone().or_else(|| Some(now_rfc3339(now)))
        }
        _ => Some(now_rfc3339(now)),
    };
    setup
}

/// Storage status with everything recorded so far; the datastore phase fills it step by step.
pub fn initial_storage(tcp: &TenantControlPlane) -> StorageStatus {
    tcp.status
        .as_ref()
        .and_then(|s| s.storage.clone())
        .unwrap_or_default()
}

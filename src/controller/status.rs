//! Writes the status subresource with server-side apply: each writer owns only the fields it sends.

use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{DATASTORE_PHASE_MANAGER, Error, FIELD_MANAGER};
use crate::k8s::crd::{DataStore, DataStoreStatus, StorageStatus, TenantControlPlane};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Applies a DataStore's whole status.
pub async fn datastore(client: &kube::Client, name: &str, status: &DataStoreStatus) -> Result<(), Error> {
    let patch = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "DataStore",
        "status": status,
    });
    Api::<DataStore>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// Applies what the datastore phase owns of a TenantControlPlane's status: `storage` and its
/// conditions (other phases own theirs under their own field managers).
pub async fn control_plane_storage(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    storage: Option<&StorageStatus>,
    conditions: &[Condition],
) -> Result<(), Error> {
    let mut status = serde_json::Map::new();
    if let Some(storage) = storage {
        status.insert(
            "storage".into(),
            serde_json::to_value(storage).map_err(|e| Error::Invalid {
                reason: "SerializationFailed",
                message: e.to_string(),
            })?,
        );
    }
    status.insert("conditions".into(), json!(conditions));
    let patch = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "status": status,
    });
    Api::<TenantControlPlane>::namespaced(client.clone(), namespace)
        .patch_status(
            name,
            &PatchParams::apply(DATASTORE_PHASE_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

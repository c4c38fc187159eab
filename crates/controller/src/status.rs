//! Writes a DataStore's status subresource with server-side apply (a TenantControlPlane's is written by
//! [`tenant_control_plane::status`](super::tenant_control_plane::status)).

use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{Error, FIELD_MANAGER};
use crate::k8s::crd::{DataStore, DataStoreStatus};

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

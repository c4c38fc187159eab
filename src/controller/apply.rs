//! Writes: server-side apply of owned Secrets under [`FIELD_MANAGER`], and finalizers.

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Resource, ResourceExt as _,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use super::{Error, FIELD_MANAGER};

/// Applies a Secret the controller owns (server-side apply, forced: the controller is its only writer).
pub async fn secret(client: &kube::Client, secret: &Secret) -> Result<Secret, Error> {
    let namespace = secret
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let name = secret
        .metadata
        .name
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.name"))?;
    Ok(Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(secret),
        )
        .await?)
}

/// Whether `obj` carries `finalizer`.
pub fn has_finalizer<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// Sets the finalizer list, guarded by `resourceVersion` so a concurrent change is never lost (a 409
/// becomes a transient error and the reconcile runs again).
async fn set_finalizers<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.resource_version(),
        }
    });
    Ok(api
        .patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?)
}

/// Adds `finalizer` unless present.
pub async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if has_finalizer(obj, finalizer) {
        return Ok(());
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    set_finalizers(api, obj, finalizers).await.map(|_| ())
}

/// Removes `finalizer` if present.
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if !has_finalizer(obj, finalizer) {
        return Ok(());
    }
    let finalizers = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    match set_finalizers(api, obj, finalizers).await {
        Err(Error::Kube(kube::Error::Api(status))) if status.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Applies a namespaced object the controller owns (server-side apply under [`FIELD_MANAGER`], forced).
pub async fn object<K>(client: &kube::Client, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let namespace = obj
        .meta()
        .namespace
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let name = obj
        .meta()
        .name
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.name"))?;
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

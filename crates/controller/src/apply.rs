//! Writes: server-side apply (and creates) of owned objects under [`FIELD_MANAGER`], and finalizers.

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Resource, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER, k8s::crd::TenantControlPlane};

/// Applies a Secret the controller owns (server-side apply, forced: the controller is its only writer),
/// and remembers the result until the Secret cache has it.
pub async fn secret(ctx: &Context, secret: &Secret) -> Result<Secret, Error> {
    let applied = object(&ctx.client, secret).await?;
    ctx.caches.wrote_secret(&applied);
    Ok(applied)
}

/// Creates a Secret the controller owns (`None`: it exists already). Only for a Secret the cache does
/// not have: a create can never overwrite one the cache merely lags behind.
pub async fn create_secret(ctx: &Context, secret: &Secret) -> Result<Option<Secret>, Error> {
    let (namespace, _) = object_key(secret)?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .create(&params, secret)
        .await
    {
        Ok(created) => {
            ctx.caches.wrote_secret(&created);
            Ok(Some(created))
        }
        Err(kube::Error::Api(status)) if status.code == 409 && status.reason == "AlreadyExists" => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Writes a Secret whose content is right whether or not it exists: a create when `exists` is false
/// (an apply over it if it exists after all), else an apply.
pub async fn write_secret(ctx: &Context, desired: &Secret, exists: bool) -> Result<Secret, Error> {
    if !exists && let Some(created) = create_secret(ctx, desired).await? {
        return Ok(created);
    }
    secret(ctx, desired).await
}

/// `(namespace, name)` of an object to write.
fn object_key<K: Resource>(obj: &K) -> Result<(&str, &str), Error> {
    let meta = obj.meta();
    let namespace = meta
        .namespace
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let name = meta
        .name
        .as_deref()
        .ok_or(Error::MissingObjectKey(".metadata.name"))?;
    Ok((namespace, name))
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
    let (namespace, name) = object_key(obj)?;
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// Server-side applies `status` as the status of `tcp` under field manager `manager` (forced: each
/// manager is the only writer of its fields); the object as written.
pub async fn control_plane_status(
    client: &kube::Client,
    tcp: &TenantControlPlane,
    manager: &str,
    status: &impl Serialize,
) -> Result<TenantControlPlane, Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let patch = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "status": status,
    });
    Ok(Api::<TenantControlPlane>::namespaced(client.clone(), &namespace)
        .patch_status(
            &tcp.name_any(),
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&patch),
        )
        .await?)
}

//! Writes of the TenantControlPlane reconciler: the default DataStore into the spec, the datastore
//! Secrets, the Service, the PKI and kubeconfig Secrets, the authentication ConfigMap, the egress
//! NetworkPolicy and the Deployment, each as
//! [`build`](super::build) made it (server-side apply under the controller's field manager).

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Secret, Service},
        networking::v1::NetworkPolicy,
    },
    jiff::Timestamp,
};
use kube::ResourceExt as _;
use serde::Serialize;

use super::{build, fetch::DatastoreInputs, status::key};
use crate::{
    Context, Error, apply,
    build::untampered,
    cache::{self, Lookup},
    fetch,
    k8s::crd::TenantControlPlane,
};

/// Records the default DataStore in `spec.dataStore` of a TenantControlPlane that names none.
pub async fn default_datastore(
    ctx: &Context,
    tcp: &TenantControlPlane,
    namespace: &str,
    default: &str,
) -> Result<(), Error> {
    let api: kube::Api<TenantControlPlane> = kube::Api::namespaced(ctx.client.clone(), namespace);
    let patch = serde_json::json!({"spec": {"dataStore": default}});
    api.patch(
        &tcp.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map_err(Error::Kube)?;
    Ok(())
}

/// Writes the datastore Secrets at once: a create for one that did not exist, else an apply.
pub async fn datastore_secrets(
    ctx: &Context,
    config: &Secret,
    certificate: Option<&Secret>,
    inputs: &DatastoreInputs,
) -> Result<(Secret, Option<Secret>), Error> {
    futures_util::future::try_join(
        apply::write_secret(ctx, config, inputs.existing_config.is_some()),
        async {
            match certificate {
                Some(secret) => apply::write_secret(ctx, secret, inputs.existing_certificate.is_some())
                    .await
                    .map(Some),
                None => Ok(None),
            }
        },
    )
    .await
}

/// Applies the Service (unless the cache shows the last apply of the same object in place).
pub async fn service(ctx: &Context, tcp: &TenantControlPlane, namespace: &str) -> Result<Service, Error> {
    let desired = build::service(tcp)?;
    let cached = ctx.caches.service(namespace, &desired.name_any()).await;
    apply_unless_current(ctx, "Service", &key(tcp), &desired, cached, |s| {
        s.metadata.resource_version.clone()
    })
    .await
}

/// Applies the Deployment (unless the cache shows the last apply of the same object in place).
pub async fn deployment(
    ctx: &Context,
    tcp: &TenantControlPlane,
    namespace: &str,
    desired: &Deployment,
) -> Result<Deployment, Error> {
    let cached = ctx.caches.deployment(namespace, &desired.name_any()).await;
    apply_unless_current(ctx, "Deployment", &key(tcp), desired, cached, |d| {
        d.metadata.generation.map(|g| g.to_string())
    })
    .await
}

/// Applies the authentication ConfigMap (unless the cache shows the last apply of the same object in
/// place, so an edit or a deletion is repaired).
pub async fn authentication_config(
    ctx: &Context,
    tcp: &TenantControlPlane,
    namespace: &str,
    desired: &ConfigMap,
) -> Result<ConfigMap, Error> {
    let cached = ctx.caches.config_map(namespace, &desired.name_any()).await;
    apply_unless_current(ctx, "ConfigMap", &key(tcp), desired, cached, |c| {
        c.metadata.resource_version.clone()
    })
    .await
}

/// Applies the egress NetworkPolicy (unless the cache shows the last apply of the same object in
/// place, so an edit or a deletion is repaired).
pub async fn network_policy(
    ctx: &Context,
    tcp: &TenantControlPlane,
    namespace: &str,
    desired: &NetworkPolicy,
) -> Result<NetworkPolicy, Error> {
    let cached = ctx.caches.network_policy(namespace, &desired.name_any()).await;
    apply_unless_current(ctx, "NetworkPolicy", &key(tcp), desired, cached, |p| {
        p.metadata.resource_version.clone()
    })
    .await
}

/// Deletes the authentication ConfigMap once `spec.authentication` is gone (after the Deployment
/// without its volume is applied); the cache says whether it exists, so a tenant without it costs
/// nothing.
pub async fn prune_authentication(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
) -> Result<(), Error> {
    if build::authentication(tcp).is_some() {
        return Ok(());
    }
    let name = build::authentication_config_name(tcp);
    if !matches!(ctx.caches.config_map(namespace, &name).await, Lookup::Found(_)) {
        return Ok(());
    }
    let api = kube::Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace);
    match api.delete(&name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.caches.record_applied("ConfigMap", &key(tcp), None);
    Ok(())
}

/// Reads the PKI and kubeconfig Secrets, builds them, and writes the new and changed ones at once:
/// creates for the absent, forced applies for the others. The Secrets come from the cache; when there
/// is none, or a create finds that the cache lagged (the Secret exists), they are read live and the
/// build runs again, so a lagging cache can never replace a CA.
pub async fn write_pki(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
    cluster_ip: Option<&str>,
    now: Timestamp,
) -> Result<build::Pki, Error> {
    let names = build::pki_secret_names(tcp);
    let mut live = false;
    loop {
        let mut existing = BTreeMap::new();
        if !live {
            for name in &names {
                match ctx.caches.secret(namespace, name).await {
                    Lookup::Found(secret) => {
                        existing.insert(name.clone(), (*secret).clone());
                    }
                    Lookup::Missing => {}
                    Lookup::Unknown => {
                        live = true;
                        break;
                    }
                }
            }
        }
        if live {
            // One round trip for the nine.
            let found = futures_util::future::try_join_all(
                names.iter().map(|name| fetch::secret(ctx, namespace, name)),
            )
            .await?;
            existing = names
                .iter()
                .cloned()
                .zip(found)
                .filter_map(|(name, secret)| Some((name, secret?)))
                .collect();
        }
        let pki = build::pki(
            tcp,
            &existing,
            cluster_ip,
            &ctx.settings.workload,
            now.as_second(),
        )?;
        let changed = pki.secrets.iter().filter(|secret| {
            let name = secret.name_any();
            let unchanged = !pki.generated.contains(&name)
                && existing.get(&name).is_some_and(|e| {
                    untampered(e)
                        && e.annotations() == secret.annotations()
                        && e.labels() == secret.labels()
                        && e.owner_references() == secret.owner_references()
                });
            !unchanged
        });
        let written = futures_util::future::try_join_all(changed.map(|secret| async {
            if existing.contains_key(&secret.name_any()) {
                apply::secret(ctx, secret).await.map(Some)
            } else {
                apply::create_secret(ctx, secret).await
            }
        }))
        .await?;
        if written.iter().all(Option::is_some) {
            return Ok(pki);
        }
        if live {
            return Err(Error::NotReady {
                reason: "SecretCreatedConcurrently",
                message: "a PKI Secret appeared while it was being created; the reconcile is retried".into(),
            });
        }
        live = true;
    }
}

/// Deletes the Konnectivity server's Secrets once the addon is out of the spec (the pod template no
/// longer mounts them); the cache says whether they exist, so a tenant without the addon costs nothing.
pub async fn prune_konnectivity(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
) -> Result<(), Error> {
    if build::konnectivity(tcp).is_some() {
        return Ok(());
    }
    let api = kube::Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    for name in [
        build::konnectivity_certificate_name(tcp),
        build::konnectivity_kubeconfig_name(tcp),
    ] {
        if !matches!(ctx.caches.secret(namespace, &name).await, Lookup::Found(_)) {
            continue;
        }
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Applies `desired`, unless this controller applied the same desired object less than the resync
/// interval ago and the cached object is still what that apply left (`version`: a Deployment's
/// generation, a Service's, ConfigMap's or NetworkPolicy's resourceVersion). Returns the object as
/// the API server has it.
async fn apply_unless_current<K>(
    ctx: &Context,
    kind: &'static str,
    key: &str,
    desired: &K,
    cached: Lookup<K>,
    version: fn(&K) -> Option<String>,
) -> Result<K, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let hash = cache::desired_hash(desired);
    if let (Lookup::Found(current), Some(last)) = (&cached, ctx.caches.applied(kind, key))
        && last.desired == hash
        && last.at.elapsed() < ctx.settings.resync
        && version(current).as_ref() == Some(&last.version)
    {
        return Ok((**current).clone());
    }
    let applied = apply::object(&ctx.client, desired).await?;
    ctx.caches.record_applied(
        kind,
        key,
        version(&applied).map(|version| cache::Applied {
            desired: hash,
            version,
            at: Instant::now(),
        }),
    );
    Ok(applied)
}

//! Reads what a reconcile needs: DataStores with their Secrets resolved, TenantControlPlanes, Secrets.
//! DataStores, owned Secrets and resolved credentials come from the [`cache`](super::cache) when it
//! has them; a cached miss is confirmed live.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt as _};

use super::{
    Context, Error,
    build::{self, ResolvedDataStore, ResolvedTls},
    cache::{Lookup, ResolvedEntry},
};
use crate::{
    datastore::AnyDriver,
    k8s::crd::{ContentRef, DataStore, TenantControlPlane},
    secret::Secret as Sealed,
};

/// Every TenantControlPlane in scope.
pub async fn control_planes(ctx: &Context) -> Result<Vec<TenantControlPlane>, Error> {
    Ok(ctx.control_planes().list(&Default::default()).await?.items)
}

/// A DataStore by name, if it exists: cached, or read live when the cache does not have it.
pub async fn datastore(ctx: &Context, name: &str) -> Result<Option<DataStore>, Error> {
    if let Lookup::Found(ds) = ctx.caches.datastore(name).await {
        return Ok(Some((*ds).clone()));
    }
    Ok(Api::<DataStore>::all(ctx.client.clone()).get_opt(name).await?)
}

/// A Secret the controller owns, if it exists: cached, or read live when the cache does not have it
/// (so a lagging cache never makes it look absent).
pub async fn owned_secret(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
    if let Lookup::Found(secret) = ctx.caches.secret(namespace, name).await {
        return Ok(Some((*secret).clone()));
    }
    secret(ctx, namespace, name).await
}

/// A Secret the controller owns, as its cache knows it (read live only when there is no synced cache).
/// A cached miss may lag behind a create: only follow it with a write that cannot lose anything.
pub async fn owned_secret_cached(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<Secret>, Error> {
    match ctx.caches.secret(namespace, name).await {
        Lookup::Found(secret) => Ok(Some((*secret).clone())),
        Lookup::Missing => Ok(None),
        Lookup::Unknown => secret(ctx, namespace, name).await,
    }
}

/// A Secret, read live, if it exists.
pub async fn secret(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
    Ok(Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await?)
}

/// Secrets read while resolving one DataStore, so that refs into the same Secret cost one GET.
type SecretMemo = std::collections::HashMap<(String, String), Option<Secret>>;

/// The value of a ContentRef: `content` first, then the Secret key. A missing Secret or key is a
/// permanent error (the Secret watch re-triggers when it appears).
pub async fn content(ctx: &Context, field: &str, reference: &ContentRef) -> Result<Vec<u8>, Error> {
    content_memo(ctx, field, reference, &mut SecretMemo::new()).await
}

async fn content_memo(
    ctx: &Context,
    field: &str,
    reference: &ContentRef,
    memo: &mut SecretMemo,
) -> Result<Vec<u8>, Error> {
    if let Some(content) = &reference.content {
        return Ok(content.0.clone());
    }
    let Some(sref) = &reference.secret_reference else {
        return Err(Error::Invalid {
            reason: "ContentRefEmpty",
            message: format!("{field} has neither content nor secretReference"),
        });
    };
    if sref.name.is_empty() || sref.namespace.is_empty() {
        return Err(Error::Invalid {
            reason: "SecretReferenceIncomplete",
            message: format!("{field}.secretReference needs both name and namespace"),
        });
    }
    let key = (sref.namespace.clone(), sref.name.clone());
    let found = match memo.get(&key) {
        Some(found) => found.clone(),
        None => {
            let found = secret(ctx, &sref.namespace, &sref.name).await?;
            memo.insert(key, found.clone());
            found
        }
    };
    let Some(secret) = found else {
        return Err(Error::Invalid {
            reason: "SecretNotFound",
            message: format!(
                "secret {}/{} not found (referenced by {field})",
                sref.namespace, sref.name
            ),
        });
    };
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(&sref.key_path))
        .map(|v| v.0.clone())
        .ok_or_else(|| Error::Invalid {
            reason: "SecretKeyMissing",
            message: format!(
                "secret {}/{} does not have key {}",
                sref.namespace, sref.name, sref.key_path
            ),
        })
}

async fn text(
    ctx: &Context,
    field: &str,
    reference: &ContentRef,
    memo: &mut SecretMemo,
) -> Result<String, Error> {
    String::from_utf8(content_memo(ctx, field, reference, memo).await?).map_err(|_| Error::Invalid {
        reason: "ContentNotUtf8",
        message: format!("{field} is not UTF-8 text"),
    })
}

/// Resolves every ContentRef of a DataStore (remembered until the DataStore or a Secret it references
/// changes).
pub async fn resolve(ctx: &Context, ds: &DataStore) -> Result<ResolvedDataStore, Error> {
    let (epoch, cached) = ctx.caches.resolved(ds);
    if let Some(entry) = cached {
        return Ok(entry.resolved);
    }
    let resolved = resolve_live(ctx, ds).await?;
    let entry = ResolvedEntry {
        resolved: resolved.clone(),
        driver: None,
    };
    ctx.caches.store_resolved(ds, epoch, entry);
    Ok(resolved)
}

async fn resolve_live(ctx: &Context, ds: &DataStore) -> Result<ResolvedDataStore, Error> {
    let spec = &ds.spec;
    let memo = &mut SecretMemo::new();
    let (username, password) = match &spec.basic_auth {
        Some(auth) => {
            let username = text(ctx, "basicAuth.username", &auth.username, memo).await?;
            let password = text(ctx, "basicAuth.password", &auth.password, memo).await?;
            (
                (!username.is_empty()).then_some(username),
                (!password.is_empty()).then(|| Sealed::new(password)),
            )
        }
        None => (None, None),
    };
    let tls = match &spec.tls_config {
        Some(tls) => {
            let ca = &tls.certificate_authority;
            let ca_cert = text(
                ctx,
                "tlsConfig.certificateAuthority.certificate",
                &ca.certificate,
                memo,
            )
            .await?;
            let ca_key = match &ca.private_key {
                Some(key) => Some(Sealed::new(
                    text(ctx, "tlsConfig.certificateAuthority.privateKey", key, memo).await?,
                )),
                None => None,
            };
            let client = match &tls.client_certificate {
                Some(c) => Some((
                    text(
                        ctx,
                        "tlsConfig.clientCertificate.certificate",
                        &c.certificate,
                        memo,
                    )
                    .await?,
                    Sealed::new(
                        text(
                            ctx,
                            "tlsConfig.clientCertificate.privateKey",
                            &c.private_key,
                            memo,
                        )
                        .await?,
                    ),
                )),
                None => None,
            };
            Some(ResolvedTls {
                ca_cert,
                ca_key,
                client,
            })
        }
        None => None,
    };
    Ok(ResolvedDataStore {
        name: ds.name_any(),
        driver: spec.driver,
        endpoints: spec.endpoints.clone(),
        username,
        password,
        tls,
    })
}

/// Resolves a DataStore and builds its driver (both remembered like [`resolve`]'s result, so that
/// reconciles share the driver's connection).
pub async fn driver(ctx: &Context, ds: &DataStore) -> Result<(ResolvedDataStore, Arc<AnyDriver>), Error> {
    let (epoch, cached) = ctx.caches.resolved(ds);
    let resolved = match cached {
        Some(ResolvedEntry {
            resolved,
            driver: Some(driver),
        }) => return Ok((resolved, driver)),
        Some(entry) => entry.resolved,
        None => resolve_live(ctx, ds).await?,
    };
    let driver = Arc::new(build::driver(&resolved, ctx.settings.workload.key_algorithm)?);
    let entry = ResolvedEntry {
        resolved: resolved.clone(),
        driver: Some(driver.clone()),
    };
    ctx.caches.store_resolved(ds, epoch, entry);
    Ok((resolved, driver))
}

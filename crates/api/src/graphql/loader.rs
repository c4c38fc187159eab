//! DataLoaders: fields of list items batch into one service call (one SQL statement) per field and page.

use std::collections::HashMap;

use async_graphql::{
    Context, Result,
    dataloader::{DataLoader, Loader},
    runtime::{TokioSpawner, TokioTimer},
};
use uuid::Uuid;

use super::gql_error;
use tenantplane_service::auth::Principal;
use tenantplane_service::{
    self as service, Ctx,
    model::{AuditEntry, Operation},
};

/// A control plane key: `(tenant id, control-plane id)`.
type Key = (Uuid, Uuid);

/// The loaders of one request (or one WebSocket connection), bound to its caller.
pub struct Loaders {
    latest: DataLoader<LatestOperations>,
    recent: DataLoader<RecentOperations>,
    audit: DataLoader<AuditEntries>,
    used_by: DataLoader<UsedBy>,
    pools: DataLoader<PoolUsage>,
}

impl std::fmt::Debug for Loaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaders").finish_non_exhaustive()
    }
}

impl Loaders {
    /// Loaders for `who` (no cache: a subscription's connection must see fresh rows).
    pub fn new(ctx: &Ctx, who: &Principal) -> Self {
        let base = Base {
            ctx: ctx.clone(),
            who: who.clone(),
        };
        let make = |b: &Base| b.clone();
        Self {
            latest: DataLoader::new(
                LatestOperations(make(&base)),
                TokioSpawner::current(),
                TokioTimer::default(),
            ),
            recent: DataLoader::new(
                RecentOperations(make(&base)),
                TokioSpawner::current(),
                TokioTimer::default(),
            ),
            audit: DataLoader::new(
                AuditEntries(make(&base)),
                TokioSpawner::current(),
                TokioTimer::default(),
            ),
            used_by: DataLoader::new(
                UsedBy(make(&base)),
                TokioSpawner::current(),
                TokioTimer::default(),
            ),
            pools: DataLoader::new(PoolUsage(base), TokioSpawner::current(), TokioTimer::default()),
        }
    }
}

#[derive(Clone)]
struct Base {
    ctx: Ctx,
    who: Principal,
}

/// Groups control-plane keys by tenant (a page has one tenant; the grouping keeps every statement scoped).
fn by_tenant(keys: &[Key]) -> HashMap<Uuid, Vec<Uuid>> {
    let mut out: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for (tenant, id) in keys {
        out.entry(*tenant).or_default().push(*id);
    }
    out
}

struct LatestOperations(Base);

impl Loader<Key> for LatestOperations {
    type Value = Operation;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[Key]) -> Result<HashMap<Key, Operation>, Self::Error> {
        let mut out = HashMap::new();
        for (tenant, ids) in by_tenant(keys) {
            let found = service::control_planes::latest_operations(&self.0.ctx, &self.0.who, tenant, &ids)
                .await
                .map_err(gql_error)?;
            out.extend(found.into_iter().map(|(id, op)| ((tenant, id), op)));
        }
        Ok(out)
    }
}

struct RecentOperations(Base);

impl Loader<Key> for RecentOperations {
    type Value = Vec<Operation>;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[Key]) -> Result<HashMap<Key, Vec<Operation>>, Self::Error> {
        let mut out = HashMap::new();
        for (tenant, ids) in by_tenant(keys) {
            let found = service::control_planes::recent_operations(&self.0.ctx, &self.0.who, tenant, &ids)
                .await
                .map_err(gql_error)?;
            out.extend(found.into_iter().map(|(id, ops)| ((tenant, id), ops)));
        }
        Ok(out)
    }
}

struct AuditEntries(Base);

impl Loader<Key> for AuditEntries {
    type Value = Vec<AuditEntry>;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[Key]) -> Result<HashMap<Key, Vec<AuditEntry>>, Self::Error> {
        let mut out = HashMap::new();
        for (tenant, ids) in by_tenant(keys) {
            let found = service::control_planes::audit_entries(&self.0.ctx, &self.0.who, tenant, &ids)
                .await
                .map_err(gql_error)?;
            out.extend(found.into_iter().map(|(id, list)| ((tenant, id), list)));
        }
        Ok(out)
    }
}

struct UsedBy(Base);

impl Loader<String> for UsedBy {
    type Value = i64;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, i64>, Self::Error> {
        service::datastores::used_by(&self.0.ctx, &self.0.who, keys)
            .await
            .map_err(gql_error)
    }
}

struct PoolUsage(Base);

impl Loader<String> for PoolUsage {
    type Value = (i64, i64);
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, (i64, i64)>, Self::Error> {
        service::datastores::pool_usage(&self.0.ctx, &self.0.who, keys)
            .await
            .map_err(gql_error)
    }
}

fn loaders<'a>(ctx: &'a Context<'_>) -> Result<&'a Loaders> {
    ctx.data::<Loaders>()
}

/// The newest operation of a control plane.
pub async fn latest_operation(ctx: &Context<'_>, tenant: Uuid, id: Uuid) -> Result<Option<Operation>> {
    loaders(ctx)?.latest.load_one((tenant, id)).await
}

/// The newest operations of a control plane.
pub async fn operations(ctx: &Context<'_>, tenant: Uuid, id: Uuid) -> Result<Vec<Operation>> {
    Ok(loaders(ctx)?
        .recent
        .load_one((tenant, id))
        .await?
        .unwrap_or_default())
}

/// The newest audit entries about a control plane.
pub async fn audit_entries(ctx: &Context<'_>, tenant: Uuid, id: Uuid) -> Result<Vec<AuditEntry>> {
    Ok(loaders(ctx)?
        .audit
        .load_one((tenant, id))
        .await?
        .unwrap_or_default())
}

/// How many control planes use a DataStore.
pub async fn used_by(ctx: &Context<'_>, name: &str) -> Result<i64> {
    Ok(loaders(ctx)?
        .used_by
        .load_one(name.to_string())
        .await?
        .unwrap_or(0))
}

/// `(DataStores, control planes using them)` of a pool.
pub async fn pool_usage(ctx: &Context<'_>, name: &str) -> Result<(i64, i64)> {
    Ok(loaders(ctx)?
        .pools
        .load_one(name.to_string())
        .await?
        .unwrap_or((0, 0)))
}

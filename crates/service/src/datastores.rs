//! Pools and DataStores (platform admins).

use super::{
    Ctx, MAX_USERS_NAMED, OnConflict, Result, ServiceError,
    model::{
        CreateDataStore, CreatePool, DataStore, DataStorePage, DataStoreSecrets, Pool, PoolPage,
        UpdateDataStore, UpdatePool,
    },
    page::PageArgs,
    platform_admin,
};
use crate::auth::Principal;
use crate::domain::{FieldError, Name, check_labels, check_secret_key, check_subdomain};
use tenantplane_store::{
    self as store,
    datastores::{DataStoreRow, NewDataStore, PoolRow},
};

/// The longest etcd CA identity.
pub const CA_ID_MAX: usize = 253;

/// The placement policies a pool may have.
pub const POLICIES: [&str; 4] = ["spread", "binpack", "rendezvous", "dedicated"];

fn pool_model(row: PoolRow) -> Pool {
    Pool {
        id: row.id,
        name: row.name,
        policy: row.policy,
        labels: serde_json::from_value(row.labels).unwrap_or_default(),
        created_at: row.created_at,
    }
}

/// Converts a row to the API shape.
pub fn to_model(row: DataStoreRow) -> DataStore {
    DataStore {
        id: row.id,
        name: row.name,
        pool: row.pool,
        driver: row.driver,
        endpoints: row.endpoints,
        secrets: serde_json::from_value(row.secret_refs).unwrap_or_default(),
        labels: serde_json::from_value(row.labels).unwrap_or_default(),
        capacity_tenants: row.capacity_tenants,
        capacity_bytes: row.capacity_bytes,
        ca_id: row.ca_id,
        ready: row.ready,
        cordoned: row.cordoned,
        created_at: row.created_at,
    }
}

/// Creates a pool.
pub async fn create_pool(
    ctx: &Ctx,
    who: &Principal,
    input: CreatePool,
    request_id: Option<&str>,
) -> Result<Pool> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    if let Err(e) = Name::parse("name", &input.name) {
        errors.push(e);
    }
    if !POLICIES.contains(&input.policy.as_str()) {
        errors.push(FieldError::new(
            "policy",
            "must be one of: spread, binpack, rendezvous, dedicated",
        ));
    }
    if let Err(e) = check_labels("labels", &input.labels) {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let labels = serde_json::to_value(&input.labels).unwrap_or_default();
    let row = store::datastores::insert_pool(&ctx.db, &input.name, &input.policy, &labels)
        .await
        .on_conflict(|| format!("a pool named {:?} already exists", input.name))?;
    store::audit(
        &ctx.db,
        None,
        &who.actor(),
        "pool.create",
        "pool",
        &row.name,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    Ok(pool_model(row))
}

/// One pool.
pub async fn pool(ctx: &Ctx, who: &Principal, name: &str) -> Result<Pool> {
    platform_admin(who)?;
    store::datastores::pool(&ctx.db, name)
        .await?
        .map(pool_model)
        .ok_or(ServiceError::NotFound("pool"))
}

/// What is wrong with the Secret references (names and namespaces the cluster accepts, valid keys).
fn secret_ref_errors(secrets: &DataStoreSecrets) -> Vec<FieldError> {
    let refs = [
        ("username", &secrets.username),
        ("password", &secrets.password),
        ("caCertificate", &secrets.ca_certificate),
        ("caPrivateKey", &secrets.ca_private_key),
        ("clientCertificate", &secrets.client_certificate),
        ("clientPrivateKey", &secrets.client_private_key),
    ];
    let mut errors = Vec::new();
    for (field, reference) in refs {
        let Some(r) = reference else { continue };
        let at = |part: &str| format!("secrets.{field}.{part}");
        let checks = [
            check_subdomain(&at("name"), &r.name),
            Name::parse(&at("namespace"), &r.namespace).map(|_| ()),
            check_secret_key(&at("keyPath"), &r.key_path),
        ];
        errors.extend(checks.into_iter().filter_map(|c| c.err()));
    }
    errors
}

/// Registers a DataStore.
pub async fn create(
    ctx: &Ctx,
    who: &Principal,
    input: CreateDataStore,
    request_id: Option<&str>,
) -> Result<DataStore> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    if let Err(e) = Name::parse("name", &input.name) {
        errors.push(e);
    }
    let driver: Option<crate::k8s::crd::Driver> =
        serde_json::from_value(serde_json::Value::String(input.driver.clone())).ok();
    if driver.is_none() {
        errors.push(FieldError::new(
            "driver",
            "must be one of: etcd, MySQL, PostgreSQL, NATS",
        ));
    }
    if input.endpoints.is_empty() || input.endpoints.len() > 32 {
        errors.push(FieldError::new("endpoints", "give 1 to 32 endpoints"));
    }
    for (i, e) in input.endpoints.iter().enumerate() {
        if let Err(e) = crate::domain::check_endpoint(&format!("endpoints[{i}]"), e) {
            errors.push(e);
        }
    }
    if input.capacity_tenants < 0
        || (driver == Some(crate::k8s::crd::Driver::Nats) && input.capacity_tenants > 1)
    {
        errors.push(FieldError::new(
            "capacityTenants",
            "must be at least 0, and at most 1 for NATS (one tenant per NATS DataStore)",
        ));
    }
    if input.capacity_bytes.is_some_and(|b| b <= 0) {
        errors.push(FieldError::new("capacityBytes", "must be positive"));
    }
    let s = &input.secrets;
    if input.driver == "etcd"
        && (s.ca_certificate.is_none()
            || s.ca_private_key.is_none()
            || s.client_certificate.is_none()
            || s.client_private_key.is_none())
    {
        errors.push(FieldError::new(
            "secrets",
            "etcd needs caCertificate, caPrivateKey, clientCertificate and clientPrivateKey",
        ));
    }
    if input.driver != "etcd" && s == &DataStoreSecrets::default() {
        errors.push(FieldError::new(
            "secrets",
            "MySQL, PostgreSQL and NATS need username/password or TLS references",
        ));
    }
    if let Err(e) = check_labels("labels", &input.labels) {
        errors.push(e);
    }
    if let Some(ca) = &input.ca_id
        && let Err(e) = crate::domain::check_description("caId", ca, CA_ID_MAX)
    {
        errors.push(e);
    }
    errors.extend(secret_ref_errors(&input.secrets));
    if let Some(name) = &input.pool
        && let Err(e) = Name::parse("pool", name)
    {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    // A well-formed pool name that names no pool conflicts with the current state (409), not the input.
    let pool_id = match &input.pool {
        Some(name) => match store::datastores::pool(&ctx.db, name).await? {
            Some(p) => Some(p.id),
            None => {
                return Err(ServiceError::ConflictFields(vec![FieldError::new(
                    "pool",
                    format!("no pool named {name:?}"),
                )]));
            }
        },
        None => None,
    };
    let new = NewDataStore {
        name: input.name.clone(),
        pool_id,
        driver: input.driver,
        endpoints: input.endpoints,
        secret_refs: serde_json::to_value(&input.secrets).unwrap_or_default(),
        labels: serde_json::to_value(&input.labels).unwrap_or_default(),
        capacity_tenants: input.capacity_tenants,
        capacity_bytes: input.capacity_bytes,
        ca_id: input.ca_id,
    };
    store::datastores::insert(&ctx.db, &new)
        .await
        .on_conflict(|| format!("a DataStore named {:?} already exists", input.name))?;
    store::audit(
        &ctx.db,
        None,
        &who.actor(),
        "datastore.create",
        "datastore",
        &input.name,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    get(ctx, who, &input.name).await
}

/// One DataStore.
pub async fn get(ctx: &Ctx, who: &Principal, name: &str) -> Result<DataStore> {
    platform_admin(who)?;
    store::datastores::get(&ctx.db, name)
        .await?
        .map(to_model)
        .ok_or(ServiceError::NotFound("datastore"))
}

/// Cordons (no new tenants) or uncordons a DataStore.
pub async fn set_cordoned(
    ctx: &Ctx,
    who: &Principal,
    name: &str,
    cordoned: bool,
    request_id: Option<&str>,
) -> Result<DataStore> {
    platform_admin(who)?;
    if !store::datastores::set_cordoned(&ctx.db, name, cordoned).await? {
        return Err(ServiceError::NotFound("datastore"));
    }
    let action = if cordoned {
        "datastore.cordon"
    } else {
        "datastore.uncordon"
    };
    store::audit(
        &ctx.db,
        None,
        &who.actor(),
        action,
        "datastore",
        name,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    get(ctx, who, name).await
}

/// How many control planes use each named DataStore, as primary or override (platform admin; one query).
pub async fn used_by(
    ctx: &Ctx,
    who: &Principal,
    names: &[String],
) -> Result<std::collections::HashMap<String, i64>> {
    platform_admin(who)?;
    Ok(store::datastores::used_by(&ctx.db, names)
        .await?
        .into_iter()
        .collect())
}

/// Per named pool: `(DataStores, control planes using them)` (platform admin; one query).
pub async fn pool_usage(
    ctx: &Ctx,
    who: &Principal,
    names: &[String],
) -> Result<std::collections::HashMap<String, (i64, i64)>> {
    platform_admin(who)?;
    Ok(store::datastores::pool_usage(&ctx.db, names)
        .await?
        .into_iter()
        .map(|(name, datastores, used_by)| (name, (datastores, used_by)))
        .collect())
}

/// A page of pools, oldest first (platform admin).
pub async fn pool_page(
    ctx: &Ctx,
    who: &Principal,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<PoolPage> {
    platform_admin(who)?;
    let page = PageArgs::parse(limit, cursor)?;
    let rows = store::datastores::pools_page(&ctx.db, page.after, page.limit + 1).await?;
    let (rows, next_cursor) = page.split(rows, |r| (r.created_at, r.id));
    Ok(PoolPage {
        items: rows.into_iter().map(pool_model).collect(),
        next_cursor,
    })
}

/// Filters of a DataStore list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only DataStores in this pool.
    pub pool: Option<String>,
    /// Only this driver.
    pub driver: Option<String>,
    /// Only cordoned (true) or uncordoned (false) DataStores.
    pub cordoned: Option<bool>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// The drivers a DataStore may have.
pub const DRIVERS: [&str; 4] = ["etcd", "MySQL", "PostgreSQL", "NATS"];

/// A page of DataStores, oldest first (platform admin).
pub async fn page(ctx: &Ctx, who: &Principal, filter: ListFilter) -> Result<DataStorePage> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    let page = PageArgs::check(filter.limit, filter.cursor.as_deref(), &mut errors);
    if let Some(pool) = &filter.pool
        && let Err(e) = Name::parse("pool", pool)
    {
        errors.push(e);
    }
    if let Some(driver) = &filter.driver
        && !DRIVERS.contains(&driver.as_str())
    {
        errors.push(FieldError::new(
            "driver",
            "must be one of: etcd, MySQL, PostgreSQL, NATS",
        ));
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let query = store::datastores::ListQuery {
        pool: filter.pool,
        driver: filter.driver,
        cordoned: filter.cordoned,
        after: page.after,
        limit: page.limit + 1,
    };
    let rows = store::datastores::page(&ctx.db, &query).await?;
    let (rows, next_cursor) = page.split(rows, |r| (r.created_at, r.id));
    Ok(DataStorePage {
        items: rows.into_iter().map(to_model).collect(),
        next_cursor,
    })
}

/// Changes a pool's policy or labels (platform admin), checked as on create.
pub async fn update_pool(
    ctx: &Ctx,
    who: &Principal,
    name: &str,
    input: UpdatePool,
    request_id: Option<&str>,
) -> Result<Pool> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    if let Some(policy) = &input.policy
        && !POLICIES.contains(&policy.as_str())
    {
        errors.push(FieldError::new(
            "policy",
            "must be one of: spread, binpack, rendezvous, dedicated",
        ));
    }
    if let Some(labels) = &input.labels
        && let Err(e) = check_labels("labels", labels)
    {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let labels = input
        .labels
        .as_ref()
        .map(|l| serde_json::to_value(l).unwrap_or_default());
    let row = store::datastores::update_pool(&ctx.db, name, input.policy.as_deref(), labels.as_ref())
        .await?
        .ok_or(ServiceError::NotFound("pool"))?;
    let details = serde_json::json!({"policy": input.policy, "labels": input.labels.is_some()});
    store::audit(
        &ctx.db,
        None,
        &who.actor(),
        "pool.update",
        "pool",
        name,
        request_id,
        details,
    )
    .await?;
    Ok(pool_model(row))
}

/// `a, b, c` and, past the named ones, how many more.
fn named(users: &store::datastores::Users) -> String {
    let more = users.count - users.names.len() as i64;
    let list = users.names.join(", ");
    if more > 0 {
        format!("{list} and {more} more")
    } else {
        list
    }
}

/// Deletes an empty pool (platform admin); `InUse` naming its DataStores while it has any.
pub async fn delete_pool(ctx: &Ctx, who: &Principal, name: &str, request_id: Option<&str>) -> Result<()> {
    platform_admin(who)?;
    let mut tx = ctx.db.begin().await?;
    let (id, users) = store::datastores::lock_pool_users(&mut tx, name, MAX_USERS_NAMED)
        .await?
        .ok_or(ServiceError::NotFound("pool"))?;
    if users.count > 0 {
        let noun = if users.count == 1 {
            "DataStore"
        } else {
            "DataStores"
        };
        return Err(ServiceError::InUse {
            detail: format!(
                "pool {name:?} still has {} {noun} ({}): delete them or move them to another pool first",
                users.count,
                named(&users)
            ),
            count: users.count,
            users: users.names,
        });
    }
    store::datastores::delete_pool(&mut *tx, id).await?;
    store::audit(
        &mut *tx,
        None,
        &who.actor(),
        "pool.delete",
        "pool",
        name,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Checks the form of a DataStore change; the errors name each field.
fn update_errors(input: &UpdateDataStore) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(name) = &input.pool
        && let Err(e) = Name::parse("pool", name)
    {
        errors.push(e);
    }
    if let Some(n) = input.capacity_tenants
        && !(0..=i64::from(i32::MAX)).contains(&n)
    {
        errors.push(FieldError::new("capacityTenants", "must be at least 0"));
    }
    if input.capacity_bytes.is_some_and(|b| b <= 0) {
        errors.push(FieldError::new("capacityBytes", "must be positive"));
    }
    if let Some(labels) = &input.labels
        && let Err(e) = check_labels("labels", labels)
    {
        errors.push(e);
    }
    errors
}

/// Changes a DataStore's pool, labels or capacities (platform admin), checked as on create.
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    name: &str,
    input: UpdateDataStore,
    request_id: Option<&str>,
) -> Result<DataStore> {
    let current = get(ctx, who, name).await?;
    let errors = update_errors(&input);
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    // The form is right; the DataStore it changes refuses it (409).
    if current.driver == "NATS" && input.capacity_tenants.is_some_and(|n| n > 1) {
        return Err(ServiceError::ConflictFields(vec![FieldError::new(
            "capacityTenants",
            "a NATS DataStore takes at most 1 tenant",
        )]));
    }
    let pool_id = match &input.pool {
        Some(pool) => Some(
            store::datastores::pool(&ctx.db, pool)
                .await?
                .ok_or_else(|| {
                    ServiceError::ConflictFields(vec![FieldError::new(
                        "pool",
                        format!("no pool named {pool:?}"),
                    )])
                })?
                .id,
        ),
        None => None,
    };
    let change = store::datastores::DataStoreChange {
        pool_id,
        labels: input
            .labels
            .as_ref()
            .map(|l| serde_json::to_value(l).unwrap_or_default()),
        capacity_tenants: input.capacity_tenants.and_then(|n| i32::try_from(n).ok()),
        capacity_bytes: input.capacity_bytes,
    };
    if !store::datastores::update(&ctx.db, name, &change).await? {
        return Err(ServiceError::NotFound("datastore"));
    }
    let details = serde_json::json!({
        "pool": input.pool, "labels": input.labels.is_some(),
        "capacityTenants": input.capacity_tenants, "capacityBytes": input.capacity_bytes,
    });
    store::audit(
        &ctx.db,
        None,
        &who.actor(),
        "datastore.update",
        "datastore",
        name,
        request_id,
        details,
    )
    .await?;
    get(ctx, who, name).await
}

/// Deletes a DataStore no control plane is placed on (platform admin); `InUse` naming them (as
/// `tenant/name`) otherwise. Its Kubernetes `DataStore` object is the operator's, as on create: only the
/// record goes.
pub async fn delete(ctx: &Ctx, who: &Principal, name: &str, request_id: Option<&str>) -> Result<()> {
    platform_admin(who)?;
    let mut tx = ctx.db.begin().await?;
    let (id, users) = store::datastores::lock_datastore_users(&mut tx, name, MAX_USERS_NAMED)
        .await?
        .ok_or(ServiceError::NotFound("datastore"))?;
    if users.count > 0 {
        let noun = if users.count == 1 {
            "control plane is"
        } else {
            "control planes are"
        };
        return Err(ServiceError::InUse {
            detail: format!(
                "DataStore {name:?} is in use: {} {noun} placed on it ({}); delete or move them first",
                users.count,
                named(&users)
            ),
            count: users.count,
            users: users.names,
        });
    }
    let moving = store::migrations::open_on(&mut tx, id).await?;
    if !moving.is_empty() {
        return Err(ServiceError::InUse {
            detail: format!(
                "DataStore {name:?} is in use: a live migration of {} moves to or from it; wait until it ends",
                moving.join(", ")
            ),
            count: moving.len() as i64,
            users: moving.into_iter().take(MAX_USERS_NAMED as usize).collect(),
        });
    }
    store::datastores::delete(&mut *tx, id).await?;
    let details = serde_json::json!({});
    store::audit(
        &mut *tx,
        None,
        &who.actor(),
        "datastore.delete",
        "datastore",
        name,
        request_id,
        details,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

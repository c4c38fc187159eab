//! Pools and DataStores (platform admins).

use super::{
    Ctx, OnConflict, Result, ServiceError,
    model::{CreateDataStore, CreatePool, DataStore, DataStoreSecrets, Pool},
    platform_admin,
};
use crate::{
    auth::Principal,
    domain::{FieldError, Name, check_labels, check_secret_key, check_subdomain},
    store::{
        self,
        datastores::{DataStoreRow, NewDataStore, PoolRow},
    },
};

/// The longest etcd CA identity.
pub const CA_ID_MAX: usize = 253;

/// The placement policies a pool may have.
pub const POLICIES: [&str; 4] = ["spread", "binpack", "rendezvous", "dedicated"];

fn pool_model(row: PoolRow) -> Pool {
    Pool {
        name: row.name,
        policy: row.policy,
        labels: serde_json::from_value(row.labels).unwrap_or_default(),
        created_at: row.created_at,
    }
}

/// Converts a row to the API shape.
pub fn to_model(row: DataStoreRow) -> DataStore {
    DataStore {
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

/// Every pool.
pub async fn pools(ctx: &Ctx, who: &Principal) -> Result<Vec<Pool>> {
    platform_admin(who)?;
    Ok(store::datastores::pools(&ctx.db)
        .await?
        .into_iter()
        .map(pool_model)
        .collect())
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

/// Every DataStore.
pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<DataStore>> {
    platform_admin(who)?;
    Ok(store::datastores::list(&ctx.db)
        .await?
        .into_iter()
        .map(to_model)
        .collect())
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

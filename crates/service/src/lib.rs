//! Use-cases shared by REST and GraphQL: authorization, validation and transactions live here once.

use tenantplane_core::{domain, translate};
use tenantplane_crd as k8s;

pub mod auth;

pub mod audit;
pub mod authenticator_check;
pub mod authenticators;
pub mod control_planes;
pub mod datastores;
pub mod drains;
pub mod drive;
pub mod events;
pub mod idempotency;
pub mod join_tokens;
pub mod migrations;
pub mod model;
pub mod operations;
pub mod page;
pub mod placement;
pub mod quotas;
pub mod stored;
pub mod tenants;
pub mod tokens;
pub mod whole;

use uuid::Uuid;

use crate::auth::{Principal, TokenSettings, keys::ServerKey};
use crate::domain::{FieldError, Role, VersionRange};
use tenantplane_store::{self as store, StoreError};

/// What every use-case needs.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// PostgreSQL.
    pub db: sqlx::PgPool,
    /// Seals signing keys.
    pub server_key: std::sync::Arc<ServerKey>,
    /// Token issuer and audience.
    pub tokens: TokenSettings,
    /// Supported Kubernetes versions.
    pub versions: VersionRange,
    /// Placement settings (auto-offload pool, offloadable resources).
    pub placement: tenantplane_core::placement::PlacementConfig,
    /// What the management cluster can accept (namespace template, NodePort range) and per-tenant caps.
    pub limits: Limits,
}

/// Inputs the management cluster can accept, and per-tenant caps (from `serve` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Namespace of a tenant's TCPs; `{tenant}` is the tenant slug (the worker's `--namespace-template`).
    pub namespace_template: String,
    /// The cluster's NodePort range (`--node-port-range`).
    pub node_ports: crate::domain::PortRange,
    /// Live signing keys (active, or retired but still verifying) a tenant may have (`--max-signing-keys`).
    pub max_signing_keys: i64,
    /// Seconds an operation may take before it fails with `DeadlineExceeded` (`--operation-deadline-seconds`).
    pub operation_deadline_seconds: i64,
    /// Live control planes a tenant may have unless a platform admin set its own quota.
    pub default_quota_control_planes: i64,
    /// Live tokens (neither revoked nor expired) a tenant may have unless a platform admin set its own quota.
    pub default_quota_tokens: i64,
    /// Longest lifetime, in seconds, of a token minted by a caller signed in through an external identity
    /// provider (`--external-mint-max-ttl-seconds`): a minted token outlives the caller's IdP session
    /// and account, so it must not outlive them by a year.
    pub external_mint_max_ttl_seconds: i64,
    /// kube-apiserver's own check of a tenant's JWT authenticator ([`authenticator_check`]); `None`:
    /// Tenantplane's own checks only.
    pub authenticator_checker: Option<std::path::PathBuf>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            namespace_template: crate::translate::DEFAULT_NAMESPACE_TEMPLATE.into(),
            node_ports: crate::domain::PortRange::NODE_PORTS,
            max_signing_keys: 10,
            operation_deadline_seconds: 1800,
            default_quota_control_planes: 50,
            default_quota_tokens: 100,
            external_mint_max_ttl_seconds: DEFAULT_EXTERNAL_MINT_MAX_TTL_SECONDS,
            authenticator_checker: None,
        }
    }
}

/// Default longest lifetime of a token an externally signed-in caller mints: 30 days.
pub const DEFAULT_EXTERNAL_MINT_MAX_TTL_SECONDS: i64 = 30 * 24 * 3600;

/// How many users an `InUse` error names at most (it counts them all).
pub const MAX_USERS_NAMED: i64 = 10;

/// Errors of a use-case, mapped to HTTP and GraphQL by the surfaces.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Invalid input: one entry per field.
    #[error("invalid input")]
    Invalid(Vec<FieldError>),
    /// Not found, or not visible to the caller (never distinguishes the two).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The caller's role is too low for this action on its own tenant.
    #[error("{0}")]
    Forbidden(String),
    /// The request conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// Fields that are well-formed but conflict with the current state (a taken node port, a pool that does
    /// not exist, an upgrade the current version does not allow): one entry per field.
    #[error("conflicts with the current state")]
    ConflictFields(Vec<FieldError>),
    /// A delete refused while something still uses the resource: `count` users, the first of them named
    /// in `users` (at most [`MAX_USERS_NAMED`]).
    #[error("{detail}")]
    InUse {
        /// What is in use and what to do.
        detail: String,
        /// How many users.
        count: i64,
        /// The first users' names.
        users: Vec<String>,
    },
    /// A tenant quota would be exceeded: `(quota, limit)`, e.g. `("controlPlanes", 50)`.
    #[error("the tenant has reached its quota of {1} {0}: remove one, or ask a platform admin to raise it")]
    QuotaExceeded(&'static str, i64),
    /// `If-Match` did not match.
    #[error("the resource changed: its ETag is now {0}")]
    PreconditionFailed(String),
    /// Not possible yet (e.g. kubeconfig before Ready).
    #[error("{0}")]
    NotReady(String),
    /// The idempotency key was used before with a different request ([`idempotency::run`]).
    #[error("this Idempotency-Key was used with a different request body; use a new key")]
    IdempotencyKeyReused,
    /// The use-case needs the management cluster and this server has none configured.
    #[error("this server has no management cluster configured")]
    NoManagementCluster,
    /// A cluster the use-case depends on (e.g. the tenant cluster) did not answer or did not get there in
    /// time; nothing was changed, and the same request may be retried.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else; details go to the log, never to the client.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Db(err) => err.into(),
            err => ServiceError::Internal(err.to_string()),
        }
    }
}

impl From<sqlx::Error> for ServiceError {
    /// A database that cannot be reached is a retryable 503; any other database error is internal.
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                ServiceError::Unavailable("the database is unreachable; retry shortly".into())
            }
            // Waited past `lock_timeout` or ran past `statement_timeout`: nothing was changed.
            err if tenantplane_store::timed_out(&err) => ServiceError::Unavailable(
                "the database is busy with another change of the same data; retry shortly".into(),
            ),
            // A NUL character, which PostgreSQL text and jsonb cannot hold, in input no check refused.
            sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("22021" | "22P05")) => {
                ServiceError::Invalid(vec![FieldError::new("", "text must not contain NUL characters")])
            }
            err => ServiceError::Internal(err.to_string()),
        }
    }
}

impl From<crate::auth::keys::KeyError> for ServiceError {
    fn from(err: crate::auth::keys::KeyError) -> Self {
        match err {
            crate::auth::keys::KeyError::Db(err) => err.into(),
            err => ServiceError::Internal(err.to_string()),
        }
    }
}

impl From<FieldError> for ServiceError {
    fn from(err: FieldError) -> Self {
        ServiceError::Invalid(vec![err])
    }
}

/// Result alias.
pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// Maps a unique-constraint violation of a store call to a 409 with a message naming the clash.
pub(crate) trait OnConflict<T> {
    /// `Conflict(message())` for a unique violation; any other store error stays internal.
    fn on_conflict(self, message: impl FnOnce() -> String) -> Result<T>;
}

impl<T> OnConflict<T> for std::result::Result<T, StoreError> {
    fn on_conflict(self, message: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| match e {
            StoreError::Conflict(_) => ServiceError::Conflict(message()),
            e => e.into(),
        })
    }
}

/// Resolves `slug` for `who`: 404 when missing or not visible, 403 when visible but the role is too low.
pub async fn tenant_for(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    needed: Role,
) -> Result<store::tenants::TenantRow> {
    tenant_in(&ctx.db, who, slug, needed).await
}

/// The same inside a transaction (never hold one connection while waiting for another).
pub async fn tenant_in(
    db: impl sqlx::PgExecutor<'_>,
    who: &Principal,
    slug: &str,
    needed: Role,
) -> Result<store::tenants::TenantRow> {
    let tenant = store::tenants::by_slug(db, slug)
        .await?
        .ok_or(ServiceError::NotFound("tenant"))?;
    authorize(who, tenant.id, needed)?;
    Ok(tenant)
}

/// Whether `who` may act on `tenant` with role `needed`: a tenant it does not see is "not found", too low
/// a role is "forbidden".
pub fn authorize(who: &Principal, tenant: Uuid, needed: Role) -> Result<()> {
    if !who.sees(tenant) {
        return Err(ServiceError::NotFound("tenant"));
    }
    if !who.can(tenant, needed) {
        return Err(ServiceError::Forbidden(format!(
            "this action needs the role {needed} or higher"
        )));
    }
    Ok(())
}

/// Requires a platform admin.
pub fn platform_admin(who: &Principal) -> Result<()> {
    if who.role == Role::PlatformAdmin {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(
            "this action needs the role platform-admin".into(),
        ))
    }
}

/// Parses a UUID path segment; anything else is simply not found.
pub fn parse_id(value: &str, what: &'static str) -> Result<Uuid> {
    Uuid::parse_str(value).map_err(|_| ServiceError::NotFound(what))
}

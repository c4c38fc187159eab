//! Per-tenant quotas: what a platform admin set (else the server's defaults), checked in the transaction
//! that would go beyond them.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{
    Ctx, FieldError, Result, ServiceError,
    model::{QuotaUsage, Quotas, SetQuotas},
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::Role;
use tenantplane_store as store;

/// The largest quota a platform admin may set.
pub const MAX_QUOTA: i64 = 100_000;

/// Fails with `QuotaExceeded("controlPlanes")` when the control plane `tx` has just inserted takes the
/// tenant beyond its quota; holds the tenant's quota lock until `tx` ends, so the caller takes it as late
/// as it can (every create of the tenant waits for it).
pub async fn admit_inserted_control_plane(ctx: &Ctx, tx: &mut PgConnection, tenant: Uuid) -> Result<()> {
    let own = locked_live(tx, tenant).await?;
    // Counted after the lock, in a statement of its own: it sees every create committed before the
    // lock was granted, and this one.
    let (used, _) = store::quotas::used(&mut *tx, tenant).await?;
    let limit = own
        .control_planes
        .map_or(ctx.limits.default_quota_control_planes, i64::from);
    if used > limit {
        return Err(ServiceError::QuotaExceeded("controlPlanes", limit));
    }
    Ok(())
}

/// Fails with `QuotaExceeded("tokens")` unless the tenant may have one more live token; holds the
/// tenant's quota lock until `tx` ends.
pub async fn admit_token(ctx: &Ctx, tx: &mut PgConnection, tenant: Uuid) -> Result<()> {
    let own = locked_live(tx, tenant).await?;
    let (_, used) = store::quotas::used(&mut *tx, tenant).await?;
    let limit = own.tokens.map_or(ctx.limits.default_quota_tokens, i64::from);
    if used >= limit {
        return Err(ServiceError::QuotaExceeded("tokens", limit));
    }
    Ok(())
}

/// The tenant's quotas under its lock; `Conflict` when it is being deleted (nothing new joins it).
async fn locked_live(tx: &mut PgConnection, tenant: Uuid) -> Result<store::quotas::Set> {
    let (own, state) = store::quotas::lock(tx, tenant).await?;
    if state == "deleting" {
        return Err(ServiceError::Conflict(
            "the tenant is being deleted: nothing new can be created in it".into(),
        ));
    }
    Ok(own)
}

/// Tenant `slug`'s quotas and usage (tenant viewer).
pub async fn get(ctx: &Ctx, who: &Principal, slug: &str) -> Result<Quotas> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    view(ctx, tenant.id).await
}

/// Sets tenant `slug`'s quotas (platform admin); `None` restores the server's default. A quota below
/// what is in use refuses nothing that exists: it only stops new ones.
pub async fn set(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    input: SetQuotas,
    request_id: Option<&str>,
) -> Result<Quotas> {
    // A tenant token of this tenant is forbidden; of another, it finds nothing.
    let tenant = tenant_for(ctx, who, slug, Role::PlatformAdmin).await?;
    let mut errors = Vec::new();
    let mut check = |field: &str, value: Option<i64>| match value {
        Some(v) if !(0..=MAX_QUOTA).contains(&v) => {
            errors.push(FieldError::new(
                field,
                format!("must be between 0 and {MAX_QUOTA}"),
            ));
            None
        }
        v => v.and_then(|v| i32::try_from(v).ok()),
    };
    let own = store::quotas::Set {
        control_planes: check("controlPlanes", input.control_planes),
        tokens: check("tokens", input.tokens),
    };
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    store::quotas::set(&ctx.db, tenant.id, own).await?;
    store::audit(
        &ctx.db,
        Some(tenant.id),
        &who.actor(),
        "tenant.quotas",
        "tenant",
        &tenant.id.to_string(),
        request_id,
        serde_json::json!({"controlPlanes": own.control_planes, "tokens": own.tokens}),
    )
    .await?;
    view(ctx, tenant.id).await
}

async fn view(ctx: &Ctx, tenant: Uuid) -> Result<Quotas> {
    let own = store::quotas::get(&ctx.db, tenant).await?;
    let (control_planes, tokens) = store::quotas::used(&ctx.db, tenant).await?;
    let usage = |own: Option<i32>, default: i64, used: i64| QuotaUsage {
        limit: own.map_or(default, i64::from),
        used,
        default: own.is_none(),
    };
    Ok(Quotas {
        control_planes: usage(
            own.control_planes,
            ctx.limits.default_quota_control_planes,
            control_planes,
        ),
        tokens: usage(own.tokens, ctx.limits.default_quota_tokens, tokens),
    })
}

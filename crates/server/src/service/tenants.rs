//! Tenants: created and listed by platform admins, read by their members.

use super::{
    Ctx, OnConflict, Result, ServiceError,
    model::{CreateTenant, Tenant, Viewer},
    platform_admin, tenant_for,
};
use crate::{
    auth::Principal,
    domain::{Name, Role, check_display_name, check_labels, check_namespace},
    store::{self, tenants::TenantRow},
};

/// Converts a row to the API shape.
pub fn to_model(row: TenantRow) -> Tenant {
    Tenant {
        id: row.id,
        slug: row.slug,
        display_name: row.display_name,
        labels: serde_json::from_value(row.labels).unwrap_or_default(),
        state: row.state,
        created_at: row.created_at,
    }
}

/// Creates a tenant (platform admin).
pub async fn create(
    ctx: &Ctx,
    tx: &mut sqlx::PgConnection,
    who: &Principal,
    input: CreateTenant,
    request_id: Option<&str>,
) -> Result<Tenant> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    if let Err(e) = Name::parse("slug", &input.slug)
        .map(|_| ())
        .and_then(|()| check_namespace("slug", &ctx.limits.namespace_template, &input.slug))
    {
        errors.push(e);
    }
    if let Err(e) = check_display_name("displayName", &input.display_name) {
        errors.push(e);
    }
    if let Err(e) = check_labels("labels", &input.labels) {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let labels = serde_json::to_value(&input.labels).unwrap_or_default();
    let row = store::tenants::insert(&mut *tx, &input.slug, &input.display_name, &labels)
        .await
        .on_conflict(|| format!("a tenant with slug {:?} already exists", input.slug))?;
    store::audit(
        &mut *tx,
        Some(row.id),
        &who.actor(),
        "tenant.create",
        "tenant",
        &row.slug,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    Ok(to_model(row))
}

/// Every tenant (platform admin).
pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<Tenant>> {
    platform_admin(who)?;
    Ok(store::tenants::list(&ctx.db)
        .await?
        .into_iter()
        .map(to_model)
        .collect())
}

/// One tenant, for anyone in it.
pub async fn get(ctx: &Ctx, who: &Principal, slug: &str) -> Result<Tenant> {
    Ok(to_model(tenant_for(ctx, who, slug, Role::TenantViewer).await?))
}

/// The caller: token id, tenant slug (none for platform admins), role and token expiry.
pub async fn viewer(ctx: &Ctx, who: &Principal) -> Result<Viewer> {
    let tenant = match who.tenant_id {
        Some(id) => store::tenants::slug_of(&ctx.db, id).await?,
        None => None,
    };
    Ok(Viewer {
        token_id: who.jti,
        tenant,
        role: who.role,
        expires_at: who.expires_at,
    })
}

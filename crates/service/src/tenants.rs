//! Tenants: created and listed by platform admins, read by their members.

use super::{
    Ctx, OnConflict, Result, ServiceError,
    model::{CreateTenant, Tenant, TenantDeletion, TenantPage, Viewer},
    page::PageArgs,
    platform_admin, tenant_for,
};
use crate::auth::Principal;
use crate::domain::{FieldError, Name, Role, check_display_name, check_labels, check_namespace};
use tenantplane_store::{self as store, tenants::TenantRow};

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

/// Filters of a tenant list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only slugs starting with this.
    pub prefix: Option<String>,
    /// Only suspended (true) or not suspended (false) tenants.
    pub suspended: Option<bool>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// Whether `prefix` can start a slug: at most 63 of `a-z`, `0-9` and `-`.
pub fn is_slug_prefix(prefix: &str) -> bool {
    prefix.len() <= 63
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A page of tenants, oldest first (platform admin).
pub async fn page(ctx: &Ctx, who: &Principal, filter: ListFilter) -> Result<TenantPage> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    let page = PageArgs::check(filter.limit, filter.cursor.as_deref(), &mut errors);
    if let Some(prefix) = &filter.prefix
        && !is_slug_prefix(prefix)
    {
        errors.push(FieldError::new(
            "prefix",
            "must be the start of a slug: at most 63 of a-z, 0-9 and '-'",
        ));
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let query = store::tenants::ListQuery {
        prefix: filter.prefix.filter(|p| !p.is_empty()),
        suspended: filter.suspended,
        after: page.after,
        limit: page.limit + 1,
    };
    let rows = store::tenants::page(&ctx.db, &query).await?;
    let (rows, next_cursor) = page.split(rows, |r| (r.created_at, r.id));
    Ok(TenantPage {
        items: rows.into_iter().map(to_model).collect(),
        next_cursor,
    })
}

/// Suspends (`true`) or resumes a tenant (platform admin): while suspended, every request with its
/// tokens is refused in authentication (`403 tenant-suspended`), and open GraphQL connections close.
pub async fn set_suspended(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    suspended: bool,
    request_id: Option<&str>,
) -> Result<Tenant> {
    platform_admin(who)?;
    let mut tx = ctx.db.begin().await?;
    let tenant = store::tenants::lock_by_slug(&mut tx, slug)
        .await?
        .ok_or(ServiceError::NotFound("tenant"))?;
    if tenant.state == "deleting" {
        return Err(ServiceError::Conflict(format!(
            "tenant {slug:?} is being deleted"
        )));
    }
    let (state, action) = if suspended {
        ("suspended", "tenant.suspend")
    } else {
        ("active", "tenant.resume")
    };
    let row = store::tenants::set_state(&mut *tx, tenant.id, state).await?;
    store::audit(
        &mut *tx,
        Some(tenant.id),
        &who.actor(),
        action,
        "tenant",
        &tenant.slug,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    if suspended {
        store::tenants::announce_tokens(&mut *tx, tenant.id).await?;
    }
    tx.commit().await?;
    Ok(to_model(row))
}

/// What a tenant delete did.
#[derive(Debug, Clone, PartialEq)]
pub enum Deleted {
    /// The tenant had no control planes: it is gone.
    Gone,
    /// Its control planes are being deleted; the tenant goes with the last one.
    Deleting(TenantDeletion),
}

/// Deletes a tenant (platform admin). Without control planes it is removed at once, with its tokens,
/// keys, quotas and audit log. With some, `cascade` queues each one's delete (the control-plane delete
/// path) and marks the tenant `deleting`; the worker removes it when the last one is gone. Without
/// `cascade`: 409 naming how many it has.
pub async fn delete(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    cascade: bool,
    request_id: Option<&str>,
) -> Result<Deleted> {
    platform_admin(who)?;
    let mut tx = ctx.db.begin().await?;
    let tenant = store::tenants::lock_by_slug(&mut tx, slug)
        .await?
        .ok_or(ServiceError::NotFound("tenant"))?;
    let live = store::tenants::live_control_planes(&mut *tx, tenant.id).await?;
    let audit = |n: usize| serde_json::json!({"cascade": cascade, "controlPlanes": n});
    if live.is_empty() {
        store::tenants::announce_tokens(&mut *tx, tenant.id).await?;
        store::tenants::remove(&mut *tx, tenant.id).await?;
        // The tenant's own log went with it: the record of its removal is the platform's.
        let details = audit(0);
        store::audit(
            &mut *tx,
            None,
            &who.actor(),
            "tenant.delete",
            "tenant",
            slug,
            request_id,
            details,
        )
        .await?;
        tx.commit().await?;
        return Ok(Deleted::Gone);
    }
    if !cascade {
        let n = live.len();
        let noun = if n == 1 { "control plane" } else { "control planes" };
        return Err(ServiceError::Conflict(format!(
            "tenant {slug:?} still has {n} {noun}: delete them first, or delete the tenant with cascade=true"
        )));
    }
    let mut operations = Vec::with_capacity(live.len());
    for id in &live {
        let accepted =
            super::control_planes::delete(ctx, &mut tx, who, slug, &id.to_string(), request_id).await?;
        operations.push(accepted.operation);
    }
    let row = store::tenants::set_state(&mut *tx, tenant.id, "deleting").await?;
    let details = audit(live.len());
    store::audit(
        &mut *tx,
        Some(tenant.id),
        &who.actor(),
        "tenant.delete",
        "tenant",
        slug,
        request_id,
        details,
    )
    .await?;
    store::tenants::announce_tokens(&mut *tx, tenant.id).await?;
    tx.commit().await?;
    Ok(Deleted::Deleting(TenantDeletion {
        tenant: to_model(row),
        operations,
    }))
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

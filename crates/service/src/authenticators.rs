//! A tenant's own identity providers for one control plane (the EKS identity-provider-config style):
//! add, list and remove JWT authenticators (tenant admin). Each is checked before it is accepted, then
//! rendered after Tenantplane's issuer into the control plane's AuthenticationConfiguration, which its
//! kube-apiserver reloads without a restart; its state is what that apiserver reports.

use chrono::Utc;
use uuid::Uuid;

use super::{
    Ctx, OnConflict, Result, ServiceError,
    control_planes::get_with_tenant,
    model::{Authenticator, AuthenticatorList, AuthenticatorState},
    tenant_for,
};
use crate::auth::Principal;
use crate::{
    domain::{Role, authenticator},
    k8s::crd::{AuthenticationStatus, AuthenticatorState as Observed, JwtAuthenticator},
};
use tenantplane_store::{self as store, authenticators::AuthenticatorRow};

/// The service-account issuer every control plane gets unless its extraArgs set another.
pub const DEFAULT_SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Adds `input` to control plane `id` (tenant admin): 422 naming each field it breaks, 409 for an issuer
/// it already trusts or beyond [`authenticator::MAX_PER_CONTROL_PLANE`]. Audited; it is `pending` until
/// the tenant API server loads it.
pub async fn create(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    id: &str,
    input: JwtAuthenticator,
) -> Result<Authenticator> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let (tenant_id, cp) = get_with_tenant(ctx, who, &tenant.slug, id).await?;
    let own = ctx.tokens.cluster.issuer.as_ref().map(|i| i.url.as_str());
    let taken: Vec<&str> = own.into_iter().chain([DEFAULT_SERVICE_ACCOUNT_ISSUER]).collect();
    let errors = authenticator::check(&input, &taken);
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    if let Some(program) = &ctx.limits.authenticator_checker {
        let errors = super::authenticator_check::check(program, &input).await?;
        if !errors.is_empty() {
            return Err(ServiceError::Invalid(errors));
        }
    }
    let row = AuthenticatorRow {
        id: Uuid::new_v4(),
        tenant_id,
        control_plane_id: cp.id,
        issuer_url: input.issuer.url.clone(),
        spec: serde_json::to_value(&input).map_err(|e| ServiceError::Internal(e.to_string()))?,
        created_by: who.actor(),
        created_at: Utc::now(),
    };
    let mut tx = ctx.db.begin().await?;
    store::authenticators::lock_control_plane(&mut tx, tenant_id, cp.id).await?;
    let existing = store::authenticators::list(&mut *tx, tenant_id, cp.id).await?;
    if existing.len() >= authenticator::MAX_PER_CONTROL_PLANE {
        return Err(ServiceError::Conflict(format!(
            "the control plane already trusts {} identity providers, the most it takes: remove one first",
            existing.len()
        )));
    }
    store::authenticators::insert(&mut *tx, &row)
        .await
        .on_conflict(|| {
            format!(
                "the control plane already trusts issuer {}: remove that authenticator first",
                row.issuer_url
            )
        })?;
    store::authenticators::enqueue_render(&mut tx, tenant_id, cp.id).await?;
    audit(&mut tx, who, &row, "control-plane.authenticator.create").await?;
    tx.commit().await?;
    Ok(to_model(row, &serde_json::Value::Null))
}

/// The authenticators of control plane `id`, oldest first, each with its state (tenant admin).
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, id: &str) -> Result<AuthenticatorList> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let (tenant_id, cp) = get_with_tenant(ctx, who, &tenant.slug, id).await?;
    let rows = store::authenticators::list(&ctx.db, tenant_id, cp.id).await?;
    Ok(AuthenticatorList {
        items: rows.into_iter().map(|r| to_model(r, &cp.status)).collect(),
    })
}

/// One authenticator of control plane `id` (tenant admin); 404 when it is not one of its.
pub async fn get(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    id: &str,
    authenticator: Uuid,
) -> Result<Authenticator> {
    list(ctx, who, slug, id)
        .await?
        .items
        .into_iter()
        .find(|a| a.id == authenticator)
        .ok_or(ServiceError::NotFound("authenticator"))
}

/// Removes an authenticator (tenant admin): its tokens stop working once the tenant API server reloads
/// its configuration. Audited; 404 when it is not one of the control plane's.
pub async fn delete(ctx: &Ctx, who: &Principal, slug: &str, id: &str, authenticator: Uuid) -> Result<()> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let (tenant_id, cp) = get_with_tenant(ctx, who, &tenant.slug, id).await?;
    let mut tx = ctx.db.begin().await?;
    let rows = store::authenticators::list(&mut *tx, tenant_id, cp.id).await?;
    let row = rows
        .into_iter()
        .find(|r| r.id == authenticator)
        .ok_or(ServiceError::NotFound("authenticator"))?;
    store::authenticators::delete(&mut tx, tenant_id, cp.id, authenticator).await?;
    store::authenticators::enqueue_render(&mut tx, tenant_id, cp.id).await?;
    audit(&mut tx, who, &row, "control-plane.authenticator.delete").await?;
    tx.commit().await?;
    Ok(())
}

async fn audit(
    tx: &mut sqlx::PgConnection,
    who: &Principal,
    row: &AuthenticatorRow,
    action: &str,
) -> Result<()> {
    store::audit(
        &mut *tx,
        Some(row.tenant_id),
        &who.actor(),
        action,
        "control-plane",
        &row.control_plane_id.to_string(),
        None,
        serde_json::json!({"authenticatorId": row.id, "issuerUrl": row.issuer_url}),
    )
    .await?;
    Ok(())
}

/// The API shape of `row`, its state from the control plane's reported status (`status.authentication`).
fn to_model(row: AuthenticatorRow, status: &serde_json::Value) -> Authenticator {
    let (state, message) = state_of(&row.issuer_url, status);
    Authenticator {
        id: row.id,
        control_plane_id: row.control_plane_id,
        spec: serde_json::from_value(row.spec).unwrap_or_else(|_| placeholder(&row.issuer_url)),
        state,
        message,
        created_by: row.created_by,
        created_at: row.created_at,
    }
}

/// What the tenant API server reports of issuer `url`: pending until its status names it.
pub fn state_of(url: &str, status: &serde_json::Value) -> (AuthenticatorState, Option<String>) {
    let reported: Option<AuthenticationStatus> = status
        .get("authentication")
        .and_then(|a| serde_json::from_value(a.clone()).ok());
    let entry = reported
        .as_ref()
        .and_then(|r| r.jwt.iter().find(|j| j.issuer_url == url));
    match entry {
        Some(e) => (
            match e.state {
                Observed::Pending => AuthenticatorState::Pending,
                Observed::Active => AuthenticatorState::Active,
                Observed::Failed => AuthenticatorState::Failed,
            },
            e.message.clone(),
        ),
        None => (
            AuthenticatorState::Pending,
            Some("not yet in the configuration the tenant API server runs".into()),
        ),
    }
}

/// A stored spec that no longer reads (never written so): only its issuer.
fn placeholder(url: &str) -> JwtAuthenticator {
    JwtAuthenticator {
        issuer: crate::k8s::crd::JwtIssuer {
            url: url.to_string(),
            discovery_url: None,
            audiences: Vec::new(),
            audience_match_policy: None,
            certificate_authority: None,
        },
        claim_validation_rules: Vec::new(),
        claim_mappings: Default::default(),
        user_validation_rules: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_state_is_what_the_tenant_api_server_reported_and_pending_until_then() {
        let status = json!({"authentication": {"jwt": [
            {"issuerUrl": "https://a.example", "state": "Active"},
            {"issuerUrl": "https://b.example", "state": "Failed", "message": "refused at reload"},
        ]}});
        assert_eq!(
            state_of("https://a.example", &status),
            (AuthenticatorState::Active, None)
        );
        assert_eq!(
            state_of("https://b.example", &status),
            (AuthenticatorState::Failed, Some("refused at reload".into()))
        );
        assert_eq!(
            state_of("https://c.example", &status).0,
            AuthenticatorState::Pending
        );
        assert_eq!(
            state_of("https://a.example", &json!({})).0,
            AuthenticatorState::Pending
        );
    }
}

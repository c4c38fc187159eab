//! Tokens: mint, list, revoke, and authenticate a bearer token.

use chrono::{Duration, Utc};
use uuid::Uuid;

use super::{
    Ctx, Result, ServiceError,
    model::{MintToken, MintedToken, Token, TokenPage},
    tenant_for,
};
use crate::auth::{self as auth, Claims, Principal, TokenError, keys};
use crate::domain::{FieldError, Role};
use tenantplane_store::{self as store, tokens::TokenRow};

/// Default token lifetime.
pub const DEFAULT_TTL_SECONDS: i64 = 24 * 3600;

/// Converts a row to the API shape.
pub fn to_model(row: TokenRow) -> Token {
    Token {
        id: row.jti,
        role: row.role.parse().unwrap_or(Role::TenantViewer),
        description: row.description,
        created_by: row.created_by,
        created_at: row.created_at,
        expires_at: row.expires_at,
        revoked_at: row.revoked_at,
    }
}

/// Mints a token for `tenant` (None = platform admin) without an authorization check: the caller
/// has done it (API) or has database access (the `token mint` CLI).
pub async fn mint_unchecked(
    ctx: &Ctx,
    tenant: Option<Uuid>,
    role: Role,
    ttl_seconds: i64,
    description: &str,
    created_by: &str,
) -> Result<MintedToken> {
    if (role == Role::PlatformAdmin) != tenant.is_none() {
        return Err(FieldError::new(
            "role",
            "platform-admin tokens belong to no tenant; tenant tokens cannot be platform-admin",
        )
        .into());
    }
    if !(60..=auth::MAX_TOKEN_TTL_SECONDS).contains(&ttl_seconds) {
        return Err(FieldError::new("ttlSeconds", "must be between 60 seconds and 366 days").into());
    }
    // Database errors (a lock wait past `lock_timeout` too) map as any other; key errors are internal.
    let key = keys::active(&ctx.db, &ctx.server_key, tenant).await?;
    if key.created {
        ctx.tokens.verifying_keys.key_created();
    }
    let now = Utc::now();
    let expires_at = now + Duration::seconds(ttl_seconds);
    let jti = Uuid::new_v4();
    let row = store::tokens::insert(
        &ctx.db,
        jti,
        tenant,
        role.as_str(),
        description,
        created_by,
        expires_at,
    )
    .await?;
    let claims = Claims {
        iss: ctx.tokens.issuer.clone(),
        aud: ctx.tokens.audience.clone(),
        sub: if description.is_empty() {
            created_by.to_string()
        } else {
            description.to_string()
        },
        jti,
        tid: tenant,
        role,
        iat: now.timestamp(),
        nbf: now.timestamp(),
        exp: expires_at.timestamp(),
    };
    let token = auth::sign(&claims, &key.kid, &key.pkcs8)
        .map_err(|e| ServiceError::Internal(format!("sign: {e}")))?;
    Ok(MintedToken {
        token,
        record: to_model(row),
    })
}

/// The longest token description.
pub const MAX_DESCRIPTION_CHARS: usize = 256;

/// Mints a token in a tenant (tenant admins; never above tenant-admin).
pub async fn mint(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    input: MintToken,
    request_id: Option<&str>,
) -> Result<MintedToken> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    if input.role == Role::PlatformAdmin {
        return Err(FieldError::new(
            "role",
            "a tenant token can be tenant-admin, tenant-member or tenant-viewer",
        )
        .into());
    }
    crate::domain::check_description("description", &input.description, MAX_DESCRIPTION_CHARS)?;
    let ttl = input.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    external_mint_cap(ctx, who, ttl)?;
    // The quota lock is held until the token is recorded (it is inserted on another connection: the lock
    // lets foreign-key checks through).
    let mut quota = ctx.db.begin().await?;
    super::quotas::admit_token(ctx, &mut quota, tenant.id).await?;
    let minted = mint_unchecked(
        ctx,
        Some(tenant.id),
        input.role,
        ttl,
        &input.description,
        &who.actor(),
    )
    .await?;
    quota.commit().await?;
    store::audit(
        &ctx.db,
        Some(tenant.id),
        &who.actor(),
        "token.mint",
        "token",
        &minted.record.id.to_string(),
        request_id,
        serde_json::json!({"role": input.role}),
    )
    .await?;
    Ok(minted)
}

/// Refuses a lifetime beyond `limits.external_mint_max_ttl_seconds` when `who` signed in through an
/// external identity provider (whatever its role): 422 naming `ttlSeconds`.
fn external_mint_cap(ctx: &Ctx, who: &Principal, ttl_seconds: i64) -> Result<()> {
    let cap = ctx.limits.external_mint_max_ttl_seconds;
    if who.external && ttl_seconds > cap {
        return Err(FieldError::new(
            "ttlSeconds",
            format!(
                "a caller signed in through an external identity provider may mint tokens of at most {cap} seconds"
            ),
        )
        .into());
    }
    Ok(())
}

/// Filters of a token list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only revoked (true) or unrevoked (false) tokens.
    pub revoked: Option<bool>,
    /// Only this role.
    pub role: Option<Role>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// A page of a tenant's tokens, newest first (tenant admin).
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, filter: ListFilter) -> Result<TokenPage> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let page = super::page::PageArgs::parse(filter.limit, filter.cursor.as_deref())?;
    let query = store::tokens::ListQuery {
        revoked: filter.revoked,
        role: filter.role.map(|r| r.as_str().to_string()),
        before: page.after,
        limit: page.limit + 1,
    };
    let rows = store::tokens::page(&ctx.db, tenant.id, &query).await?;
    let (rows, next_cursor) = page.split(rows, |r| (r.created_at, r.jti));
    Ok(TokenPage {
        items: rows.into_iter().map(to_model).collect(),
        next_cursor,
    })
}

/// Revokes a tenant's token; effective on its next request.
pub async fn revoke(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    jti: &str,
    request_id: Option<&str>,
) -> Result<Token> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let jti = super::parse_id(jti, "token")?;
    let row = store::tokens::revoke(&ctx.db, tenant.id, jti)
        .await?
        .ok_or(ServiceError::NotFound("token"))?;
    store::tokens::announce_revoked(&ctx.db, jti).await?;
    store::audit(
        &ctx.db,
        Some(tenant.id),
        &who.actor(),
        "token.revoke",
        "token",
        &jti.to_string(),
        request_id,
        serde_json::json!({}),
    )
    .await?;
    Ok(to_model(row))
}

/// Rotates a tenant's signing key; tokens signed by the old key keep working until they expire. A tenant
/// has at most `limits.max_signing_keys` live keys: one more answers 409.
pub async fn rotate_signing_key(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    request_id: Option<&str>,
) -> Result<String> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let mut tx = ctx.db.begin().await?;
    let live = store::tokens::lock_live_signing_keys(&mut tx, tenant.id).await?;
    if live >= ctx.limits.max_signing_keys {
        return Err(ServiceError::Conflict(format!(
            "the tenant already has {live} live signing keys, the limit: a retired key keeps verifying until every token it may have signed has expired (at most 366 days), so rotate again after the oldest retired key has expired"
        )));
    }
    let kid = keys::rotate(&mut tx, &ctx.server_key, Some(tenant.id)).await?;
    store::audit(
        &mut *tx,
        Some(tenant.id),
        &who.actor(),
        "signing-key.rotate",
        "signing-key",
        &kid,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    ctx.tokens.verifying_keys.key_created();
    Ok(kid)
}

/// Authenticates a bearer token: signature, claims, key ownership and the revocation list.
pub async fn authenticate(ctx: &Ctx, token: &str) -> std::result::Result<Principal, TokenError> {
    if let Some(iss) = auth::peek_issuer(token).filter(|iss| *iss != ctx.tokens.issuer)
        && ctx.tokens.external.knows(&iss)
    {
        return authenticate_external(ctx, &iss, token).await;
    }
    let kid = auth::token_kid(token)?;
    let key = ctx
        .tokens
        .verifying_keys
        .get(&ctx.db, &kid)
        .await
        .map_err(|_| TokenError::Unavailable)?
        .ok_or(TokenError::UnknownKey)?;
    let claims = auth::verify(token, &key.public_key, &ctx.tokens)?;
    if key.tenant_id != claims.tid {
        return Err(TokenError::Invalid(
            "the signing key does not belong to the token's tenant",
        ));
    }
    let row = store::tokens::check(&ctx.db, claims.jti)
        .await
        .map_err(|_| TokenError::Unavailable)?
        .ok_or(TokenError::Revoked)?;
    if row.revoked_at.is_some()
        || row.tenant_id != claims.tid
        || row.role != claims.role.as_str()
        || row.expires_at <= Utc::now()
    {
        return Err(TokenError::Revoked);
    }
    tenant_admits(row.tenant_state.as_deref())?;
    Ok(Principal {
        jti: claims.jti,
        tenant_id: claims.tid,
        role: claims.role,
        subject: claims.sub,
        expires_at: row.expires_at,
        external: false,
    })
}

/// Checks again that an authenticated caller's token still holds (long-lived connections, before each
/// operation): not expired, and for our own tokens not revoked.
pub async fn recheck(ctx: &Ctx, who: &Principal) -> std::result::Result<(), TokenError> {
    if who.expires_at <= Utc::now() {
        return Err(TokenError::Invalid("expired"));
    }
    if who.external {
        return Ok(());
    }
    let row = store::tokens::check(&ctx.db, who.jti)
        .await
        .map_err(|_| TokenError::Unavailable)?
        .ok_or(TokenError::Revoked)?;
    if row.revoked_at.is_some() || row.expires_at <= Utc::now() {
        return Err(TokenError::Revoked);
    }
    tenant_admits(row.tenant_state.as_deref())
}

/// Whether a token of a tenant in `state` (None: a platform token) may be used: not while the tenant is
/// suspended or being deleted.
fn tenant_admits(state: Option<&str>) -> std::result::Result<(), TokenError> {
    match state {
        Some("suspended") => Err(TokenError::TenantSuspended),
        Some("deleting") => Err(TokenError::TenantDeleting),
        _ => Ok(()),
    }
}

/// Authenticates a token of an external OIDC issuer: its signature and claims, then the tenant its
/// claims name. Revocation is the issuer's (tokens are short-lived); the principal's id is derived
/// from the issuer and the token's `jti` (else its subject and expiry) for the audit log.
async fn authenticate_external(
    ctx: &Ctx,
    iss: &str,
    token: &str,
) -> std::result::Result<Principal, TokenError> {
    let identity = ctx.tokens.external.verify(iss, token).await?;
    let tenant_id = match &identity.tenant {
        None => None,
        Some(slug) => Some(
            store::tenants::by_slug(&ctx.db, slug)
                .await
                .map_err(|_| TokenError::Unavailable)?
                .ok_or(TokenError::Invalid("the token's tenant does not exist"))
                .and_then(|t| tenant_admits(Some(&t.state)).map(|()| t.id))?,
        ),
    };
    let handle = format!(
        "{}\n{}",
        identity.issuer,
        identity.jti.clone().unwrap_or_else(|| format!(
            "{}@{}",
            identity.subject,
            identity.expires_at.timestamp()
        ))
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, handle.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest.as_ref()[..16]);
    Ok(Principal {
        jti: uuid::Builder::from_random_bytes(id).into_uuid(),
        tenant_id,
        role: identity.role,
        subject: format!("{}@{}", identity.subject, identity.issuer),
        expires_at: identity.expires_at,
        external: true,
    })
}

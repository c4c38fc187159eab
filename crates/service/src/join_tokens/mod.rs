//! Node join tokens: kubeadm bootstrap tokens of a control plane's tenant cluster (tenant admins).
//!
//! A token is recorded in PostgreSQL first (its public id, description, expiry, creator: never its
//! secret half), then created in the tenant cluster as `kube-system/bootstrap-token-<id>` through the
//! control plane's admin kubeconfig. The create answers only once the token is usable for
//! `kubeadm join`: the tenant's bootstrapsigner has signed `kube-public/cluster-info` with it and the
//! tenant's API server authenticates it, within [`USABLE_WAIT`]. Otherwise the Secret is deleted again,
//! the record is revoked and the answer is `Unavailable` (retryable). A revocation deletes the Secret
//! and waits (as long) for the signature to go.
//!
//! The list reads PostgreSQL only (tokens neither revoked nor expired): it is the record of what
//! Tenantplane issued, and it answers while the tenant cluster is asleep or unreachable. A token's
//! Secret deleted in the tenant cluster by other means stays listed until it expires or is revoked here.

pub mod tenant;

use std::time::Duration;

use chrono::{DateTime, Utc};

use self::tenant::{Created, TenantCluster};
use super::{
    Ctx, Result, ServiceError,
    control_planes::{self, admin_kubeconfig, owned_secret_data, served_secret},
    model::{ControlPlane, CreateJoinToken, CreatedJoinToken, JoinToken, JoinTokenList},
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::{FieldError, Role};
use tenantplane_store::{
    self as store, StoreError,
    join_tokens::{JoinTokenRow, NewJoinToken},
    tenants::TenantRow,
};

/// Live (neither revoked nor expired) tokens a control plane may have: its list is never longer than
/// one page of the other lists.
pub const MAX_LIVE: i64 = 100;

/// The refusal of a token over [`MAX_LIVE`].
fn too_many() -> ServiceError {
    ServiceError::Conflict(format!(
        "the control plane has {MAX_LIVE} live join tokens, the most it may have: revoke one, or wait for one to expire"
    ))
}

/// Lifetime of a token when the request names none: one day.
pub const DEFAULT_TTL_SECONDS: i64 = 86_400;
/// The longest lifetime: seven days.
pub const MAX_TTL_SECONDS: i64 = 604_800;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 256;
/// How long a create waits for its token to become usable (and a revocation for its signature to go).
pub const USABLE_WAIT: Duration = Duration::from_secs(30);
/// The Secret's `description` when the request gives none.
const DEFAULT_DESCRIPTION: &str = "Node join token created through the Tenantplane API";
/// Fresh ids tried when an id is taken (in the record or in the tenant cluster).
const ID_ATTEMPTS: usize = 3;
/// The characters of a token (kubeadm's `[a-z0-9]`).
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A kubeadm bootstrap token, `<id>.<secret>`. Its `Debug` never shows the secret half, and it has no
/// `Display`: the secret half is only read through [`BootstrapToken::secret`] and
/// [`BootstrapToken::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    /// The public id (`[a-z0-9]{6}`).
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl BootstrapToken {
    /// A new token from the operating system's random number generator: 6 + 16 characters of
    /// `[a-z0-9]`, each uniform (bytes of 252 and above are drawn again, so `% 36` has no bias).
    pub fn generate() -> Result<Self> {
        let mut text = String::with_capacity(22);
        let mut bytes = [0u8; 32];
        while text.len() < 22 {
            getrandom::fill(&mut bytes).map_err(|e| {
                ServiceError::Internal(format!("the system random number generator failed: {e}"))
            })?;
            for b in bytes.iter().filter(|b| **b < 252) {
                if text.len() < 22 {
                    text.push(char::from(ALPHABET[usize::from(*b % 36)]));
                }
            }
        }
        let secret = text.split_off(6);
        Ok(Self { id: text, secret })
    }

    /// A token from its parts (tests).
    #[cfg(test)]
    pub fn from_parts(id: &str, secret: &str) -> Self {
        Self {
            id: id.into(),
            secret: secret.into(),
        }
    }

    /// The secret half.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token, `<id>.<secret>`.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// Whether `id` can be a token id (`[a-z0-9]{6}`).
fn is_token_id(id: &str) -> bool {
    id.len() == 6 && id.bytes().all(|b| ALPHABET.contains(&b))
}

/// The lifetime and description of a create, or every field error.
fn validate(input: &CreateJoinToken) -> Result<(i64, Option<String>)> {
    let mut errors = Vec::new();
    let ttl = input.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        errors.push(FieldError::new(
            "ttlSeconds",
            format!("must be between 1 and {MAX_TTL_SECONDS} seconds (7 days)"),
        ));
    }
    if let Some(description) = &input.description {
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            errors.push(FieldError::new(
                "description",
                format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
            ));
        } else if description.chars().any(char::is_control) {
            errors.push(FieldError::new(
                "description",
                "must not contain control characters",
            ));
        }
    }
    if errors.is_empty() {
        Ok((ttl, input.description.clone()))
    } else {
        Err(ServiceError::Invalid(errors))
    }
}

/// `now + ttl`, rounded up to a whole second (the Secret's `expiration` has second precision): the
/// token lives at least `ttl` seconds.
fn expiry(now: DateTime<Utc>, ttl: i64) -> DateTime<Utc> {
    let at = now + chrono::Duration::seconds(ttl);
    let whole = at.timestamp() + i64::from(at.timestamp_subsec_nanos() > 0);
    DateTime::from_timestamp(whole, 0).unwrap_or(at)
}

fn to_model(row: JoinTokenRow) -> JoinToken {
    JoinToken {
        id: row.token_id,
        description: row.description,
        expires_at: row.expires_at,
        created_at: row.created_at,
    }
}

/// A served control plane's tenant cluster, and what a node needs to join it.
#[derive(Debug)]
struct Target {
    cp: ControlPlane,
    /// `host:port` of its API server.
    endpoint: String,
    /// `sha256:<hex>` of its CA's SubjectPublicKeyInfo.
    ca_hash: String,
    cluster: TenantCluster,
}

/// The tenant cluster of control plane `id`: `NotReady` until it has served (as for its kubeconfig),
/// reports an endpoint, and has its admin kubeconfig and CA in Secrets owned by its pinned TCP.
async fn target(
    ctx: &Ctx,
    kube: Option<&kube::Client>,
    who: &Principal,
    tenant: &TenantRow,
    id: &str,
) -> Result<Target> {
    let cp = control_planes::get(ctx, who, &tenant.slug, id).await?;
    let secret = served_secret(ctx, tenant, &cp, "nodes cannot join it yet").await?;
    let client = kube.ok_or(ServiceError::NoManagementCluster)?;
    let endpoint = cp
        .status
        .get("endpoint")
        .and_then(|e| e.as_str())
        .filter(|e| !e.is_empty())
        .ok_or_else(|| {
            ServiceError::NotReady(
                "the control plane reports no endpoint yet: nodes cannot join it yet".into(),
            )
        })?
        .to_string();
    let kubeconfig = admin_kubeconfig(client, &secret).await?;
    let ca_name = format!("{}-ca", cp.name);
    let ca = owned_secret_data(client, &secret.namespace, &ca_name, &secret.owner_uid, "CA")
        .await?
        .and_then(|mut data| data.remove("ca.crt"))
        .ok_or_else(|| ServiceError::NotReady("the control plane's CA Secret has no ca.crt yet".into()))?;
    let ca_hash = tenant::ca_cert_hash(&ca.0)?;
    let cluster = TenantCluster::connect(&kubeconfig).await?;
    Ok(Target {
        cp,
        endpoint,
        ca_hash,
        cluster,
    })
}

/// Creates a join token in the control plane's tenant cluster (tenant admin) and answers once it is
/// usable; the token is in the answer, once.
pub async fn create(
    ctx: &Ctx,
    kube: Option<&kube::Client>,
    who: &Principal,
    slug: &str,
    id: &str,
    input: CreateJoinToken,
    request_id: Option<&str>,
) -> Result<CreatedJoinToken> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let (ttl, description) = validate(&input)?;
    let cp = control_planes::get(ctx, who, &tenant.slug, id).await?;
    if store::join_tokens::count_live(&ctx.db, cp.id).await? >= MAX_LIVE {
        return Err(too_many());
    }
    let target = target(ctx, kube, who, &tenant, id).await?;
    if target.cluster.signed().await?.is_none() {
        return Err(ServiceError::Unavailable(
            "the tenant cluster has no kube-public/cluster-info yet (the controller writes it once the control plane serves); nothing was created, retry shortly".into(),
        ));
    }
    for _ in 0..ID_ATTEMPTS {
        let token = BootstrapToken::generate()?;
        let created_at = Utc::now();
        let new = NewJoinToken {
            tenant: tenant.id,
            control_plane: target.cp.id,
            token_id: &token.id,
            description: description.as_deref(),
            created_at,
            expires_at: expiry(created_at, ttl),
            created_by: &who.actor(),
        };
        let row = match store::join_tokens::insert_capped(&ctx.db, &new, MAX_LIVE).await {
            Err(StoreError::Conflict(_)) => continue,
            other => other?.ok_or_else(too_many)?,
        };
        let issued = Issue {
            ctx,
            who,
            target: &target,
            token: &token,
            row: &row,
            request_id,
        };
        if let Some(created) = issued.run(ttl).await? {
            return Ok(created);
        }
    }
    Err(ServiceError::Internal(format!(
        "no free join token id after {ID_ATTEMPTS} attempts"
    )))
}

/// One recorded token on its way into the tenant cluster.
struct Issue<'a> {
    ctx: &'a Ctx,
    who: &'a Principal,
    target: &'a Target,
    token: &'a BootstrapToken,
    row: &'a JoinTokenRow,
    request_id: Option<&'a str>,
}

impl Issue<'_> {
    /// Creates the Secret and waits until the token is usable. `Ok(None)` when a Secret of that name is
    /// in the tenant cluster already (the record is revoked; the caller tries another id). On failure the
    /// Secret is deleted again and the record revoked.
    async fn run(&self, ttl: i64) -> Result<Option<CreatedJoinToken>> {
        let cluster = &self.target.cluster;
        let description = self
            .row
            .description
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or(DEFAULT_DESCRIPTION);
        let outcome = match cluster.create(self.token, self.row.expires_at, description).await {
            Ok(Created::NameTaken) => {
                store::join_tokens::revoke(&self.ctx.db, self.row.tenant_id, self.row.id).await?;
                return Ok(None);
            }
            Ok(Created::Yes) => {
                let deadline = tokio::time::Instant::now() + USABLE_WAIT;
                match cluster.wait_usable(self.token, deadline).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(ServiceError::Unavailable(format!(
                        "the tenant cluster did not make the token usable within {}s (its bootstrapsigner signs kube-public/cluster-info with it); it was removed again, retry shortly",
                        USABLE_WAIT.as_secs()
                    ))),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                self.audit("join-token.create", serde_json::json!({"tokenId": self.token.id, "ttlSeconds": ttl, "expiresAt": self.row.expires_at}))
                    .await?;
                Ok(Some(self.created()))
            }
            Err(err) => {
                self.undo(&err).await?;
                Err(err)
            }
        }
    }

    /// Removes a token that did not become usable: its Secret (best effort: it expires anyway) and its
    /// record, with an audit row saying why.
    async fn undo(&self, err: &ServiceError) -> Result<()> {
        let removed = match self.target.cluster.delete(&self.token.id).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(token.id = %self.token.id, error = %e, "a join token that did not become usable could not be deleted from the tenant cluster; it expires at its expiration");
                false
            }
        };
        store::join_tokens::revoke(&self.ctx.db, self.row.tenant_id, self.row.id).await?;
        let reason = match err {
            ServiceError::Internal(_) => "internal error".to_string(),
            other => other.to_string(),
        };
        self.audit(
            "join-token.create-failed",
            serde_json::json!({"tokenId": self.token.id, "reason": reason, "secretRemoved": removed}),
        )
        .await
    }

    async fn audit(&self, action: &str, details: serde_json::Value) -> Result<()> {
        store::audit(
            &self.ctx.db,
            Some(self.row.tenant_id),
            &self.who.actor(),
            action,
            "control-plane",
            &self.row.control_plane_id.to_string(),
            self.request_id,
            details,
        )
        .await?;
        Ok(())
    }

    fn created(&self) -> CreatedJoinToken {
        let token = self.token.expose();
        let (endpoint, hash) = (&self.target.endpoint, &self.target.ca_hash);
        CreatedJoinToken {
            id: self.token.id.clone(),
            join_command: format!(
                "kubeadm join {endpoint} --token {token} --discovery-token-ca-cert-hash {hash}"
            ),
            token,
            expires_at: self.row.expires_at,
            created_at: self.row.created_at,
            description: self.row.description.clone(),
            endpoint: endpoint.clone(),
            discovery_token_ca_cert_hash: hash.clone(),
        }
    }
}

/// The control plane's join tokens that are neither revoked nor expired (tenant admin), from PostgreSQL.
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, id: &str) -> Result<JoinTokenList> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let cp = control_planes::get(ctx, who, &tenant.slug, id).await?;
    let rows = store::join_tokens::live(&ctx.db, tenant.id, cp.id).await?;
    Ok(JoinTokenList {
        items: rows.into_iter().map(to_model).collect(),
    })
}

/// Revokes a join token (tenant admin): deletes its Secret in the tenant cluster, waits (bounded) for
/// its signature in cluster-info to go, and records the revocation. `NotFound` for an unknown or
/// already revoked token; an expired one is still removed.
pub async fn revoke(
    ctx: &Ctx,
    kube: Option<&kube::Client>,
    who: &Principal,
    slug: &str,
    id: &str,
    token_id: &str,
    request_id: Option<&str>,
) -> Result<()> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantAdmin).await?;
    let cp = control_planes::get(ctx, who, &tenant.slug, id).await?;
    if !is_token_id(token_id) {
        return Err(ServiceError::NotFound("join token"));
    }
    let row = store::join_tokens::unrevoked(&ctx.db, tenant.id, cp.id, token_id)
        .await?
        .ok_or(ServiceError::NotFound("join token"))?;
    let secret = served_secret(ctx, &tenant, &cp, "its tenant cluster cannot be reached yet").await?;
    let client = kube.ok_or(ServiceError::NoManagementCluster)?;
    let cluster = TenantCluster::connect(&admin_kubeconfig(client, &secret).await?).await?;
    cluster.delete(token_id).await?;
    let deadline = tokio::time::Instant::now() + USABLE_WAIT;
    if !cluster.wait_unsigned(token_id, deadline).await? {
        tracing::warn!(token.id = %token_id, "the signature of a revoked join token is still in cluster-info; the token no longer authenticates");
    }
    let mut tx = ctx.db.begin().await?;
    if store::join_tokens::revoke(&mut *tx, tenant.id, row.id)
        .await?
        .is_some()
    {
        store::audit(
            &mut *tx,
            Some(tenant.id),
            &who.actor(),
            "join-token.revoke",
            "control-plane",
            &cp.id.to_string(),
            request_id,
            serde_json::json!({"tokenId": token_id}),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn generated_tokens_are_kubeadm_tokens_and_differ() {
        let a = BootstrapToken::generate().unwrap();
        let b = BootstrapToken::generate().unwrap();
        let shape = |t: &BootstrapToken| {
            t.id.len() == 6
                && t.secret().len() == 16
                && t.expose().bytes().all(|c| c == b'.' || ALPHABET.contains(&c))
        };
        assert!(shape(&a) && shape(&b), "{} {}", a.expose(), b.expose());
        assert_ne!(a.expose(), b.expose());
        assert!(is_token_id(&a.id));
    }

    #[test]
    fn a_token_s_debug_hides_its_secret_half() {
        let token = BootstrapToken::from_parts("abc123", "0123456789abcdef");
        let debug = format!("{token:?}");
        assert!(
            debug.contains("abc123") && !debug.contains("0123456789abcdef"),
            "{debug}"
        );
    }

    #[test]
    fn ttl_and_description_are_checked_naming_the_field() {
        let input = |ttl: Option<i64>, description: Option<&str>| CreateJoinToken {
            ttl_seconds: ttl,
            description: description.map(str::to_string),
        };
        assert_eq!(validate(&input(None, None)).unwrap(), (86_400, None));
        assert_eq!(validate(&input(Some(1), Some("rack 4"))).unwrap().0, 1);
        assert_eq!(
            validate(&input(Some(604_800), Some(&"x".repeat(256)))).unwrap().0,
            604_800
        );
        let fields = |r: Result<(i64, Option<String>)>| match r {
            Err(ServiceError::Invalid(errors)) => errors.into_iter().map(|e| e.field).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(fields(validate(&input(Some(0), None))), ["ttlSeconds"]);
        assert_eq!(fields(validate(&input(Some(604_801), None))), ["ttlSeconds"]);
        assert_eq!(
            fields(validate(&input(Some(-5), Some(&"x".repeat(257))))),
            ["ttlSeconds", "description"]
        );
        assert_eq!(
            fields(validate(&input(None, Some("two\nlines")))),
            ["description"]
        );
    }

    #[test]
    fn expiry_rounds_up_to_a_whole_second() {
        let now = DateTime::parse_from_rfc3339("2026-12-15T10:00:00.250Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(expiry(now, 1).to_rfc3339(), "2026-12-15T10:00:02+00:00");
        let whole = DateTime::parse_from_rfc3339("2026-12-15T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(expiry(whole, 60).to_rfc3339(), "2026-12-15T10:01:00+00:00");
    }
}

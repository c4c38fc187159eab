//! Per-tenant JWTs (RFC 8725 rules): Ed25519 signing keys encrypted at rest, minting and verification.
//!
//! Each tenant has its own signing keys, and the platform has keys of its own (for platform-admin
//! tokens). Private keys are sealed with AES-256-GCM under the server key. Rotation keeps an old key
//! for verification until every token it signed has expired.

pub mod cluster;
pub mod external;
pub mod keys;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::Role;

/// The largest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Clock leeway for `exp` and `nbf`, in seconds.
pub const LEEWAY_SECONDS: u64 = 30;
/// The longest token lifetime that can be minted.
pub const MAX_TOKEN_TTL_SECONDS: i64 = 366 * 24 * 3600;

/// The claims of a Tenantplane token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Issuer.
    pub iss: String,
    /// Audience.
    pub aud: String,
    /// Subject: who the token was minted for.
    pub sub: String,
    /// Token id (revocation handle).
    pub jti: Uuid,
    /// Tenant id; absent for platform-admin tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<Uuid>,
    /// Role.
    pub role: Role,
    /// Issued at (seconds).
    pub iat: i64,
    /// Not before (seconds).
    pub nbf: i64,
    /// Expiry (seconds).
    pub exp: i64,
}

/// Why a token was refused. Every variant but `TenantSuspended` (403) maps to 401; the text is safe to return.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// No bearer token.
    #[error("a bearer token is required")]
    Missing,
    /// Too large.
    #[error("the token is larger than 8 KiB")]
    TooLarge,
    /// Not a JWT, or a header we do not accept (algorithm, missing kid).
    #[error("the token is malformed or uses an algorithm that is not accepted")]
    Malformed,
    /// No key with this kid.
    #[error("the token was signed by an unknown key")]
    UnknownKey,
    /// Signature, expiry, not-before, issuer or audience check failed.
    #[error("the token is invalid: {0}")]
    Invalid(&'static str),
    /// Revoked or unknown jti.
    #[error("the token was revoked")]
    Revoked,
    /// The token's tenant is suspended by a platform admin: every request with its tokens is refused (403).
    #[error(
        "the token's tenant is suspended: every request with its tokens is refused until a platform admin resumes it"
    )]
    TenantSuspended,
    /// The token's tenant is being deleted.
    #[error("the token's tenant is being deleted")]
    TenantDeleting,
    /// The key or token store could not be read; not the caller's fault (5xx, never 401).
    #[error("the token store is unavailable")]
    Unavailable,
}

/// Authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Token id.
    pub jti: Uuid,
    /// Tenant, or `None` for a platform admin.
    pub tenant_id: Option<Uuid>,
    /// Role.
    pub role: Role,
    /// Subject.
    pub subject: String,
    /// Token expiry.
    pub expires_at: DateTime<Utc>,
    /// Issued by an external OIDC issuer: its revocation is the issuer's, so only expiry is rechecked.
    pub external: bool,
}

impl Principal {
    /// A short actor string for the audit log: `role:subject(jti)`.
    pub fn actor(&self) -> String {
        format!("{}:{}({})", self.role, self.subject, self.jti)
    }

    /// Whether the caller may act on `tenant` with at least `role`.
    pub fn can(&self, tenant: Uuid, role: Role) -> bool {
        self.role == Role::PlatformAdmin || (self.tenant_id == Some(tenant) && self.role.includes(role))
    }

    /// Whether the caller belongs to `tenant` (or is a platform admin), whatever the role.
    pub fn sees(&self, tenant: Uuid) -> bool {
        self.role == Role::PlatformAdmin || self.tenant_id == Some(tenant)
    }
}

/// Issuer and audience expected in every token, and what verification caches.
#[derive(Debug, Clone, Default)]
pub struct TokenSettings {
    /// `iss`.
    pub issuer: String,
    /// `aud`.
    pub audience: String,
    /// External OIDC issuers whose tokens are accepted too (none by default).
    pub external: external::ExternalIssuers,
    /// Verifying keys already read.
    pub verifying_keys: keys::VerifyingKeyCache,
    /// Cluster credentials: the issuer tenant apiservers trust and what downloaded kubeconfigs run.
    pub cluster: ClusterCredentialSettings,
}

/// How tenant-cluster credentials are issued and fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCredentialSettings {
    /// The credential issuer (none: no credentials, and kubeconfig downloads answer 409).
    pub issuer: Option<cluster::ClusterIssuer>,
    /// The API's base URL as clients reach it (`…/api/v1`): the exec plugin's `--url`.
    pub api_url: String,
    /// The program downloaded kubeconfigs run as their exec credential plugin.
    pub exec_command: String,
}

impl Default for ClusterCredentialSettings {
    fn default() -> Self {
        Self {
            issuer: None,
            api_url: "http://127.0.0.1:8080/api/v1".into(),
            exec_command: "tenantplane".into(),
        }
    }
}

/// Signs claims with an Ed25519 PKCS#8 key under `kid`.
pub fn sign(claims: &Claims, kid: &str, pkcs8: &[u8]) -> Result<String, jsonwebtoken::errors::Error> {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.to_string());
    header.typ = Some("JWT".into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_der(pkcs8))
}

/// The `kid` of a token, after the size and algorithm checks (only EdDSA is accepted).
pub fn token_kid(token: &str) -> Result<String, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLarge);
    }
    let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
    if header.alg != Algorithm::EdDSA {
        return Err(TokenError::Malformed);
    }
    header.kid.ok_or(TokenError::Malformed)
}

/// Verifies the signature (with the raw 32-byte Ed25519 public key) and the standard claims.
pub fn verify(token: &str, public_key: &[u8], settings: &TokenSettings) -> Result<Claims, TokenError> {
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.leeway = LEEWAY_SECONDS;
    validation.validate_nbf = true;
    validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
    validation.set_issuer(&[&settings.issuer]);
    validation.set_audience(&[&settings.audience]);
    let data = jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_ed_der(public_key), &validation)
        .map_err(|e| invalid(&e))?;
    Ok(data.claims)
}

/// The 401 reason for a failed signature or claim check.
pub(crate) fn invalid(e: &jsonwebtoken::errors::Error) -> TokenError {
    use jsonwebtoken::errors::ErrorKind as K;
    TokenError::Invalid(match e.kind() {
        K::ExpiredSignature => "expired",
        K::ImmatureSignature => "not valid yet",
        K::InvalidIssuer => "wrong issuer",
        K::InvalidAudience => "wrong audience",
        K::InvalidSignature => "bad signature",
        K::MissingRequiredClaim(_) => "a required claim is missing",
        _ => "malformed",
    })
}

/// The unverified `iss` of a token, only to route it to the issuer that must verify it.
pub fn peek_issuer(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Iss {
        iss: Option<String>,
    }
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    jsonwebtoken::dangerous::insecure_decode_claims::<Iss>(token)
        .ok()
        .and_then(|c| c.iss)
}

/// Base64url without padding (JWK `x`).
pub fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

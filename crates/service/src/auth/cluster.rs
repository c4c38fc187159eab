//! Cluster credentials: the ES256 keys (sealed at rest) that sign the short-lived JWTs tenant
//! kube-apiservers accept, the issuer's discovery document and JWKS, and minting.
//!
//! kube-apiserver's JWT authenticator verifies RS*, ES* and PS* only, so these keys are P-256 and kept
//! apart from the EdDSA keys of API tokens. One key is active; a new one is made on first use.

use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::keys::{KeyError, ServerKey};
use crate::domain::Role;

pub use crate::translate::{ClusterIssuer, audience, group_of};

/// Shortest credential lifetime, in seconds.
pub const MIN_TTL_SECONDS: i64 = 60;
/// Longest credential lifetime, in seconds.
pub const MAX_TTL_SECONDS: i64 = 3600;
/// Lifetime when the caller names none, in seconds.
pub const DEFAULT_TTL_SECONDS: i64 = 900;
/// Path of the issuer's JWKS (relative to its URL).
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// The claims of a cluster credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialClaims {
    /// The credential issuer's URL.
    pub iss: String,
    /// `tenantplane:cp:<control plane id>`.
    pub aud: String,
    /// The caller's subject.
    pub sub: String,
    /// This credential's own id.
    pub jti: Uuid,
    /// The control plane's tenant.
    pub tid: Uuid,
    /// The caller's role.
    pub role: Role,
    /// The id of the Tenantplane token it was exchanged for.
    pub tok: Uuid,
    /// Issued at (seconds).
    pub iat: i64,
    /// Not before (seconds).
    pub nbf: i64,
    /// Expiry (seconds).
    pub exp: i64,
}

/// One P-256 public key of the issuer's JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EcJwk {
    /// `EC`.
    pub kty: &'static str,
    /// `P-256`.
    pub crv: &'static str,
    /// x coordinate, base64url.
    pub x: String,
    /// y coordinate, base64url.
    pub y: String,
    /// Key id.
    pub kid: String,
    /// `ES256`.
    pub alg: &'static str,
    /// `sig`.
    #[serde(rename = "use")]
    pub use_: &'static str,
}

fn aad(kid: &str) -> Vec<u8> {
    format!("tenantplane-credential-key:{kid}").into_bytes()
}

/// The active credential key (kid, PKCS#8 DER), creating one on first use.
pub async fn active_key(db: &sqlx::PgPool, server: &ServerKey) -> Result<(String, Vec<u8>), KeyError> {
    if let Some(key) = read_active(db, server).await? {
        return Ok(key);
    }
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
        .map_err(|_| KeyError::Crypto("generate"))?;
    let pair = EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        pkcs8.as_ref(),
        &SystemRandom::new(),
    )
    .map_err(|_| KeyError::Crypto("parse"))?;
    let kid = format!("credential-{}", Uuid::new_v4().simple());
    let (ciphertext, nonce) = server.seal(pkcs8.as_ref(), &aad(&kid))?;
    // The partial unique index keeps one active key: a racing first use inserts nothing.
    sqlx::query!(
        "insert into credential_keys (kid, public_key, private_key_ciphertext, private_key_nonce)
         values ($1, $2, $3, $4) on conflict do nothing",
        kid,
        pair.public_key().as_ref(),
        ciphertext,
        nonce
    )
    .execute(db)
    .await?;
    read_active(db, server).await?.ok_or(KeyError::NoKey)
}

async fn read_active(db: &sqlx::PgPool, server: &ServerKey) -> Result<Option<(String, Vec<u8>)>, KeyError> {
    let row = sqlx::query!(
        "select kid, private_key_ciphertext, private_key_nonce from credential_keys where retired_at is null"
    )
    .fetch_optional(db)
    .await?;
    row.map(|r| {
        let pkcs8 = server.open(&r.private_key_ciphertext, &r.private_key_nonce, &aad(&r.kid))?;
        Ok((r.kid, pkcs8))
    })
    .transpose()
}

/// Every credential key still published, as JWKs (oldest first).
pub async fn jwks(db: impl sqlx::PgExecutor<'_>) -> Result<Vec<EcJwk>, KeyError> {
    let rows = sqlx::query!(
        "select kid, public_key from credential_keys
         where retired_at is null or retired_at > now() - make_interval(secs => $1)
         order by created_at, kid",
        MAX_TTL_SECONDS as f64
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| ec_jwk(r.kid, &r.public_key))
        .collect())
}

/// The JWK of an uncompressed P-256 point (`0x04 || x || y`).
fn ec_jwk(kid: String, point: &[u8]) -> Option<EcJwk> {
    if point.len() != 65 || point[0] != 4 {
        return None;
    }
    Some(EcJwk {
        kty: "EC",
        crv: "P-256",
        x: super::b64url(&point[1..33]),
        y: super::b64url(&point[33..]),
        kid,
        alg: "ES256",
        use_: "sig",
    })
}

/// The issuer's OpenID discovery document.
pub fn discovery(issuer_url: &str) -> serde_json::Value {
    serde_json::json!({
        "issuer": issuer_url,
        "jwks_uri": format!("{}{JWKS_PATH}", issuer_url.trim_end_matches('/')),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}

/// A minted credential.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The JWT.
    pub token: String,
    /// Its claims.
    pub claims: CredentialClaims,
}

/// Signs a credential for `claims`' control plane with the active key.
pub async fn mint(
    db: &sqlx::PgPool,
    server: &ServerKey,
    claims: CredentialClaims,
) -> Result<Minted, KeyError> {
    let (kid, pkcs8) = active_key(db, server).await?;
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid);
    header.typ = Some("JWT".into());
    let token = jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&pkcs8))
        .map_err(|_| KeyError::Crypto("sign"))?;
    Ok(Minted { token, claims })
}

/// The claims of a credential for `control_plane` of `tenant`, valid `ttl` seconds from `now`.
pub fn claims(
    issuer: &ClusterIssuer,
    tenant: Uuid,
    control_plane: Uuid,
    who: &super::Principal,
    ttl: i64,
    now: DateTime<Utc>,
) -> CredentialClaims {
    let iat = now.timestamp();
    CredentialClaims {
        iss: issuer.url.clone(),
        aud: audience(control_plane),
        sub: who.subject.clone(),
        jti: Uuid::new_v4(),
        tid: tenant,
        role: who.role,
        tok: who.jti,
        iat,
        nbf: iat,
        exp: iat + ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p256_point_becomes_its_jwk_and_anything_else_none() {
        let mut point = vec![4u8];
        point.extend([1u8; 32]);
        point.extend([2u8; 32]);
        let jwk = ec_jwk("k".into(), &point).unwrap();
        assert_eq!((jwk.kty, jwk.crv, jwk.alg), ("EC", "P-256", "ES256"));
        assert_eq!(jwk.x, super::super::b64url(&[1u8; 32]));
        assert_eq!(jwk.y, super::super::b64url(&[2u8; 32]));
        assert_eq!(ec_jwk("k".into(), &point[1..]), None);
    }

    #[test]
    fn discovery_names_the_issuer_exactly_and_its_jwks() {
        let d = discovery("https://127.0.0.1:8443");
        assert_eq!(d["issuer"], "https://127.0.0.1:8443");
        assert_eq!(d["jwks_uri"], "https://127.0.0.1:8443/openid/v1/jwks");
    }
}

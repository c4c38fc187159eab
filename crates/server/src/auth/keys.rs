//! Signing keys: generation, sealing with the server key, rotation and the JWKS.

use base64::Engine as _;
use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use chrono::{DateTime, Utc};
use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
    signature::{Ed25519KeyPair, KeyPair},
};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::MAX_TOKEN_TTL_SECONDS;

/// Errors of key handling. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The database failed.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    /// Key generation or sealing failed.
    #[error("key operation failed: {0}")]
    Crypto(&'static str),
    /// No usable signing key.
    #[error("no signing key")]
    NoKey,
}

/// The server key that seals private keys at rest (AES-256-GCM).
pub struct ServerKey(LessSafeKey);

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey(<redacted>)")
    }
}

impl ServerKey {
    /// Parses a base64 (standard) 32-byte key.
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| "TENANTPLANE_ENCRYPTION_KEY is not valid base64".to_string())?;
        Self::from_bytes(&bytes)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let key = UnboundKey::new(&AES_256_GCM, bytes)
            .map_err(|_| "TENANTPLANE_ENCRYPTION_KEY must decode to exactly 32 bytes".to_string())?;
        Ok(Self(LessSafeKey::new(key)))
    }

    /// A fresh random key, base64-encoded (for `tenantplane` dev runs and docs).
    pub fn generate_base64() -> Result<String, KeyError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| KeyError::Crypto("random"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(crate) fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<(Vec<u8>, Vec<u8>), KeyError> {
        let mut nonce = [0u8; 12];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KeyError::Crypto("random"))?;
        let mut buffer = plaintext.to_vec();
        self.0
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut buffer)
            .map_err(|_| KeyError::Crypto("seal"))?;
        Ok((buffer, nonce.to_vec()))
    }

    pub(crate) fn open(&self, ciphertext: &[u8], nonce: &[u8], aad: &[u8]) -> Result<Vec<u8>, KeyError> {
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| KeyError::Crypto("nonce"))?;
        let mut buffer = ciphertext.to_vec();
        let plain = self
            .0
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut buffer)
            .map_err(|_| {
                KeyError::Crypto(
                    "the server key cannot open a signing key (wrong TENANTPLANE_ENCRYPTION_KEY?)",
                )
            })?;
        Ok(plain.to_vec())
    }
}

/// A decrypted signing key, ready to sign.
pub struct SigningKey {
    /// Key id.
    pub kid: String,
    /// PKCS#8 DER of the Ed25519 private key.
    pub pkcs8: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("pkcs8", &"<redacted>")
            .finish()
    }
}

/// A public key for verification.
#[derive(Debug, Clone)]
pub struct VerifyingKey {
    /// Key id.
    pub kid: String,
    /// Owning tenant (None = platform key).
    pub tenant_id: Option<Uuid>,
    /// Raw 32-byte Ed25519 public key.
    pub public_key: Vec<u8>,
}

/// One JWK of the public JWKS.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Jwk {
    /// Key type `OKP`.
    pub kty: &'static str,
    /// Curve `Ed25519`.
    pub crv: &'static str,
    /// Public key, base64url.
    pub x: String,
    /// Key id.
    pub kid: String,
    /// Algorithm `EdDSA`.
    pub alg: &'static str,
    /// Use `sig`.
    #[serde(rename = "use")]
    pub use_: &'static str,
}

fn aad(kid: &str) -> Vec<u8> {
    format!("tenantplane-signing-key:{kid}").into_bytes()
}

/// Creates a new signing key for `tenant` (None = platform) and retires the previous one, which keeps
/// verifying until the longest token it could have signed has expired.
pub async fn rotate(
    tx: &mut PgConnection,
    server: &ServerKey,
    tenant: Option<Uuid>,
) -> Result<String, KeyError> {
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyError::Crypto("generate"))?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| KeyError::Crypto("parse"))?;
    let kid = format!(
        "{}-{}",
        tenant
            .map(|t| t.simple().to_string()[..8].to_string())
            .unwrap_or_else(|| "platform".into()),
        Uuid::new_v4().simple()
    );
    let (ciphertext, nonce) = server.seal(pkcs8.as_ref(), &aad(&kid))?;
    let verify_until = Utc::now() + chrono::Duration::seconds(MAX_TOKEN_TTL_SECONDS);
    sqlx::query!(
        "update signing_keys set retired_at = now(), verify_until = $2
         where tenant_id is not distinct from $1 and retired_at is null",
        tenant,
        verify_until
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into signing_keys (kid, tenant_id, algorithm, public_key, private_key_ciphertext, private_key_nonce)
         values ($1, $2, 'EdDSA', $3, $4, $5)",
        kid,
        tenant,
        pair.public_key().as_ref(),
        ciphertext,
        nonce
    )
    .execute(&mut *tx)
    .await?;
    Ok(kid)
}

/// The active signing key of `tenant` (None = platform), creating one on first use.
pub async fn active(
    db: &sqlx::PgPool,
    server: &ServerKey,
    tenant: Option<Uuid>,
) -> Result<SigningKey, KeyError> {
    for _ in 0..2 {
        let row = sqlx::query!(
            "select kid, private_key_ciphertext, private_key_nonce from signing_keys
             where tenant_id is not distinct from $1 and retired_at is null
             order by created_at desc limit 1",
            tenant
        )
        .fetch_optional(db)
        .await?;
        if let Some(row) = row {
            let pkcs8 = server.open(
                &row.private_key_ciphertext,
                &row.private_key_nonce,
                &aad(&row.kid),
            )?;
            return Ok(SigningKey { kid: row.kid, pkcs8 });
        }
        // Serialize first-key creation per tenant with an advisory lock.
        let mut tx = db.begin().await?;
        let lock_key = tenant.map(|t| t.as_u64_pair().0 as i64).unwrap_or(0);
        sqlx::query!("select pg_advisory_xact_lock($1)", lock_key)
            .execute(&mut *tx)
            .await?;
        let exists = sqlx::query_scalar!(
            "select count(*) from signing_keys where tenant_id is not distinct from $1 and retired_at is null",
            tenant
        )
        .fetch_one(&mut *tx)
        .await?
        .unwrap_or(0);
        if exists == 0 {
            rotate(&mut tx, server, tenant).await?;
        }
        tx.commit().await?;
    }
    Err(KeyError::NoKey)
}

/// The verifying key with `kid`, if it is still valid for verification.
pub async fn verifying(db: impl PgExecutor<'_>, kid: &str) -> Result<Option<VerifyingKey>, KeyError> {
    Ok(verifying_until(db, kid).await?.map(|(key, _)| key))
}

/// The same, with the end of the key's verification window (`None`: the active key).
async fn verifying_until(
    db: impl PgExecutor<'_>,
    kid: &str,
) -> Result<Option<(VerifyingKey, Option<DateTime<Utc>>)>, KeyError> {
    let row = sqlx::query!(
        "select kid, tenant_id, public_key, verify_until from signing_keys
         where kid = $1 and (verify_until is null or verify_until > now())",
        kid
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| {
        (
            VerifyingKey {
                kid: r.kid,
                tenant_id: r.tenant_id,
                public_key: r.public_key,
            },
            r.verify_until,
        )
    }))
}

/// Most keys kept by a [`VerifyingKeyCache`]; it starts over when full.
const KEY_CACHE_CAPACITY: usize = 10_000;
/// How long a cached active key is trusted before it is read again (a rotation shortens its window).
const KEY_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// Verifying keys already read, by kid, so a request costs one query (the revocation check) instead
/// of two. A public key never changes; only its verification window can, and an entry is re-read
/// after [`KEY_CACHE_TTL`] and never used past its `verify_until`.
#[derive(Debug, Clone, Default)]
pub struct VerifyingKeyCache(Arc<RwLock<HashMap<String, CachedKey>>>);

/// One cached key.
#[derive(Debug, Clone)]
struct CachedKey {
    key: VerifyingKey,
    verify_until: Option<DateTime<Utc>>,
    read_at: std::time::Instant,
}

impl VerifyingKeyCache {
    /// The verifying key with `kid`, from the cache or the database.
    pub async fn get(&self, db: impl PgExecutor<'_>, kid: &str) -> Result<Option<VerifyingKey>, KeyError> {
        let hit = self.0.read().ok().and_then(|map| map.get(kid).cloned());
        if let Some(entry) = hit
            && entry.read_at.elapsed() < KEY_CACHE_TTL
            && entry.verify_until.is_none_or(|until| until > Utc::now())
        {
            return Ok(Some(entry.key));
        }
        let found = verifying_until(db, kid).await?;
        if let (Some((key, verify_until)), Ok(mut map)) = (&found, self.0.write()) {
            if map.len() >= KEY_CACHE_CAPACITY {
                map.clear();
            }
            map.insert(
                kid.to_string(),
                CachedKey {
                    key: key.clone(),
                    verify_until: *verify_until,
                    read_at: std::time::Instant::now(),
                },
            );
        }
        Ok(found.map(|(key, _)| key))
    }
}

/// Every public key still valid for verification, as JWKs.
pub async fn jwks(db: impl PgExecutor<'_>) -> Result<Vec<Jwk>, KeyError> {
    let rows = sqlx::query!(
        "select kid, public_key from signing_keys where verify_until is null or verify_until > now() order by created_at, kid"
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Jwk {
            kty: "OKP",
            crv: "Ed25519",
            x: super::b64url(&r.public_key),
            kid: r.kid,
            alg: "EdDSA",
            use_: "sig",
        })
        .collect())
}

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
    /// Created by this call (the tenant's first key): its verifying-key cache must forget unknown kids.
    pub created: bool,
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
    let mut created = false;
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
            return Ok(SigningKey {
                kid: row.kid,
                pkcs8,
                created,
            });
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
            created = true;
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
/// Most unknown kids remembered; the memory starts over when full.
pub const UNKNOWN_KID_CAPACITY: usize = 10_000;
/// How long a kid found in no key is answered "unknown" without asking the database again.
pub const UNKNOWN_KID_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Verifying keys already read, by kid, so a request costs one query (the revocation check) instead
/// of two. A public key never changes; only its verification window can, and an entry is re-read
/// after [`KEY_CACHE_TTL`] and never used past its `verify_until`.
///
/// Kids found in no key are remembered too (a keyed hash of each, at most [`UNKNOWN_KID_CAPACITY`], for
/// [`UNKNOWN_KID_TTL`]), so a token with a made-up kid, sent again and again, costs one query per TTL. A
/// key created through the service forgets them all at once ([`VerifyingKeyCache::key_created`]); a key
/// another replica creates is found within the TTL (its kid is random, so no token names it earlier).
#[derive(Debug, Clone, Default)]
pub struct VerifyingKeyCache {
    known: Arc<RwLock<HashMap<String, CachedKey>>>,
    unknown: Arc<RwLock<UnknownKids>>,
}

/// One cached key.
#[derive(Debug, Clone)]
struct CachedKey {
    key: VerifyingKey,
    verify_until: Option<DateTime<Utc>>,
    read_at: std::time::Instant,
}

/// Kids found in no key: when each was looked up, by keyed hash; and how many keys were created since
/// the start, so a lookup that raced a creation does not record its stale answer.
#[derive(Debug, Default)]
struct UnknownKids {
    seen: HashMap<u64, std::time::Instant>,
    hasher: std::hash::RandomState,
    created: u64,
}

impl UnknownKids {
    /// Whether `kid` was found in no key less than [`UNKNOWN_KID_TTL`] ago.
    fn holds(&self, kid: &str, now: std::time::Instant) -> bool {
        use std::hash::BuildHasher as _;
        self.seen
            .get(&self.hasher.hash_one(kid))
            .is_some_and(|at| now.saturating_duration_since(*at) < UNKNOWN_KID_TTL)
    }

    /// Remembers `kid` as unknown at `now`, unless a key was created since `created` was read.
    fn remember(&mut self, kid: &str, created: u64, now: std::time::Instant) {
        use std::hash::BuildHasher as _;
        if created != self.created {
            return;
        }
        if self.seen.len() >= UNKNOWN_KID_CAPACITY {
            self.seen.clear();
        }
        let hash = self.hasher.hash_one(kid);
        self.seen.insert(hash, now);
    }
}

impl VerifyingKeyCache {
    /// The verifying key with `kid`, from the cache or the database.
    pub async fn get(&self, db: impl PgExecutor<'_>, kid: &str) -> Result<Option<VerifyingKey>, KeyError> {
        let hit = self.known.read().ok().and_then(|map| map.get(kid).cloned());
        if let Some(entry) = hit
            && entry.read_at.elapsed() < KEY_CACHE_TTL
            && entry.verify_until.is_none_or(|until| until > Utc::now())
        {
            return Ok(Some(entry.key));
        }
        let created = match self.unknown.read() {
            Ok(unknown) if unknown.holds(kid, std::time::Instant::now()) => return Ok(None),
            Ok(unknown) => unknown.created,
            Err(_) => 0,
        };
        let found = verifying_until(db, kid).await?;
        match &found {
            Some((key, verify_until)) => self.remember(key, *verify_until),
            None => {
                if let Ok(mut unknown) = self.unknown.write() {
                    unknown.remember(kid, created, std::time::Instant::now());
                }
            }
        }
        Ok(found.map(|(key, _)| key))
    }

    /// Caches `key` and its verification window.
    fn remember(&self, key: &VerifyingKey, verify_until: Option<DateTime<Utc>>) {
        let Ok(mut map) = self.known.write() else {
            return;
        };
        if map.len() >= KEY_CACHE_CAPACITY {
            map.clear();
        }
        map.insert(
            key.kid.clone(),
            CachedKey {
                key: key.clone(),
                verify_until,
                read_at: std::time::Instant::now(),
            },
        );
    }

    /// A signing key was created (and committed): forgets every unknown kid, so the new key verifies at once.
    pub fn key_created(&self) {
        if let Ok(mut unknown) = self.unknown.write() {
            unknown.seen.clear();
            unknown.created += 1;
        }
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{UNKNOWN_KID_CAPACITY, UNKNOWN_KID_TTL, UnknownKids};

    #[test]
    fn an_unknown_kid_is_remembered_for_its_ttl_only() {
        let mut unknown = UnknownKids::default();
        let start = Instant::now();
        unknown.remember("ghost", 0, start);
        assert!(unknown.holds("ghost", start));
        assert!(unknown.holds("ghost", start + UNKNOWN_KID_TTL - Duration::from_millis(1)));
        assert!(!unknown.holds("ghost", start + UNKNOWN_KID_TTL));
        assert!(!unknown.holds("other", start));
    }

    #[test]
    fn a_lookup_that_raced_a_key_creation_is_not_remembered() {
        let mut unknown = UnknownKids::default();
        let now = Instant::now();
        // The lookup read `created` 0; a key was created before it answered.
        unknown.created = 1;
        unknown.remember("fresh", 0, now);
        assert!(!unknown.holds("fresh", now));
        unknown.remember("fresh", 1, now);
        assert!(unknown.holds("fresh", now));
    }

    #[test]
    fn the_memory_starts_over_when_full() {
        let mut unknown = UnknownKids::default();
        let now = Instant::now();
        for i in 0..UNKNOWN_KID_CAPACITY {
            unknown.remember(&format!("kid-{i}"), 0, now);
        }
        assert_eq!(unknown.seen.len(), UNKNOWN_KID_CAPACITY);
        unknown.remember("one-more", 0, now);
        assert_eq!(unknown.seen.len(), 1);
        assert!(unknown.holds("one-more", now));
    }
}

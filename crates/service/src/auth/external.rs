//! External OIDC issuers: their configuration, a JWKS cache refreshed on an unknown `kid`, RFC 8725
//! verification with a per-issuer algorithm allow-list, and the mapping of claims to tenant and role.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation,
    jwk::{AlgorithmParameters, EllipticCurve, JwkSet, PublicKeyUse},
};
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use super::{LEEWAY_SECONDS, MAX_TOKEN_BYTES, TokenError};
use crate::domain::Role;

/// Algorithms an external issuer may use when its configuration names none.
const DEFAULT_ALGORITHMS: &[Algorithm] = &[Algorithm::RS256, Algorithm::ES256];
/// Default least time between two JWKS fetches of one issuer (bounds fetches caused by random `kid`s).
const DEFAULT_MIN_REFRESH_SECONDS: u64 = 10;
/// Default time after which cached keys are fetched again even without an unknown `kid`.
const DEFAULT_MAX_AGE_SECONDS: u64 = 3600;
/// Timeout of one JWKS or discovery fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// One external issuer, as written in the issuers file (YAML or JSON, camelCase keys).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerConfig {
    /// The exact `iss` of its tokens.
    pub issuer: String,
    /// Where its keys are; default: `jwks_uri` of `<issuer>/.well-known/openid-configuration`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The `aud` its tokens must carry.
    pub audience: String,
    /// Accepted signature algorithms (asymmetric only); default `RS256`, `ES256`.
    #[serde(default)]
    pub algorithms: Vec<Algorithm>,
    /// Claim holding the tenant slug (a dotted path reaches into objects, e.g. `org.tenant`).
    pub tenant_claim: String,
    /// Claim holding the role: a string or a list of strings (e.g. `groups`).
    pub role_claim: String,
    /// Claim value → role; when empty, values must be role names (`tenant-viewer`…).
    #[serde(default)]
    pub role_map: BTreeMap<String, Role>,
    /// Whether a value may map to `platform-admin` (off unless set: an IdP group becomes root).
    #[serde(default)]
    pub allow_platform_admin: bool,
    /// Least seconds between two JWKS fetches (default 10).
    #[serde(default)]
    pub min_refresh_seconds: Option<u64>,
    /// Seconds after which cached keys are fetched again (default 3600).
    #[serde(default)]
    pub max_age_seconds: Option<u64>,
    /// Tenant slugs this issuer may name; a token naming any other tenant is refused. Empty: any tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Allow `http://` issuer, discovery and JWKS URLs (tests and local IdPs only; off: https only).
    #[serde(default)]
    pub allow_insecure_http: bool,
}

impl IssuerConfig {
    /// The accepted algorithms, with the default applied.
    pub fn algorithms(&self) -> Vec<Algorithm> {
        if self.algorithms.is_empty() {
            DEFAULT_ALGORITHMS.to_vec()
        } else {
            self.algorithms.clone()
        }
    }

    /// Checks what can be checked without the network; `own_issuer` may not be reused.
    pub fn validate(&self, own_issuer: &str) -> Result<(), String> {
        let at = |what: &str| format!("external issuer {:?}: {what}", self.issuer);
        if self.issuer.is_empty() {
            return Err("external issuer: `issuer` must not be empty".into());
        }
        if self.issuer == own_issuer {
            return Err(at("`issuer` equals Tenantplane's own issuer"));
        }
        if self.audience.is_empty() || self.tenant_claim.is_empty() || self.role_claim.is_empty() {
            return Err(at("`audience`, `tenantClaim` and `roleClaim` must not be empty"));
        }
        for alg in self.algorithms() {
            if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
                return Err(at(
                    "HMAC algorithms (HS*) are refused: an external issuer signs with a private key",
                ));
            }
        }
        let maps_to_root = self.role_map.values().any(|r| *r == Role::PlatformAdmin)
            || (self.role_map.is_empty() && self.allow_platform_admin);
        if maps_to_root && !self.allow_platform_admin {
            return Err(at(
                "`roleMap` maps to platform-admin; set `allowPlatformAdmin: true` to allow it",
            ));
        }
        for url in [Some(&self.issuer), self.jwks_url.as_ref()].into_iter().flatten() {
            self.check_url(url).map_err(|e| at(&e))?;
        }
        if self.allow_platform_admin && !self.tenants.is_empty() {
            return Err(at(
                "`allowPlatformAdmin` and `tenants` exclude each other: a platform admin is bound to no tenant",
            ));
        }
        Ok(())
    }

    /// A URL keys may be fetched from: `https://`, or `http://` with `allowInsecureHttp`.
    pub fn check_url(&self, url: &str) -> Result<(), String> {
        if url.starts_with("https://") || (self.allow_insecure_http && url.starts_with("http://")) {
            Ok(())
        } else if url.starts_with("http://") {
            Err(format!(
                "{url:?} is not https (set `allowInsecureHttp: true` only for a local test IdP)"
            ))
        } else {
            Err(format!("{url:?} is not an https URL"))
        }
    }

    /// Whether this issuer may name `tenant`.
    pub fn may_name(&self, tenant: &str) -> bool {
        self.tenants.is_empty() || self.tenants.iter().any(|t| t == tenant)
    }

    /// The role the claims map to, if any: the highest of every mapped value.
    pub fn role_of(&self, claims: &serde_json::Value) -> Option<Role> {
        let values: Vec<&str> = match claim(claims, &self.role_claim)? {
            serde_json::Value::String(s) => vec![s.as_str()],
            serde_json::Value::Array(items) => items.iter().filter_map(|v| v.as_str()).collect(),
            _ => return None,
        };
        values
            .into_iter()
            .filter_map(|v| {
                if self.role_map.is_empty() {
                    v.parse::<Role>().ok()
                } else {
                    self.role_map.get(v).copied()
                }
            })
            .filter(|r| *r != Role::PlatformAdmin || self.allow_platform_admin)
            .max_by_key(|r| r.rank())
    }

    /// The tenant slug the claims name, if any.
    pub fn tenant_of<'a>(&self, claims: &'a serde_json::Value) -> Option<&'a str> {
        claim(claims, &self.tenant_claim)?
            .as_str()
            .filter(|s| !s.is_empty())
    }
}

/// A claim by dotted path.
fn claim<'a>(claims: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    path.split('.').try_fold(claims, |v, part| v.get(part))
}

/// Reads the issuers file (YAML or JSON: a list of issuers) and validates every entry.
pub fn load(path: &Path, own_issuer: &str) -> Result<Vec<IssuerConfig>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("read external issuers file {}: {e}", path.display()))?;
    let configs: Vec<IssuerConfig> =
        serde_yaml::from_str(&text).map_err(|e| format!("external issuers file {}: {e}", path.display()))?;
    let mut seen = std::collections::HashSet::new();
    for config in &configs {
        config.validate(own_issuer)?;
        if !seen.insert(config.issuer.as_str()) {
            return Err(format!("external issuer {:?} is listed twice", config.issuer));
        }
    }
    Ok(configs)
}

/// A verified external token: its claims and what they map to.
#[derive(Debug, Clone)]
pub struct ExternalIdentity {
    /// Issuer.
    pub issuer: String,
    /// Subject (`sub`).
    pub subject: String,
    /// `jti`, when the token has one.
    pub jti: Option<String>,
    /// Tenant slug, unless the role is platform-admin.
    pub tenant: Option<String>,
    /// Mapped role.
    pub role: Role,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
}

/// A public key from a JWKS, with the algorithm family it may verify.
#[derive(Clone)]
struct CachedKey {
    key: DecodingKey,
    kind: KeyKind,
}

/// Kind of a JWK, to refuse a key of one type used with an algorithm of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    EcP256,
    EcP384,
    Ed25519,
}

impl KeyKind {
    fn verifies(self, alg: Algorithm) -> bool {
        use Algorithm as A;
        match self {
            KeyKind::Rsa => matches!(
                alg,
                A::RS256 | A::RS384 | A::RS512 | A::PS256 | A::PS384 | A::PS512
            ),
            KeyKind::EcP256 => alg == A::ES256,
            KeyKind::EcP384 => alg == A::ES384,
            KeyKind::Ed25519 => alg == A::EdDSA,
        }
    }
}

/// The keys of one issuer and when they were fetched.
#[derive(Default)]
struct KeyCache {
    keys: HashMap<String, CachedKey>,
    fetched_at: Option<Instant>,
}

/// One configured issuer with its key cache.
struct Issuer {
    config: IssuerConfig,
    algorithms: Vec<Algorithm>,
    cache: RwLock<KeyCache>,
    /// Serializes fetches so a burst of unknown `kid`s costs one request.
    fetch: Mutex<()>,
}

/// Every configured external issuer; empty by default.
#[derive(Clone, Default)]
pub struct ExternalIssuers {
    issuers: Arc<Vec<Issuer>>,
    http: Option<reqwest::Client>,
}

impl std::fmt::Debug for ExternalIssuers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.issuers.iter().map(|i| &i.config.issuer))
            .finish()
    }
}

impl ExternalIssuers {
    /// Issuers from validated configurations.
    pub fn new(configs: Vec<IssuerConfig>) -> Result<Self, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client for external issuers: {e}"))?;
        let issuers = configs
            .into_iter()
            .map(|config| Issuer {
                algorithms: config.algorithms(),
                config,
                cache: RwLock::new(KeyCache::default()),
                fetch: Mutex::new(()),
            })
            .collect();
        Ok(Self {
            issuers: Arc::new(issuers),
            http: Some(http),
        })
    }

    /// Whether `iss` is one of the configured issuers.
    pub fn knows(&self, iss: &str) -> bool {
        self.issuers.iter().any(|i| i.config.issuer == iss)
    }

    /// Verifies a token of the issuer `iss` and maps its claims (401 reasons as [`TokenError`]).
    pub async fn verify(&self, iss: &str, token: &str) -> Result<ExternalIdentity, TokenError> {
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.config.issuer == iss)
            .ok_or(TokenError::Invalid("wrong issuer"))?;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLarge);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        if !issuer.algorithms.contains(&header.alg) {
            return Err(TokenError::Malformed);
        }
        let kid = header.kid.ok_or(TokenError::Malformed)?;
        let key = self.key(issuer, &kid).await?;
        if !key.kind.verifies(header.alg) {
            return Err(TokenError::Malformed);
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_audience(&[&issuer.config.audience]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key.key, &validation)
            .map_err(|e| super::invalid(&e))?
            .claims;
        let role = issuer
            .config
            .role_of(&claims)
            .ok_or(TokenError::Invalid("the token's role claim maps to no role"))?;
        let tenant = if role == Role::PlatformAdmin {
            None
        } else {
            Some(
                issuer
                    .config
                    .tenant_of(&claims)
                    .ok_or(TokenError::Invalid("the token has no tenant claim"))?
                    .to_string(),
            )
        };
        if let Some(tenant) = &tenant
            && !issuer.config.may_name(tenant)
        {
            return Err(TokenError::Invalid("the token's issuer may not name its tenant"));
        }
        let exp = claims.get("exp").and_then(serde_json::Value::as_i64).unwrap_or(0);
        Ok(ExternalIdentity {
            issuer: issuer.config.issuer.clone(),
            subject: claims
                .get("sub")
                .and_then(|s| s.as_str())
                .unwrap_or_default()
                .to_string(),
            jti: claims.get("jti").and_then(|s| s.as_str()).map(str::to_string),
            tenant,
            role,
            expires_at: DateTime::from_timestamp(exp, 0).unwrap_or_default(),
        })
    }

    /// The key `kid` of `issuer`, fetching the JWKS when it is unknown (at most once per
    /// `minRefreshSeconds`) or older than `maxAgeSeconds`.
    async fn key(&self, issuer: &Issuer, kid: &str) -> Result<CachedKey, TokenError> {
        let min_refresh = Duration::from_secs(
            issuer
                .config
                .min_refresh_seconds
                .unwrap_or(DEFAULT_MIN_REFRESH_SECONDS),
        );
        let max_age = Duration::from_secs(issuer.config.max_age_seconds.unwrap_or(DEFAULT_MAX_AGE_SECONDS));
        let lookup = |cache: &KeyCache| {
            let fresh = cache.fetched_at.is_some_and(|t| t.elapsed() < max_age);
            let recent = cache.fetched_at.is_some_and(|t| t.elapsed() < min_refresh);
            (cache.keys.get(kid).filter(|_| fresh).cloned(), recent)
        };
        if let (Some(key), _) = lookup(&*issuer.cache.read().await) {
            return Ok(key);
        }
        let _fetching = issuer.fetch.lock().await;
        // Another request may have fetched while this one waited.
        let (key, recent) = lookup(&*issuer.cache.read().await);
        if let Some(key) = key {
            return Ok(key);
        }
        if recent {
            return Err(TokenError::UnknownKey);
        }
        let fetched = self.fetch_keys(&issuer.config).await;
        let mut cache = issuer.cache.write().await;
        cache.fetched_at = Some(Instant::now());
        match fetched {
            Ok(keys) => cache.keys = keys,
            Err(err) => {
                tracing::warn!(issuer = %issuer.config.issuer, error = %err, "fetching the JWKS failed");
                if !cache.keys.contains_key(kid) {
                    return Err(TokenError::Unavailable);
                }
            }
        }
        cache.keys.get(kid).cloned().ok_or(TokenError::UnknownKey)
    }

    /// Fetches the JWKS (through discovery when no URL is configured) and keeps the usable keys.
    async fn fetch_keys(&self, config: &IssuerConfig) -> Result<HashMap<String, CachedKey>, String> {
        let http = self.http.as_ref().ok_or("no HTTP client")?;
        let url = match &config.jwks_url {
            Some(url) => url.clone(),
            None => {
                let discovery = format!(
                    "{}/.well-known/openid-configuration",
                    config.issuer.trim_end_matches('/')
                );
                let doc: serde_json::Value = get_json(http, &discovery).await?;
                doc.get("jwks_uri")
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| format!("{discovery} has no jwks_uri"))?
                    .to_string()
            }
        };
        config.check_url(&url)?;
        let set: JwkSet = get_json(http, &url).await?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
                continue;
            }
            let kind = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => KeyKind::Rsa,
                AlgorithmParameters::EllipticCurve(p) => match p.curve {
                    EllipticCurve::P256 => KeyKind::EcP256,
                    EllipticCurve::P384 => KeyKind::EcP384,
                    _ => continue,
                },
                AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => KeyKind::Ed25519,
                // Symmetric (`oct`) and unknown keys are never used.
                _ => continue,
            };
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.insert(kid, CachedKey { key, kind });
            }
        }
        Ok(keys)
    }
}

/// The largest discovery document or JWKS read, in bytes.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// GETs a JSON document of at most [`MAX_JWKS_BYTES`]; redirects are refused (the client follows none,
/// and a 3xx is not a success).
async fn get_json<T: serde::de::DeserializeOwned>(http: &reqwest::Client, url: &str) -> Result<T, String> {
    let mut response = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if response.status().is_redirection() {
        return Err(format!(
            "GET {url}: HTTP {}: redirects are not followed",
            response.status()
        ));
    }
    if !response.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", response.status()));
    }
    let too_big = || format!("GET {url}: the document is larger than {MAX_JWKS_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the expected JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> IssuerConfig {
        serde_yaml::from_str(
            "issuer: https://idp.example\naudience: tp\ntenantClaim: org.tenant\nroleClaim: groups\n\
             roleMap: {viewers: tenant-viewer, devs: tenant-member, ops: tenant-admin}\n",
        )
        .unwrap()
    }

    #[test]
    fn highest_mapped_role_wins_and_unmapped_values_are_ignored() {
        let c = config();
        let claims = serde_json::json!({"groups": ["viewers", "devs", "other"], "org": {"tenant": "acme"}});
        assert_eq!(c.role_of(&claims), Some(Role::TenantMember));
        assert_eq!(c.tenant_of(&claims), Some("acme"));
        assert_eq!(c.role_of(&serde_json::json!({"groups": ["other"]})), None);
        assert_eq!(
            c.role_of(&serde_json::json!({"groups": "ops"})),
            Some(Role::TenantAdmin)
        );
        assert_eq!(c.role_of(&serde_json::json!({})), None);
    }

    #[test]
    fn without_a_map_values_are_role_names_and_platform_admin_needs_the_flag() {
        let mut c = config();
        c.role_map.clear();
        let root = serde_json::json!({"groups": "platform-admin"});
        assert_eq!(c.role_of(&root), None);
        c.allow_platform_admin = true;
        assert_eq!(c.role_of(&root), Some(Role::PlatformAdmin));
    }

    #[test]
    fn validation_refuses_hmac_own_issuer_and_unflagged_root_mapping() {
        let mut c = config();
        assert_eq!(c.validate("tenantplane"), Ok(()));
        assert_eq!(
            c.validate("https://idp.example").unwrap_err(),
            "external issuer \"https://idp.example\": `issuer` equals Tenantplane's own issuer"
        );
        c.algorithms = vec![Algorithm::ES256, Algorithm::HS256];
        assert!(
            c.validate("tenantplane")
                .unwrap_err()
                .contains("HMAC algorithms (HS*) are refused")
        );
        c.algorithms.clear();
        c.role_map.insert("root".into(), Role::PlatformAdmin);
        assert!(
            c.validate("tenantplane")
                .unwrap_err()
                .contains("allowPlatformAdmin")
        );
    }

    #[test]
    fn key_urls_must_be_https_unless_insecure_http_is_allowed() {
        let mut c = config();
        c.jwks_url = Some("http://idp.example/keys".into());
        assert_eq!(
            c.validate("tenantplane").unwrap_err(),
            "external issuer \"https://idp.example\": \"http://idp.example/keys\" is not https (set `allowInsecureHttp: true` only for a local test IdP)"
        );
        c.allow_insecure_http = true;
        assert_eq!(c.validate("tenantplane"), Ok(()));
        assert!(c.check_url("ftp://idp.example/keys").is_err());
    }

    #[test]
    fn a_tenant_bound_issuer_names_only_its_tenants_and_never_a_platform_admin() {
        let mut c = config();
        assert!(c.may_name("anyone"));
        c.tenants = vec!["acme".into()];
        assert!(c.may_name("acme"));
        assert!(!c.may_name("globex"));
        c.allow_platform_admin = true;
        assert!(
            c.validate("tenantplane")
                .unwrap_err()
                .contains("exclude each other")
        );
    }

    #[test]
    fn unknown_fields_in_the_file_are_refused() {
        let err = serde_yaml::from_str::<Vec<IssuerConfig>>(
            "- issuer: https://idp\n  audience: a\n  tenantClaim: t\n  roleClaim: r\n  jwksUri: x\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `jwksUri`"), "{err}");
    }
}

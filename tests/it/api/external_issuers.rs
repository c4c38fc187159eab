//! External OIDC issuers: a local identity provider serves discovery and a JWKS over real HTTP; its
//! tokens map to tenant and role through claims; keys are cached and fetched again on an unknown kid.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::{Json, Router, extract::State, routing::get};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk, jwk::JwkSet};
use reqwest::{Method, StatusCode};
use ring::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair},
};
use serde_json::{Value, json};
use tenantplane::auth::external::{ExternalIssuers, IssuerConfig};

use super::{App, spawn_app_configured};

/// Audience the identity provider puts in its tokens.
const AUDIENCE: &str = "tenantplane-external";

/// A local identity provider: discovery + JWKS, counting JWKS fetches (also its own router state).
#[derive(Clone)]
struct Idp {
    base: String,
    keys: Arc<Mutex<JwkSet>>,
    jwks_fetches: Arc<AtomicUsize>,
}

impl Idp {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let idp = Idp {
            base,
            keys: Arc::new(Mutex::new(JwkSet { keys: vec![] })),
            jwks_fetches: Arc::new(AtomicUsize::new(0)),
        };
        let app = Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(|State(s): State<Idp>| async move {
                    Json(json!({"issuer": s.base, "jwks_uri": format!("{}/keys", s.base)}))
                }),
            )
            .route(
                "/keys",
                get(|State(s): State<Idp>| async move {
                    s.jwks_fetches.fetch_add(1, Ordering::SeqCst);
                    let set = s.keys.lock().unwrap().clone();
                    Json(set)
                }),
            )
            // A redirect to the real keys, and a JWKS far larger than any real one.
            .route(
                "/moved",
                get(|State(s): State<Idp>| async move {
                    axum::response::Redirect::temporary(&format!("{}/keys", s.base))
                }),
            )
            .route(
                "/huge",
                get(|| async {
                    let key = json!({"kty": "oct", "k": "x".repeat(1024), "kid": "pad"});
                    Json(json!({"keys": vec![key; 400]}))
                }),
            )
            .with_state(idp.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        idp
    }

    /// Publishes a new P-256 key under `kid`; returns its signing key.
    fn add_es256(&self, kid: &str) -> EncodingKey {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new()).unwrap();
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        self.publish(&key, Algorithm::ES256, kid);
        key
    }

    /// Publishes a new Ed25519 key under `kid`; returns its signing key.
    fn add_ed25519(&self, kid: &str) -> EncodingKey {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let public = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(public.public_key().as_ref());
        let jwk = json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig"});
        self.keys
            .lock()
            .unwrap()
            .keys
            .push(serde_json::from_value(jwk).unwrap());
        EncodingKey::from_ed_der(pkcs8.as_ref())
    }

    fn publish(&self, key: &EncodingKey, alg: Algorithm, kid: &str) {
        let mut jwk = Jwk::from_encoding_key(key, alg).unwrap();
        jwk.common.key_id = Some(kid.into());
        self.keys.lock().unwrap().keys.push(jwk);
    }

    fn fetches(&self) -> usize {
        self.jwks_fetches.load(Ordering::SeqCst)
    }

    /// The issuer configuration used by these tests (keys found through discovery).
    fn config(&self) -> IssuerConfig {
        serde_yaml::from_str(&format!(
            "issuer: {}\naudience: {AUDIENCE}\nalgorithms: [ES256]\ntenantClaim: org.tenant\n\
             roleClaim: groups\nminRefreshSeconds: 1\nallowInsecureHttp: true\n\
             roleMap: {{tp-viewers: tenant-viewer, tp-devs: tenant-member, tp-admins: tenant-admin}}\n",
            self.base
        ))
        .unwrap()
    }

    /// Claims of a valid token for `tenant` with `groups`, valid for 10 minutes.
    fn claims(&self, tenant: &str, groups: &[&str]) -> Value {
        let now = chrono::Utc::now().timestamp();
        json!({
            "iss": self.base, "aud": AUDIENCE, "sub": "alice", "jti": uuid::Uuid::new_v4().to_string(),
            "iat": now, "nbf": now, "exp": now + 600,
            "org": {"tenant": tenant}, "groups": groups,
        })
    }
}

fn sign(key: &EncodingKey, alg: Algorithm, kid: &str, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

async fn app_trusting(idp: &Idp) -> App {
    let config = idp.config();
    config.validate("https://tenantplane.test").unwrap();
    spawn_app_configured(None, ExternalIssuers::new(vec![config]).unwrap()).await
}

/// GET the control planes of `slug`: (status, detail).
async fn list(app: &App, slug: &str, token: &str) -> (StatusCode, Value) {
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(token),
            None,
        )
        .await;
    (r.status, r.body)
}

#[tokio::test]
async fn external_tokens_map_claims_to_tenant_and_role() {
    let idp = Idp::start().await;
    let key = idp.add_es256("k1");
    let app = app_trusting(&idp).await;
    let (a, b) = (app.tenant("ext-a").await, app.tenant("ext-b").await);

    let member = sign(
        &key,
        Algorithm::ES256,
        "k1",
        &idp.claims(&a, &["tp-viewers", "tp-devs"]),
    );
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{a}/control-planes"),
            Some(&member),
            Some(json!({"name": "from-idp", "kubernetesVersion": "v1.33.2"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let (status, body) = list(&app, &a, &member).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["items"][0]["name"], "from-idp");

    // The audit log names the external subject and issuer.
    let actor: String = sqlx::query_scalar(
        "select actor from audit_log where action = 'control-plane.create' order by id desc limit 1",
    )
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert!(
        actor.starts_with(&format!("tenant-member:alice@{}(", idp.base)),
        "{actor}"
    );

    // A viewer reads but may not create.
    let viewer = sign(&key, Algorithm::ES256, "k1", &idp.claims(&a, &["tp-viewers"]));
    assert_eq!(list(&app, &a, &viewer).await.0, StatusCode::OK);
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{a}/control-planes"),
            Some(&viewer),
            Some(json!({"name": "nope", "kubernetesVersion": "v1.33.2"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);

    // Another tenant's data is not found, not forbidden.
    let (status, body) = list(&app, &b, &member).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["detail"], "tenant not found");

    // Each refusal is a 401 with its reason.
    let mut cases: Vec<(&str, String, &str)> = vec![];
    cases.push((
        "unmapped group",
        sign(&key, Algorithm::ES256, "k1", &idp.claims(&a, &["staff"])),
        "the token is invalid: the token's role claim maps to no role",
    ));
    cases.push((
        "unknown tenant",
        sign(&key, Algorithm::ES256, "k1", &idp.claims("ghost", &["tp-admins"])),
        "the token is invalid: the token's tenant does not exist",
    ));
    let mut claims = idp.claims(&a, &["tp-devs"]);
    claims["aud"] = json!("someone-else");
    cases.push((
        "wrong audience",
        sign(&key, Algorithm::ES256, "k1", &claims),
        "the token is invalid: wrong audience",
    ));
    let mut claims = idp.claims(&a, &["tp-devs"]);
    claims["exp"] = json!(chrono::Utc::now().timestamp() - 3600);
    cases.push((
        "expired",
        sign(&key, Algorithm::ES256, "k1", &claims),
        "the token is invalid: expired",
    ));
    let mut claims = idp.claims(&a, &["tp-devs"]);
    claims.as_object_mut().unwrap().remove("nbf");
    cases.push((
        "no nbf",
        sign(&key, Algorithm::ES256, "k1", &claims),
        "the token is invalid: a required claim is missing",
    ));
    // EdDSA is not on this issuer's allow-list, even with its key published.
    let ed = idp.add_ed25519("ed1");
    cases.push((
        "algorithm not allowed",
        sign(&ed, Algorithm::EdDSA, "ed1", &idp.claims(&a, &["tp-devs"])),
        "the token is malformed or uses an algorithm that is not accepted",
    ));
    // HS256 keyed with the public key's bytes (the classic confusion attack).
    let public_x = idp.keys.lock().unwrap().keys[0].clone();
    let x = serde_json::to_value(&public_x).unwrap()["x"]
        .as_str()
        .unwrap()
        .to_string();
    let hmac = EncodingKey::from_secret(x.as_bytes()).unwrap();
    cases.push((
        "HS256 with the public key",
        sign(&hmac, Algorithm::HS256, "k1", &idp.claims(&a, &["tp-devs"])),
        "the token is malformed or uses an algorithm that is not accepted",
    ));
    let good = sign(&key, Algorithm::ES256, "k1", &idp.claims(&a, &["tp-devs"]));
    let (head, rest) = good.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let forged_payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&idp.claims(&a, &["tp-admins"])).unwrap());
    cases.push((
        "tampered payload",
        format!("{head}.{forged_payload}.{signature}"),
        "the token is invalid: bad signature",
    ));
    for (case, token, detail) in cases {
        let (status, body) = list(&app, &a, &token).await;
        assert_eq!((case, status), (case, StatusCode::UNAUTHORIZED), "{body}");
        assert_eq!((case, body["detail"].as_str()), (case, Some(detail)));
        assert!(body.get("items").is_none(), "{case}: no data in a refusal");
    }
}

/// The cache test's least time between two JWKS fetches (`minRefreshSeconds`): the requests it expects
/// the cache to answer come well within it on a loaded machine, and it waits it out twice.
const MIN_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::test]
async fn jwks_is_cached_and_fetched_again_on_an_unknown_kid() {
    let idp = Idp::start().await;
    let k1 = idp.add_es256("k1");
    let mut config = idp.config();
    config.min_refresh_seconds = Some(MIN_REFRESH.as_secs());
    config.validate("https://tenantplane.test").unwrap();
    let app = spawn_app_configured(None, ExternalIssuers::new(vec![config]).unwrap()).await;
    let slug = app.tenant("ext-cache").await;

    for _ in 0..5 {
        let token = sign(&k1, Algorithm::ES256, "k1", &idp.claims(&slug, &["tp-viewers"]));
        assert_eq!(list(&app, &slug, &token).await.0, StatusCode::OK);
    }
    assert_eq!(idp.fetches(), 1, "five requests, one JWKS fetch");

    // The issuer rotates: a token signed by the new key makes the cache fetch again.
    let k2 = idp.add_es256("k2");
    tokio::time::sleep(MIN_REFRESH + std::time::Duration::from_millis(100)).await;
    let token = sign(&k2, Algorithm::ES256, "k2", &idp.claims(&slug, &["tp-viewers"]));
    assert_eq!(list(&app, &slug, &token).await.0, StatusCode::OK);
    assert_eq!(idp.fetches(), 2);
    // The old key still verifies, from the cache.
    let token = sign(&k1, Algorithm::ES256, "k1", &idp.claims(&slug, &["tp-viewers"]));
    assert_eq!(list(&app, &slug, &token).await.0, StatusCode::OK);
    assert_eq!(idp.fetches(), 2);

    // Unknown kids right after a fetch cost no request (minRefreshSeconds), then one.
    let stray = sign(
        &k1,
        Algorithm::ES256,
        "nobody",
        &idp.claims(&slug, &["tp-viewers"]),
    );
    let (status, body) = list(&app, &slug, &stray).await;
    assert_eq!(
        (status, body["detail"].as_str()),
        (
            StatusCode::UNAUTHORIZED,
            Some("the token was signed by an unknown key")
        )
    );
    assert_eq!(idp.fetches(), 2);
    tokio::time::sleep(MIN_REFRESH + std::time::Duration::from_millis(100)).await;
    for _ in 0..3 {
        assert_eq!(list(&app, &slug, &stray).await.0, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(idp.fetches(), 3, "a burst of unknown kids costs one fetch");
}

#[tokio::test]
async fn an_issuer_bound_to_tenants_cannot_name_another_tenant() {
    let idp = Idp::start().await;
    let key = idp.add_es256("k1");
    let (bound, other) = (crate::support::unique("bound"), crate::support::unique("other"));
    let mut config = idp.config();
    config.tenants = vec![bound.clone()];
    config.validate("https://tenantplane.test").unwrap();
    let app = spawn_app_configured(None, ExternalIssuers::new(vec![config]).unwrap()).await;
    for slug in [&bound, &other] {
        let r = app
            .call(
                Method::POST,
                "/api/v1/tenants",
                Some(&app.admin),
                Some(json!({"slug": slug, "displayName": "x"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let own = sign(&key, Algorithm::ES256, "k1", &idp.claims(&bound, &["tp-admins"]));
    assert_eq!(list(&app, &bound, &own).await.0, StatusCode::OK);
    let foreign = sign(&key, Algorithm::ES256, "k1", &idp.claims(&other, &["tp-admins"]));
    let (status, body) = list(&app, &other, &foreign).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        body["detail"],
        "the token is invalid: the token's issuer may not name its tenant"
    );
}

#[tokio::test]
async fn jwks_fetches_follow_no_redirect_and_refuse_oversized_documents() {
    let idp = Idp::start().await;
    let key = idp.add_es256("k1");
    for path in ["moved", "huge"] {
        let mut config = idp.config();
        config.jwks_url = Some(format!("{}/{path}", idp.base));
        let app = spawn_app_configured(None, ExternalIssuers::new(vec![config]).unwrap()).await;
        let slug = app.tenant("ext-fetch").await;
        let token = sign(&key, Algorithm::ES256, "k1", &idp.claims(&slug, &["tp-viewers"]));
        let (status, body) = list(&app, &slug, &token).await;
        assert_eq!((path, status), (path, StatusCode::SERVICE_UNAVAILABLE), "{body}");
        assert_eq!(
            body["detail"],
            "the token store or the token's issuer is unavailable; try again later"
        );
    }
    assert_eq!(idp.fetches(), 0, "the redirect to the real keys was not followed");
}

#[tokio::test]
async fn externally_signed_in_admins_mint_tokens_of_at_most_30_days() {
    let idp = Idp::start().await;
    let key = idp.add_es256("k1");
    let mut config = idp.config();
    config
        .role_map
        .insert("tp-root".into(), tenantplane::domain::Role::PlatformAdmin);
    config.allow_platform_admin = true;
    config.validate("https://tenantplane.test").unwrap();
    let app = spawn_app_configured(None, ExternalIssuers::new(vec![config]).unwrap()).await;
    let slug = app.tenant("ext-mint").await;
    let root = sign(&key, Algorithm::ES256, "k1", &idp.claims(&slug, &["tp-root"]));
    let owner = sign(&key, Algorithm::ES256, "k1", &idp.claims(&slug, &["tp-admins"]));
    let mint = |token: String, ttl: i64| {
        let (app, path) = (&app, format!("/api/v1/tenants/{slug}/tokens"));
        async move {
            app.call(
                Method::POST,
                &path,
                Some(&token),
                Some(json!({"role": "tenant-viewer", "ttlSeconds": ttl})),
            )
            .await
        }
    };
    let thirty_days = 30 * 24 * 3600;
    for token in [root.clone(), owner.clone()] {
        let r = mint(token.clone(), thirty_days + 1).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(
            r.body["errors"],
            json!([{"field": "ttlSeconds", "message": "a caller signed in through an external identity provider may mint tokens of at most 2592000 seconds"}])
        );
        let r = mint(token, thirty_days).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    // The platform's own tokens still mint up to 366 days.
    let r = mint(app.admin.clone(), 366 * 24 * 3600).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

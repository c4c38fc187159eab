//! Tokens: JWKS and discovery, rotation, revocation, role limits and the bootstrap CLI.

use reqwest::{Method, StatusCode};
use serde_json::json;
use tenantplane::{auth, store};

use super::spawn_app;

#[tokio::test]
async fn jwks_publishes_keys_that_verify_minted_tokens() {
    let app = spawn_app().await;
    let slug = app.tenant("jwks").await;
    let token = app.token(&slug, "tenant-viewer").await;
    let jwks = app.call(Method::GET, "/.well-known/jwks.json", None, None).await;
    assert_eq!(jwks.status, StatusCode::OK);
    let kid = auth::token_kid(&token).unwrap();
    let jwk = jwks.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid.as_str())
        .expect("the token's key is published")
        .clone();
    assert_eq!(
        (
            jwk["kty"].as_str(),
            jwk["crv"].as_str(),
            jwk["alg"].as_str(),
            jwk["use"].as_str()
        ),
        (Some("OKP"), Some("Ed25519"), Some("EdDSA"), Some("sig"))
    );
    // Verify with the published key only, as a third party would.
    let key = jsonwebtoken::DecodingKey::from_ed_components(jwk["x"].as_str().unwrap()).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.set_audience(&["tenantplane"]);
    validation.set_issuer(&["https://tenantplane.test"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(&token, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["role"], "tenant-viewer");
    assert_eq!(claims["tid"], super::tenant_id(&app, &slug).await.to_string());
    assert!(
        jwks.text.find("\"d\"").is_none(),
        "the JWKS must not contain private key material"
    );

    let discovery = app
        .call(Method::GET, "/.well-known/openid-configuration", None, None)
        .await;
    assert_eq!(discovery.body["issuer"], "https://tenantplane.test");
    assert_eq!(
        discovery.body["jwks_uri"],
        "https://tenantplane.test/.well-known/jwks.json"
    );
    assert_eq!(
        discovery.body["id_token_signing_alg_values_supported"],
        json!(["EdDSA"])
    );
}

#[tokio::test]
async fn private_keys_are_encrypted_at_rest() {
    let app = spawn_app().await;
    let slug = app.tenant("sealed").await;
    app.token(&slug, "tenant-viewer").await;
    let rows: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("select public_key, private_key_ciphertext from signing_keys")
            .fetch_all(&app.ctx.db)
            .await
            .unwrap();
    assert!(!rows.is_empty());
    for (public, ciphertext) in rows {
        // A PKCS#8 Ed25519 key embeds its public key; the sealed blob must not.
        assert!(!ciphertext.windows(public.len()).any(|w| w == public.as_slice()));
        // The Ed25519 AlgorithmIdentifier (SEQUENCE { OID 1.3.101.112 }) is in every PKCS#8
        // key; in a random-looking blob these seven bytes appear by chance about once in 2^50.
        let ed25519_algorithm = [0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];
        assert!(
            !ciphertext.windows(7).any(|w| w == ed25519_algorithm),
            "looks like plaintext PKCS#8"
        );
    }
}

#[tokio::test]
async fn revocation_takes_effect_on_the_next_request() {
    let app = spawn_app().await;
    let slug = app.tenant("revoke").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    assert_eq!(
        app.call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}"),
            Some(&viewer),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    let list = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/tokens"),
            Some(&admin),
            None,
        )
        .await;
    let viewer_id = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["role"] == "tenant-viewer")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let revoked = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/tokens/{viewer_id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert!(revoked.body["revokedAt"].is_string());
    let after = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}"),
            Some(&viewer),
            None,
        )
        .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert_eq!(after.body["detail"], "the token was revoked");
    assert_eq!(
        after.headers["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
}

#[tokio::test]
async fn rotation_keeps_old_tokens_valid_and_signs_new_ones_with_the_new_key() {
    let app = spawn_app().await;
    let slug = app.tenant("rotate").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let old_kid = auth::token_kid(&admin).unwrap();
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/signing-keys/rotate"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let new_kid = r.body["kid"].as_str().unwrap().to_string();
    assert_ne!(new_kid, old_kid);
    assert_eq!(
        app.call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}"),
            Some(&admin),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    let fresh = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/tokens"),
            Some(&admin),
            Some(json!({"role": "tenant-viewer"})),
        )
        .await;
    assert_eq!(
        auth::token_kid(fresh.body["token"].as_str().unwrap()).unwrap(),
        new_kid
    );
    let jwks = app.call(Method::GET, "/.well-known/jwks.json", None, None).await;
    let kids: Vec<&str> = jwks.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert!(kids.contains(&old_kid.as_str()) && kids.contains(&new_kid.as_str()));
}

#[tokio::test]
async fn rotation_stops_at_ten_live_signing_keys_with_409() {
    let app = spawn_app().await;
    let slug = app.tenant("rotate-cap").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let path = format!("/api/v1/tenants/{slug}/signing-keys/rotate");
    // One key signed the admin's token; nine rotations make ten live keys.
    for i in 0..9 {
        let r = app.call(Method::POST, &path, Some(&admin), None).await;
        assert_eq!((i, r.status), (i, StatusCode::OK), "{}", r.text);
    }
    let r = app.call(Method::POST, &path, Some(&admin), None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(
        r.body["detail"],
        "the tenant already has 10 live signing keys, the limit: a retired key keeps verifying until every token it may have signed has expired (at most 366 days), so rotate again after the oldest retired key has expired"
    );
    let keys: i64 = sqlx::query_scalar(
        "select count(*) from signing_keys k join tenants t on t.id = k.tenant_id where t.slug = $1",
    )
    .bind(&slug)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(keys, 10);
}

#[tokio::test]
async fn tenant_admins_cannot_mint_platform_admin_tokens() {
    let app = spawn_app().await;
    let slug = app.tenant("escalate").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/tokens"),
            Some(&admin),
            Some(json!({"role": "platform-admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.body["errors"][0]["field"], "role");
    let viewer = app.call(Method::GET, "/api/v1/viewer", Some(&admin), None).await;
    assert_eq!(viewer.body["role"], "tenant-admin");
    assert_eq!(viewer.body["tenant"], slug.as_str());
}

#[tokio::test]
async fn token_mint_cli_bootstraps_a_platform_admin() {
    let url = crate::support::fresh_database("cli").await;
    let key = tenantplane::auth::keys::ServerKey::generate_base64().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "token",
            "mint",
            "--platform-admin",
            "--description",
            "first admin",
        ])
        .env("DATABASE_URL", &url)
        .env("TENANTPLANE_ENCRYPTION_KEY", &key)
        .env("TENANTPLANE_ISSUER", "https://tenantplane.test")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let ctx = tenantplane::service::Ctx {
        db,
        server_key: std::sync::Arc::new(tenantplane::auth::keys::ServerKey::from_base64(&key).unwrap()),
        tokens: tenantplane::auth::TokenSettings {
            issuer: "https://tenantplane.test".into(),
            audience: "tenantplane".into(),
            external: Default::default(),
            verifying_keys: Default::default(),
            cluster: Default::default(),
        },
        versions: Default::default(),
        placement: Default::default(),
        limits: Default::default(),
    };
    let principal = tenantplane::service::tokens::authenticate(&ctx, &token)
        .await
        .unwrap();
    assert_eq!(principal.role, tenantplane::domain::Role::PlatformAdmin);
    assert_eq!(principal.tenant_id, None);
    assert_eq!(principal.subject, "first admin");
    let rows = store::tenants::list(&ctx.db).await.unwrap();
    assert!(rows.is_empty());
}

/// A token of tenant `tenant` (tenant-viewer, recorded in `api_tokens` so only its key can be unknown),
/// signed with a fresh Ed25519 key under `kid`; returns the token and the key's raw public half.
async fn token_with_own_key(app: &super::App, tenant: uuid::Uuid, kid: &str) -> (String, Vec<u8>) {
    use ring::signature::KeyPair as _;
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let jti = uuid::Uuid::new_v4();
    let now = chrono::Utc::now();
    let expires = now + chrono::Duration::hours(1);
    store::tokens::insert(
        &app.ctx.db,
        jti,
        Some(tenant),
        "tenant-viewer",
        "own key",
        "tests",
        expires,
    )
    .await
    .unwrap();
    let claims = auth::Claims {
        iss: app.ctx.tokens.issuer.clone(),
        aud: app.ctx.tokens.audience.clone(),
        sub: "own key".into(),
        jti,
        tid: Some(tenant),
        role: tenantplane::domain::Role::TenantViewer,
        iat: now.timestamp(),
        nbf: now.timestamp(),
        exp: expires.timestamp(),
    };
    let token = auth::sign(&claims, kid, pkcs8.as_ref()).unwrap();
    (token, pair.public_key().as_ref().to_vec())
}

#[tokio::test]
async fn a_token_with_an_unknown_kid_costs_one_query_however_often_it_is_sent() {
    let app = spawn_app().await;
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let slug = app.tenant("ghost").await;
    let tenant = super::tenant_id(&app, &slug).await;
    let (token, _) = token_with_own_key(&app, tenant, "ghost-kid").await;
    let before = super::statements(&app).await;
    for _ in 0..20 {
        let r = app.call(Method::GET, "/api/v1/viewer", Some(&token), None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
        assert_eq!(r.body["detail"], "the token was signed by an unknown key");
    }
    let after = super::statements(&app).await;
    assert_eq!(
        after - before,
        1,
        "statements for 20 requests with one unknown kid"
    );
}

#[tokio::test]
async fn a_key_created_through_the_service_makes_unknown_kids_verify_at_once() {
    let app = spawn_app().await;
    let slug = app.tenant("late-key").await;
    let tenant = super::tenant_id(&app, &slug).await;
    // Minted first: the tenant's first key is created here, not below.
    let admin = app.token(&slug, "tenant-admin").await;
    let kid = format!("late-{}", uuid::Uuid::new_v4().simple());
    let (token, public) = token_with_own_key(&app, tenant, &kid).await;
    let viewer = |t: String| {
        let app = &app;
        async move { app.call(Method::GET, "/api/v1/viewer", Some(&t), None).await }
    };
    assert_eq!(viewer(token.clone()).await.status, StatusCode::UNAUTHORIZED);
    // The key appears behind the service's back (a retired key, verifying for an hour): its kid is still
    // remembered as unknown.
    sqlx::query(
        "insert into signing_keys (kid, tenant_id, algorithm, public_key, private_key_ciphertext,
                                   private_key_nonce, retired_at, verify_until)
         values ($1, $2, 'EdDSA', $3, '\\x00', '\\x00', now(), now() + interval '1 hour')",
    )
    .bind(&kid)
    .bind(tenant)
    .bind(&public)
    .execute(&app.ctx.db)
    .await
    .unwrap();
    let r = viewer(token.clone()).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    assert_eq!(r.body["detail"], "the token was signed by an unknown key");
    // A key created through the service forgets the unknown kids: the next request finds the key.
    let rotated = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/signing-keys/rotate"),
            Some(&admin),
            None,
        )
        .await;
    assert!(rotated.status.is_success(), "{}", rotated.text);
    let r = viewer(token).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["role"], "tenant-viewer");
}

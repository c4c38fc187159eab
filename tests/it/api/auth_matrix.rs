//! The authorization matrix: every route of the router (read from the OpenAPI document the router is
//! built with) against every bad-token case, another tenant's token and a too-low role.

use std::collections::BTreeMap;

use base64::Engine as _;
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{
    auth::{self, Claims, keys},
    domain::Role,
    service, store,
};

use super::{App, spawn_app, tenant_id};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    AnyToken,
    Platform,
    Tenant(Role),
}

/// The expected access rule of every route. A route missing here fails the test.
fn rules() -> BTreeMap<(&'static str, &'static str), Needs> {
    use Needs::*;
    BTreeMap::from([
        (("GET", "/viewer"), AnyToken),
        (("POST", "/tenants"), Platform),
        (("GET", "/tenants"), Platform),
        (("GET", "/tenants/{tenant}"), Tenant(Role::TenantViewer)),
        (("DELETE", "/tenants/{tenant}"), Platform),
        (("POST", "/tenants/{tenant}/suspend"), Platform),
        (("POST", "/tenants/{tenant}/resume"), Platform),
        (("GET", "/tenants/{tenant}/audit"), Tenant(Role::TenantMember)),
        (("POST", "/tenants/{tenant}/tokens"), Tenant(Role::TenantAdmin)),
        (("GET", "/tenants/{tenant}/tokens"), Tenant(Role::TenantAdmin)),
        (
            ("DELETE", "/tenants/{tenant}/tokens/{token}"),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("POST", "/tenants/{tenant}/signing-keys/rotate"),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes"),
            Tenant(Role::TenantMember),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes"),
            Tenant(Role::TenantViewer),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes/{id}"),
            Tenant(Role::TenantViewer),
        ),
        (
            ("PATCH", "/tenants/{tenant}/control-planes/{id}"),
            Tenant(Role::TenantMember),
        ),
        (
            ("DELETE", "/tenants/{tenant}/control-planes/{id}"),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes/{id}/kubeconfig"),
            Tenant(Role::TenantViewer),
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes/{id}/credentials"),
            Tenant(Role::TenantViewer),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes/{id}/admin-kubeconfig"),
            Platform,
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes/{id}/migrate"),
            Platform,
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes/{id}/migrate/abort"),
            Platform,
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes/{id}/authenticators"),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes/{id}/authenticators"),
            Tenant(Role::TenantAdmin),
        ),
        (
            (
                "GET",
                "/tenants/{tenant}/control-planes/{id}/authenticators/{authenticatorId}",
            ),
            Tenant(Role::TenantAdmin),
        ),
        (
            (
                "DELETE",
                "/tenants/{tenant}/control-planes/{id}/authenticators/{authenticatorId}",
            ),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("POST", "/tenants/{tenant}/control-planes/{id}/join-tokens"),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("GET", "/tenants/{tenant}/control-planes/{id}/join-tokens"),
            Tenant(Role::TenantAdmin),
        ),
        (
            (
                "DELETE",
                "/tenants/{tenant}/control-planes/{id}/join-tokens/{tokenId}",
            ),
            Tenant(Role::TenantAdmin),
        ),
        (
            ("GET", "/tenants/{tenant}/operations"),
            Tenant(Role::TenantViewer),
        ),
        (("GET", "/tenants/{tenant}/quotas"), Tenant(Role::TenantViewer)),
        (("PUT", "/tenants/{tenant}/quotas"), Platform),
        (
            ("GET", "/tenants/{tenant}/operations/{id}"),
            Tenant(Role::TenantViewer),
        ),
        (("POST", "/pools"), Platform),
        (("GET", "/pools"), Platform),
        (("GET", "/pools/{name}"), Platform),
        (("PATCH", "/pools/{name}"), Platform),
        (("DELETE", "/pools/{name}"), Platform),
        (("POST", "/datastores"), Platform),
        (("GET", "/datastores"), Platform),
        (("GET", "/datastores/{name}"), Platform),
        (("PATCH", "/datastores/{name}"), Platform),
        (("DELETE", "/datastores/{name}"), Platform),
        (("POST", "/datastores/{name}/cordon"), Platform),
        (("POST", "/datastores/{name}/uncordon"), Platform),
        (("GET", "/datastores/{name}/drain-plan"), Platform),
        (("POST", "/datastores/{name}/drain"), Platform),
        (("POST", "/pools/{name}/rebalance"), Platform),
        (("GET", "/operations/{id}"), Platform),
        (("POST", "/placements:simulate"), Platform),
    ])
}

/// A tenant with a control plane and tokens of every role, another tenant's admin, and forged tokens.
pub struct Fixture {
    pub app: App,
    pub slug: String,
    pub cp_id: String,
    pub op_id: String,
    pub token_id: String,
    pub tokens: BTreeMap<Role, String>,
    pub other_tenant_admin: String,
    pub forged: Vec<(&'static str, String)>,
}

fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
}

/// The fixture on a fresh app (shared with the GraphQL matrix).
pub async fn fixture() -> Fixture {
    fixture_on(spawn_app().await).await
}

/// The fixture on `app`.
pub async fn fixture_on(app: App) -> Fixture {
    let slug = app.tenant("matrix").await;
    let other = app.tenant("intruder").await;
    let mut tokens = BTreeMap::new();
    for role in [Role::TenantAdmin, Role::TenantMember, Role::TenantViewer] {
        tokens.insert(role, app.token(&slug, role.as_str()).await);
    }
    let other_tenant_admin = app.token(&other, "tenant-admin").await;
    let created = app
        .control_plane(&slug, &tokens[&Role::TenantAdmin], "secret-project-x")
        .await;
    let cp_id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let op_id = created["operation"]["id"].as_str().unwrap().to_string();
    let pool = app
        .call(
            Method::POST,
            "/api/v1/pools",
            Some(&app.admin),
            Some(json!({"name": "gold"})),
        )
        .await;
    assert_eq!(pool.status, StatusCode::CREATED, "{}", pool.text);
    let ds = app
        .call(
            Method::POST,
            "/api/v1/datastores",
            Some(&app.admin),
            Some(datastore_body("etcd-1")),
        )
        .await;
    assert_eq!(ds.status, StatusCode::CREATED, "{}", ds.text);

    // Forged and broken tokens, all made with tenant A's real key where a key is needed.
    let tenant = tenant_id(&app, &slug).await;
    let key = keys::active(&app.ctx.db, &app.ctx.server_key, Some(tenant))
        .await
        .unwrap();
    let now = Utc::now().timestamp();
    let valid = service::tokens::mint_unchecked(
        &app.ctx,
        Some(tenant),
        Role::TenantAdmin,
        3600,
        "to-revoke",
        "tests",
    )
    .await
    .unwrap();
    store::tokens::revoke(&app.ctx.db, tenant, valid.record.id)
        .await
        .unwrap();
    let record = service::tokens::mint_unchecked(
        &app.ctx,
        Some(tenant),
        Role::TenantAdmin,
        3600,
        "template",
        "tests",
    )
    .await
    .unwrap();
    let claims = |f: &dyn Fn(&mut Claims)| {
        let mut c = Claims {
            iss: app.ctx.tokens.issuer.clone(),
            aud: app.ctx.tokens.audience.clone(),
            sub: "forger".into(),
            jti: record.record.id,
            tid: Some(tenant),
            role: Role::TenantAdmin,
            iat: now,
            nbf: now,
            exp: now + 600,
        };
        f(&mut c);
        c
    };
    let sign = |c: Claims| auth::sign(&c, &key.kid, &key.pkcs8).unwrap();
    let expired = sign(claims(&|c| {
        c.iat = now - 7200;
        c.nbf = now - 7200;
        c.exp = now - 3600;
    }));
    let wrong_aud = sign(claims(&|c| c.aud = "someone-else".into()));
    let wrong_iss = sign(claims(&|c| c.iss = "https://evil.example".into()));
    let payload = b64(&serde_json::to_vec(&claims(&|_| {})).unwrap());
    let alg_none = format!(
        "{}.{payload}.",
        b64(json!({"alg": "none", "typ": "JWT", "kid": key.kid})
            .to_string()
            .as_bytes())
    );
    let public = keys::verifying(&app.ctx.db, &key.kid)
        .await
        .unwrap()
        .unwrap()
        .public_key;
    let mut hs_header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    hs_header.kid = Some(key.kid.clone());
    let hs256 = jsonwebtoken::encode(
        &hs_header,
        &claims(&|_| {}),
        &jsonwebtoken::EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    let genuine = sign(claims(&|_| {}));
    let mut parts: Vec<String> = genuine.split('.').map(str::to_string).collect();
    parts[1] = b64(&serde_json::to_vec(&claims(&|c| {
        c.role = Role::PlatformAdmin;
        c.tid = None;
    }))
    .unwrap());
    let tampered = parts.join(".");
    let oversized = format!("{genuine}{}", "A".repeat(9000));
    let forged = vec![
        ("expired", expired),
        ("wrong audience", wrong_aud),
        ("wrong issuer", wrong_iss),
        ("alg none", alg_none),
        ("HS256 with the public key", hs256),
        ("tampered payload", tampered),
        ("revoked", valid.token),
        ("over 8 KiB", oversized),
        ("garbage", "not.a.jwt".into()),
    ];
    let token_id = record.record.id.to_string();
    Fixture {
        app,
        slug,
        cp_id,
        op_id,
        token_id,
        tokens,
        other_tenant_admin,
        forged,
    }
}

fn datastore_body(name: &str) -> Value {
    let r = |k: &str| json!({"name": "etcd-certs", "namespace": "kamaji-system", "keyPath": k});
    json!({"name": name, "pool": "gold", "driver": "etcd", "endpoints": ["etcd-0:2379"], "capacityTenants": 10,
           "secrets": {"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")}})
}

fn concrete(f: &Fixture, template: &str) -> String {
    let id = if template.contains("/operations/") {
        &f.op_id
    } else {
        &f.cp_id
    };
    let name = if template.starts_with("/pools") {
        "gold"
    } else {
        "etcd-1"
    };
    format!(
        "/api/v1{}",
        template
            .replace("{tenant}", &f.slug)
            .replace("{id}", id)
            .replace("{token}", &f.token_id)
            .replace("{tokenId}", "abc123")
            .replace("{authenticatorId}", "00000000-0000-0000-0000-000000000001")
            .replace("{name}", name)
    )
}

fn body(method: &str, template: &str) -> Option<Value> {
    match (method, template) {
        ("POST", "/tenants") => {
            Some(json!({"slug": super::super::support::unique("new"), "displayName": "New"}))
        }
        ("POST", "/tenants/{tenant}/tokens") => Some(json!({"role": "tenant-viewer"})),
        ("POST", "/tenants/{tenant}/control-planes") => {
            Some(json!({"name": super::super::support::unique("cp"), "kubernetesVersion": "v1.33.2"}))
        }
        ("PATCH", "/pools/{name}") => Some(json!({"policy": "spread"})),
        ("PATCH", "/datastores/{name}") => Some(json!({"capacityTenants": 10})),
        ("PATCH", _) => Some(json!({"replicas": 1})),
        ("PUT", "/tenants/{tenant}/quotas") => Some(json!({"controlPlanes": 100})),
        ("POST", "/tenants/{tenant}/control-planes/{id}/join-tokens") => {
            Some(json!({"ttlSeconds": 600, "description": "matrix"}))
        }
        ("POST", "/tenants/{tenant}/control-planes/{id}/credentials") => Some(json!({"ttlSeconds": 600})),
        ("POST", "/tenants/{tenant}/control-planes/{id}/authenticators") => Some(json!({
            "issuer": {"url": "https://idp.example.com", "audiences": ["a"]},
            "claimMappings": {"username": {"claim": "email", "prefix": "idp:"}},
        })),
        ("POST", "/pools") => Some(json!({"name": super::super::support::unique("pool")})),
        ("POST", "/datastores") => Some(datastore_body(&super::super::support::unique("ds"))),
        ("POST", "/placements:simulate") => Some(json!({"sizeClass": "small"})),
        ("POST", "/tenants/{tenant}/control-planes/{id}/migrate") => Some(json!({"target": "etcd-1"})),
        ("POST", "/datastores/{name}/drain") => Some(json!({"concurrency": 1})),
        ("POST", "/pools/{name}/rebalance") => Some(json!({"concurrency": 1})),
        _ => None,
    }
}

pub fn role_below(role: Role) -> Option<Role> {
    match role {
        Role::TenantAdmin => Some(Role::TenantMember),
        Role::TenantMember => Some(Role::TenantViewer),
        _ => None,
    }
}

#[tokio::test]
async fn every_route_refuses_bad_tokens_other_tenants_and_low_roles() {
    let f = fixture().await;
    let doc: Value = f
        .app
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await
        .body;
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase(), path.clone()));
        }
    }
    let rules = rules();
    let documented: Vec<(String, String)> = rules
        .keys()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let mut sorted = routes.clone();
    sorted.sort();
    let mut expected = documented.clone();
    expected.sort();
    assert_eq!(
        sorted, expected,
        "the router's routes and this matrix differ: add the new route's rule"
    );

    let mut checked = 0;
    for (method, template) in &routes {
        let needs = rules[&(method.as_str(), template.as_str())];
        let path = concrete(&f, template);
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        let mut expect = |reply: &super::Reply, status: StatusCode, case: &str| {
            assert_eq!(
                reply.status, status,
                "{method} {template} with {case}: {}",
                reply.text
            );
            assert!(
                !reply.text.contains("secret-project-x") && !reply.text.contains(&f.cp_id),
                "{method} {template} with {case} leaks data: {}",
                reply.text
            );
            checked += 1;
        };
        let r = f.app.call(m.clone(), &path, None, body(method, template)).await;
        expect(&r, StatusCode::UNAUTHORIZED, "no token");
        for (case, token) in &f.forged {
            let r = f
                .app
                .call(m.clone(), &path, Some(token), body(method, template))
                .await;
            expect(&r, StatusCode::UNAUTHORIZED, case);
        }
        match needs {
            Needs::AnyToken => {}
            Needs::Platform => {
                let r = f
                    .app
                    .call(
                        m.clone(),
                        &path,
                        Some(&f.tokens[&Role::TenantAdmin]),
                        body(method, template),
                    )
                    .await;
                expect(&r, StatusCode::FORBIDDEN, "a tenant admin");
            }
            Needs::Tenant(role) => {
                let r = f
                    .app
                    .call(
                        m.clone(),
                        &path,
                        Some(&f.other_tenant_admin),
                        body(method, template),
                    )
                    .await;
                expect(&r, StatusCode::NOT_FOUND, "another tenant's admin token");
                if let Some(low) = role_below(role) {
                    let r = f
                        .app
                        .call(m.clone(), &path, Some(&f.tokens[&low]), body(method, template))
                        .await;
                    expect(&r, StatusCode::FORBIDDEN, low.as_str());
                }
            }
        }
    }
    assert!(checked > 23 * 10, "only {checked} checks ran");
}

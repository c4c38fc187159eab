//! `tenantplane` as a real process over real HTTP.

use std::{process::Stdio, time::Duration};

use tenantplane_devenv::localenv::{
    self, ports,
    process::{ChildProcess, Spec},
};

use crate::support::{self, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_tenantplane");

/// Starts `tenantplane serve` with the given environment; returns the process and its base URL.
fn start_serve(env: &[(&str, String)]) -> (ChildProcess, String, ports::PortClaim) {
    let port = ports::claim().unwrap();
    let dir = localenv::scratch_dir("serve").unwrap();
    let mut spec = Spec::new("tenantplane-serve", BIN)
        .args(["serve"])
        .env("TENANTPLANE_LISTEN", format!("127.0.0.1:{}", port.port()))
        .env("RUST_LOG", "info")
        .env(
            "TENANTPLANE_ENCRYPTION_KEY",
            tenantplane::auth::keys::ServerKey::generate_base64().unwrap(),
        );
    for (k, v) in env {
        spec = spec.env(*k, v);
    }
    let child = ChildProcess::spawn(&spec, &dir.join("serve.log")).unwrap();
    (child, format!("http://127.0.0.1:{}", port.port()), port)
}

async fn get(url: &str) -> Option<(u16, String, String)> {
    localenv::install_crypto_provider();
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Some((status, content_type, response.text().await.ok()?))
}

#[tokio::test]
async fn serve_answers_healthz_and_readyz_over_http() {
    let url = support::fresh_database("serve").await;
    let (_child, base, _port) = start_serve(&[("DATABASE_URL", url)]);
    let (status, _, body) = eventually("GET /healthz", Duration::from_secs(30), || {
        get_owned(format!("{base}/healthz"))
    })
    .await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    let (status, _, body) = get(&format!("{base}/readyz")).await.unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"checks":{"postgres":"ok"},"status":"ok"}"#)
    );
}

async fn get_owned(url: String) -> Option<(u16, String, String)> {
    get(&url).await
}

#[tokio::test]
async fn readyz_is_a_503_problem_when_postgres_goes_away() {
    // A dedicated PostgreSQL that this test stops.
    let pg = localenv::postgres::LocalPostgres::start(localenv::scratch_dir("pg-stop").unwrap())
        .await
        .unwrap();
    let (_child, base, _port) = start_serve(&[("DATABASE_URL", pg.url())]);
    let (status, _, _) = eventually("GET /readyz", Duration::from_secs(30), || {
        get_owned(format!("{base}/readyz"))
    })
    .await;
    assert_eq!(status, 200);
    drop(pg);
    let (status, content_type, body) = eventually("readyz to fail", Duration::from_secs(30), || {
        let url = format!("{base}/readyz");
        async move { get(&url).await.filter(|(s, _, _)| *s != 200) }
    })
    .await;
    assert_eq!(status, 503);
    assert_eq!(content_type, "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 503);
    assert_eq!(problem["title"], "Not ready");
    assert!(
        !body.contains("postgres://"),
        "the problem leaks the database URL: {body}"
    );
}

#[tokio::test]
async fn serve_without_database_url_starts_its_own_postgres() {
    let local_dir = localenv::scratch_dir("serve-local").unwrap();
    let (_child, base, _port) = start_serve(&[
        ("DATABASE_URL", String::new()),
        ("TENANTPLANE_LOCAL_DIR", local_dir.display().to_string()),
    ]);
    let (status, _, body) = eventually(
        "GET /readyz on the embedded PostgreSQL",
        Duration::from_secs(120),
        || get_owned(format!("{base}/readyz")),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"checks":{"postgres":"ok"},"status":"ok"}"#)
    );
    assert!(
        local_dir.join("data/PG_VERSION").exists(),
        "no cluster was initialized in TENANTPLANE_LOCAL_DIR"
    );
}

#[test]
fn version_prints_the_crate_version() {
    let out = std::process::Command::new(BIN)
        .arg("version")
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("tenantplane {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test]
async fn serve_refuses_to_start_without_an_encryption_key_on_a_real_database() {
    let url = support::fresh_database("nokey").await;
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", url)
        .env_remove("TENANTPLANE_ENCRYPTION_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TENANTPLANE_ENCRYPTION_KEY is required with DATABASE_URL"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("postgres://"),
        "the error leaks the database URL: {stderr}"
    );
}

#[tokio::test]
async fn serve_refuses_an_external_issuer_that_would_accept_hmac() {
    let url = support::fresh_database("oidcbad").await;
    let dir = tenantplane_devenv::localenv::scratch_dir("oidc-bad").unwrap();
    let file = dir.join("issuers.yaml");
    std::fs::write(
        &file,
        "- issuer: https://login.example.com\n  audience: tp\n  tenantClaim: t\n  roleClaim: r\n  algorithms: [HS256]\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", url)
        .env(
            "TENANTPLANE_ENCRYPTION_KEY",
            tenantplane::auth::keys::ServerKey::generate_base64().unwrap(),
        )
        .env("TENANTPLANE_OIDC_ISSUERS_FILE", &file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "external issuer \"https://login.example.com\": HMAC algorithms (HS*) are refused: an external issuer signs with a private key"
        ),
        "{stderr}"
    );
}

/// The production app on a fresh database whose pool sets `timeouts` on each connection, as `serve`
/// does; its base URL and context.
async fn app_with_session_timeouts(
    timeouts: tenantplane::store::SessionTimeouts,
) -> (String, tenantplane::service::Ctx) {
    let url = support::fresh_database("serve-lock").await;
    let options = timeouts.apply(url.parse().unwrap());
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    tenantplane::store::migrate(&db).await.unwrap();
    let key = tenantplane::auth::keys::ServerKey::generate_base64().unwrap();
    let ctx = tenantplane::service::Ctx {
        db,
        server_key: std::sync::Arc::new(tenantplane::auth::keys::ServerKey::from_base64(&key).unwrap()),
        tokens: tenantplane::auth::TokenSettings {
            issuer: "tenantplane".into(),
            audience: "tenantplane".into(),
            external: Default::default(),
            verifying_keys: Default::default(),
            cluster: Default::default(),
        },
        versions: Default::default(),
        placement: Default::default(),
        limits: Default::default(),
    };
    let app = tenantplane::api::App::build(ctx.clone(), None, Default::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(app.serve(listener, std::future::pending()));
    (base, ctx)
}

#[tokio::test]
async fn a_request_that_waits_past_the_lock_timeout_is_a_503_problem_not_a_hang() {
    use tenantplane::{domain::Role, service::tokens::mint_unchecked};
    let (base, ctx) = app_with_session_timeouts(tenantplane::store::SessionTimeouts {
        lock_timeout_ms: 300,
        ..Default::default()
    })
    .await;
    let show = |sql: &'static str| {
        let db = ctx.db.clone();
        async move { sqlx::query_scalar::<_, String>(sql).fetch_one(&db).await.unwrap() }
    };
    assert_eq!(
        (
            show("show lock_timeout").await,
            show("show statement_timeout").await
        ),
        ("300ms".to_string(), "30s".to_string())
    );
    let admin = mint_unchecked(&ctx, None, Role::PlatformAdmin, 3600, "admin", "tests")
        .await
        .unwrap()
        .token;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{base}/api/v1/tenants"))
        .bearer_auth(&admin)
        .json(&serde_json::json!({"slug": "locked", "displayName": "Locked"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let tenant = tenantplane::store::tenants::by_slug(&ctx.db, "locked")
        .await
        .unwrap()
        .unwrap()
        .id;
    let owner = mint_unchecked(&ctx, Some(tenant), Role::TenantAdmin, 3600, "owner", "tests")
        .await
        .unwrap()
        .token;
    // Another transaction holds the tenant's row, as one held across a Kubernetes call would.
    let mut holder = ctx.db.begin().await.unwrap();
    sqlx::query("select id from tenants where id = $1 for update")
        .bind(tenant)
        .execute(&mut *holder)
        .await
        .unwrap();
    let rotate = || {
        http.post(format!("{base}/api/v1/tenants/locked/signing-keys/rotate"))
            .bearer_auth(&owner)
            .send()
    };
    // Without a lock timeout the request waits as long as the lock is held: this bound only ends a hang.
    let refused = tokio::time::timeout(Duration::from_secs(20), rotate())
        .await
        .expect("the request waited for the lock instead of failing at lock_timeout")
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(problem["type"], "https://tenantplane.dev/problems/unavailable");
    assert_eq!(problem["title"], "Service unavailable");
    assert_eq!(
        problem["detail"],
        "the database is busy with another change of the same data; retry shortly"
    );
    // Once the lock is released, the same request goes through.
    holder.rollback().await.unwrap();
    assert_eq!(rotate().await.unwrap().status(), 200);
}

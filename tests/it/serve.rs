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

/// 3 s for a request's line and headers (a request sent at once arrives well within it on a loaded
/// machine; a half one waits it out), and 300 ms for its body (the body test never sends the rest).
const IMPATIENT: tenantplane::api::serve::HttpTimeouts = tenantplane::api::serve::HttpTimeouts {
    header_seconds: 3.0,
    body_seconds: 0.3,
};

/// The test app with [`IMPATIENT`] deadlines; its address.
async fn impatient_app() -> (crate::api::App, std::net::SocketAddr) {
    let app = crate::api::spawn_app_custom(None, Default::default(), |s| s.http_timeouts = IMPATIENT).await;
    let addr = app.base.trim_start_matches("http://").parse().unwrap();
    (app, addr)
}

/// Everything the server sends until it closes the connection. The bound only ends a connection the
/// server never closes (the test then fails); the read itself waits for the close.
async fn until_closed(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut bytes))
        .await
        .expect("the server kept a slow client's connection open")
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn a_client_that_sends_half_a_request_line_or_nothing_is_disconnected_at_the_header_timeout() {
    use tokio::io::AsyncWriteExt as _;
    let (app, addr) = impatient_app().await;
    let started = std::time::Instant::now();
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /healthz HT").await.unwrap();
    assert_eq!(until_closed(&mut half).await, "");
    assert!(started.elapsed() >= Duration::from_secs_f64(IMPATIENT.header_seconds));
    // A connection that sends nothing is closed the same way.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(until_closed(&mut idle).await, "");
    // A request sent in time is answered.
    let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
    whole
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut whole).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    drop(app);
}

#[tokio::test]
async fn a_client_that_sends_half_a_body_gets_a_408_problem_and_is_disconnected() {
    use tokio::io::AsyncWriteExt as _;
    let (app, addr) = impatient_app().await;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"slug\":",
        app.admin
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let answer = until_closed(&mut slow).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("\r\nconnection: close"), "{answer}");
    assert!(
        head.contains("\r\ncontent-type: application/problem+json"),
        "{answer}"
    );
    let problem: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        problem,
        serde_json::json!({
            "type": "https://tenantplane.dev/problems/request-timeout",
            "title": "Request timeout",
            "status": 408,
            "detail": "the request body did not arrive within 0.3 s of its headers",
        })
    );
    // Nothing was created.
    assert!(
        tenantplane::store::tenants::list(&app.ctx.db)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_tls_listener_disconnects_a_client_that_sends_half_a_request_line() {
    let (app, _) = impatient_app().await;
    let tls = tenantplane_devenv::localenv::issuer::start().await.unwrap();
    let addr: std::net::SocketAddr = tls
        .issuer
        .url
        .trim_start_matches("https://")
        .trim_end_matches("/credentials")
        .parse()
        .unwrap();
    let ca = tls.issuer.certificate_authority.clone().unwrap();
    let served = tenantplane::api::App::build(
        app.ctx.clone(),
        None,
        tenantplane::api::AppSettings {
            http_timeouts: IMPATIENT,
            rate_limits: tenantplane::api::limits::RateLimitSettings::OFF,
            ..Default::default()
        },
    );
    tokio::spawn(served.serve_tls(tls.listener, std::future::pending()));
    let (sent, read) = tokio::task::spawn_blocking(move || tls_half_request(addr, &ca))
        .await
        .unwrap();
    assert_eq!(sent, b"");
    assert_eq!(read, Err(std::io::ErrorKind::UnexpectedEof));
}

/// Over TLS (trusting `ca_pem`), sends half a request line to `addr` and reads until the server closes:
/// what it sent, and how the read ended. A 20 s read timeout only ends a connection never closed.
fn tls_half_request(
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> (Vec<u8>, Result<usize, std::io::ErrorKind>) {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
    use std::io::{Read as _, Write as _};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    stream.write_all(b"GET /healthz HT").unwrap();
    stream.flush().unwrap();
    let mut sent = Vec::new();
    let read = stream.read_to_end(&mut sent).map_err(|e| e.kind());
    (sent, read)
}

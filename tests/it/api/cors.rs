//! CORS: a portal on an allowed origin gets its preflight and the headers it needs to read; any other
//! origin gets none, and without configured origins nothing changes.

use reqwest::{Method, StatusCode};

use super::{App, spawn_app, spawn_app_custom};

const PORTAL: &str = "https://portal.example.com";

async fn preflight(app: &App, origin: &str) -> reqwest::Response {
    app.http
        .request(
            Method::OPTIONS,
            format!("{}/api/v1/tenants/acme/control-planes", app.base),
        )
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, idempotency-key",
        )
        .send()
        .await
        .unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn an_allowed_origin_gets_its_preflight_and_the_exposed_headers_another_gets_nothing() {
    let app = spawn_app_custom(None, Default::default(), |s| {
        s.cors_origins = vec![tenantplane::api::parse_origin(PORTAL).unwrap()];
    })
    .await;
    let ok = preflight(&app, PORTAL).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(header(&ok, "access-control-allow-origin"), Some(PORTAL));
    assert_eq!(
        header(&ok, "access-control-allow-headers"),
        Some("authorization,content-type,if-match,idempotency-key")
    );
    assert_eq!(
        header(&ok, "access-control-allow-methods"),
        Some("GET,POST,PUT,PATCH,DELETE")
    );
    assert_eq!(header(&ok, "access-control-max-age"), Some("600"));
    assert_eq!(header(&ok, "access-control-allow-credentials"), None);

    // A real request from the portal can read the headers it needs; an error is still problem+json.
    let r = app
        .http
        .get(format!("{}/api/v1/tenants/acme", app.base))
        .header("origin", PORTAL)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PORTAL));
    assert_eq!(
        header(&r, "access-control-expose-headers"),
        Some("etag,location,retry-after,www-authenticate,x-request-id")
    );

    // Exact match only: a look-alike, another port or scheme gets no CORS headers.
    for other in [
        "https://portal.example.com.evil.test",
        "https://portal.example.com:8443",
        "http://portal.example.com",
        "https://evil.test",
    ] {
        let r = preflight(&app, other).await;
        assert_eq!(header(&r, "access-control-allow-origin"), None, "{other}");
    }
}

#[tokio::test]
async fn without_configured_origins_there_are_no_cors_headers() {
    let app = spawn_app().await;
    let r = preflight(&app, PORTAL).await;
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    assert_ne!(
        r.status(),
        StatusCode::OK,
        "no preflight handling without origins"
    );
}

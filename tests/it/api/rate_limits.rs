//! Rate limits (issue 20, item 6; per subject and tenant since issue 37): a bucket per token subject and
//! one per tenant, shared by REST requests, GraphQL requests and each GraphQL mutation field (over HTTP
//! and WebSocket), whatever the token; past one a 429 problem document with `Retry-After`, and waiting
//! that long is enough.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{api::limits::RateLimitSettings, domain::Role, service, store};

use super::{App, spawn_app_custom};
use crate::graphql::{Incoming, answer, ws_next, ws_ready, ws_send};

/// One request per second and bursts of three per subject; a tenant's bucket large enough not to matter.
const SLOW: RateLimitSettings = RateLimitSettings {
    per_second: 1,
    burst: 3,
    tenant_per_second: 100,
    tenant_burst: 100,
};

async fn app() -> App {
    app_with(SLOW).await
}

async fn app_with(limits: RateLimitSettings) -> App {
    spawn_app_custom(None, Default::default(), |s| s.rate_limits = limits).await
}

/// A tenant-admin token for `subject` minted in the database (no request charged to anyone).
async fn token(app: &App, slug: &str, subject: &str) -> String {
    let tenant = store::tenants::by_slug(&app.ctx.db, slug).await.unwrap().unwrap();
    service::tokens::mint_unchecked(
        &app.ctx,
        Some(tenant.id),
        Role::TenantAdmin,
        3600,
        subject,
        "tests",
    )
    .await
    .unwrap()
    .token
}

/// The 429 problem of a subject over its bucket, retry in `seconds`.
fn limited(seconds: u64) -> Value {
    json!({
        "type": "https://tenantplane.dev/problems/rate-limited",
        "title": "Too many requests",
        "status": 429,
        "detail": format!("this token's subject made more than 1 requests per second (bursts of 3) with all its tokens; retry in {seconds}s"),
    })
}

/// `n` aliased `revokeToken` mutations (of tokens that do not exist: each is charged all the same).
fn mutations(slug: &str, n: usize) -> Value {
    let fields: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "m{i}: revokeToken(input: {{tenant: \"{slug}\", id: \"{}\"}}) {{ token {{ id }} }}",
                uuid::Uuid::new_v4()
            )
        })
        .collect();
    json!({"query": format!("mutation {{ {} }}", fields.join(" "))})
}

/// Sends ten GETs of `path` with `token` at once (their charges then fall within a moment, however slow
/// each request is); every answer is `otherwise` or a 429, and the first 429 is returned.
async fn first_refusal(app: &App, path: &str, token: &str, otherwise: StatusCode) -> Option<super::Reply> {
    let calls = (0..10).map(|_| app.call(Method::GET, path, Some(token), None));
    let replies = futures::future::join_all(calls).await;
    for r in &replies {
        assert!(
            [otherwise, StatusCode::TOO_MANY_REQUESTS].contains(&r.status),
            "{}: {}",
            r.status,
            r.text
        );
    }
    replies
        .into_iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
}

async fn graphql(app: &App, token: &str, body: &Value) -> crate::graphql::Answer {
    let request = app
        .http
        .post(format!("{}/graphql", app.base))
        .bearer_auth(token)
        .json(body);
    answer(request.send().await.unwrap()).await
}

#[tokio::test]
async fn a_subject_over_its_limit_gets_a_429_problem_with_retry_after_and_others_are_untouched() {
    let app = app().await;
    let slug = app.tenant("rl").await;
    let (busy, quiet) = (
        token(&app, &slug, "busy").await,
        token(&app, &slug, "quiet").await,
    );
    let path = format!("/api/v1/tenants/{slug}");
    // A fresh bucket holds three requests; at one a second, ten more at once run over (sent together,
    // so that slow requests on a loaded machine do not leave the bucket time to refill).
    for _ in 0..3 {
        assert_eq!(
            app.call(Method::GET, &path, Some(&busy), None).await.status,
            StatusCode::OK
        );
    }
    let r = first_refusal(&app, &path, &busy, StatusCode::OK)
        .await
        .expect("a 429 among ten requests at once, at one a second");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.headers["retry-after"], "1");
    assert!(r.headers.contains_key("x-request-id"));
    assert_eq!(r.body, limited(1));
    // Another subject of the same tenant has a bucket of its own.
    assert_eq!(
        app.call(Method::GET, &path, Some(&quiet), None).await.status,
        StatusCode::OK
    );
    // Waiting Retry-After is enough.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        app.call(Method::GET, &path, Some(&busy), None).await.status,
        StatusCode::OK
    );
    // The OpenAPI document (never limited) says so on every secured operation.
    let doc = app.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    let too_many = &doc.body["paths"]["/tenants/{tenant}"]["get"]["responses"]["429"];
    assert!(
        too_many["content"]["application/problem+json"].is_object(),
        "{too_many}"
    );
    assert!(too_many["headers"]["Retry-After"].is_object(), "{too_many}");
}

#[tokio::test]
async fn graphql_mutation_fields_count_one_each_against_the_same_bucket() {
    let app = app().await;
    let slug = app.tenant("rlg").await;
    let (first, second) = (
        token(&app, &slug, "first").await,
        token(&app, &slug, "second").await,
    );
    // Three mutation fields in one request take the whole bucket: the next three are refused (another
    // three would take three seconds to refill), with the same problem as REST.
    let a = graphql(&app, &first, &mutations(&slug, 3)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["errors"].as_array().map(Vec::len), Some(3), "{}", a.text);
    let a = graphql(&app, &first, &mutations(&slug, 3)).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
    assert_eq!(a.content_type, "application/problem+json");
    assert_eq!(a.body["type"], "https://tenantplane.dev/problems/rate-limited");
    // REST requests drain the bucket GraphQL mutations need.
    let path = format!("/api/v1/tenants/{slug}");
    for _ in 0..3 {
        assert_eq!(
            app.call(Method::GET, &path, Some(&second), None).await.status,
            StatusCode::OK
        );
    }
    let a = graphql(&app, &second, &mutations(&slug, 3)).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
    // More mutation fields than a bucket holds can never pass: 422 naming the query, not a 429.
    let fourth = format!(
        "d: revokeToken(input: {{tenant: \"{slug}\", id: \"{}\"}}) {{ token {{ id }} }}",
        uuid::Uuid::new_v4()
    );
    let mut four = mutations(&slug, 3);
    four["query"] = Value::String(
        four["query"]
            .as_str()
            .unwrap()
            .replace(" }", &format!(" {fourth} }}"))
            .replacen(&format!(" {fourth} }}"), " }", 2),
    );
    let third = token(&app, &slug, "third").await;
    let a = graphql(&app, &third, &four).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.text);
    assert_eq!(a.body["errors"][0]["field"], "query", "{}", a.text);
    assert_eq!(
        a.body["errors"][0]["message"],
        "one request may count at most 3 (the smaller of the subject's and the tenant's bursts), and this one counts 4: send its mutations in smaller requests"
    );
}

#[tokio::test]
async fn websocket_operations_are_charged_to_the_connection_token() {
    let app = app().await;
    let slug = app.tenant("rlw").await;
    let token = token(&app, &slug, "ws").await;
    let mut ws = ws_ready(&app, &token).await;
    let doc = mutations(&slug, 3);
    ws_send(&mut ws, json!({"id": "1", "type": "subscribe", "payload": doc})).await;
    ws_send(&mut ws, json!({"id": "2", "type": "subscribe", "payload": doc})).await;
    let mut refusal = None;
    for _ in 0..5 {
        match ws_next(&mut ws, Duration::from_secs(5)).await {
            Incoming::Json(m) if m["id"] == "2" => {
                refusal = Some(m);
                break;
            }
            Incoming::Json(m) => assert_eq!(m["id"], "1", "{m}"),
            closed => panic!("closed: {closed:?}"),
        }
    }
    let refusal = refusal.expect("an answer to operation 2");
    assert_eq!(refusal["type"], "error", "{refusal}");
    assert_eq!(
        refusal["payload"][0]["extensions"]["code"], "RATE_LIMITED",
        "{refusal}"
    );
    let message = refusal["payload"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "this token's subject made more than 1 requests per second (bursts of 3) with all its tokens; retry in "
        ),
        "{message}"
    );
    // The same bucket as HTTP: three more mutations are refused there too.
    let a = graphql(&app, &token, &mutations(&slug, 3)).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
}

#[tokio::test]
async fn minting_more_tokens_adds_no_budget_to_a_subject_or_a_tenant() {
    // Three per subject, four per tenant, one more a second each.
    let app = app_with(RateLimitSettings {
        tenant_burst: 4,
        tenant_per_second: 1,
        ..SLOW
    })
    .await;
    let (slug, other) = (app.tenant("rlm").await, app.tenant("rlm-other").await);
    let path = format!("/api/v1/tenants/{slug}");
    let mut fresh = Vec::new();
    for _ in 0..10 {
        fresh.push(token(&app, &slug, "ci").await);
    }
    // Each request with a token never used before: the subject's bucket empties all the same.
    let mut statuses = Vec::new();
    let mut refusal = None;
    for token in &fresh {
        let r = app.call(Method::GET, &path, Some(token), None).await;
        statuses.push(r.status);
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refusal = Some(r);
            break;
        }
    }
    assert_eq!(statuses[..3], [StatusCode::OK; 3]);
    let r = refusal.expect("a 429 within ten fresh tokens of one subject");
    assert_eq!(r.body, limited(1));
    // Another subject of the tenant: its own bucket holds three, but the tenant's is nearly empty.
    let ops = token(&app, &slug, "ops").await;
    let mut refusal = None;
    for _ in 0..4 {
        let r = app.call(Method::GET, &path, Some(&ops), None).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refusal = Some(r);
            break;
        }
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = refusal.expect("a 429 from the tenant's bucket");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(
        r.body["detail"],
        "this tenant's tokens made more than 1 requests per second (bursts of 4); retry in 1s"
    );
    // Another tenant's subject of the same name is untouched.
    let elsewhere = token(&app, &other, "ci").await;
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{other}"),
            Some(&elsewhere),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn a_bad_token_sent_again_and_again_is_answered_429() {
    let app = app().await;
    let path = "/api/v1/viewer";
    for _ in 0..3 {
        let r = app.call(Method::GET, path, Some("not-a-token"), None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    }
    let r = first_refusal(&app, path, "not-a-token", StatusCode::UNAUTHORIZED)
        .await
        .expect("a 429 among ten more requests at once");
    assert_eq!(
        r.body["detail"],
        "this bearer token was refused more than 1 times per second (bursts of 3); retry in 1s"
    );
}

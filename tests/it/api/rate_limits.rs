//! Per-token rate limits (issue 20, item 6): a bucket per bearer token, shared by REST requests, GraphQL
//! requests and each GraphQL mutation field (over HTTP and WebSocket); past it a 429 problem document
//! with `Retry-After`, and waiting that long is enough.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{api::limits::RateLimitSettings, domain::Role, service, store};

use super::{App, spawn_app_custom};
use crate::graphql::{Incoming, answer, ws_next, ws_ready, ws_send};

/// One request per second, bursts of three.
const SLOW: RateLimitSettings = RateLimitSettings {
    per_second: 1,
    burst: 3,
};

async fn app() -> App {
    spawn_app_custom(None, Default::default(), |s| s.rate_limits = SLOW).await
}

/// A tenant-admin token minted in the database (no request charged to anyone).
async fn token(app: &App, slug: &str) -> String {
    let tenant = store::tenants::by_slug(&app.ctx.db, slug).await.unwrap().unwrap();
    service::tokens::mint_unchecked(&app.ctx, Some(tenant.id), Role::TenantAdmin, 3600, "rl", "tests")
        .await
        .unwrap()
        .token
}

fn limited(detail_seconds: u64) -> Value {
    json!({
        "type": "https://tenantplane.dev/problems/rate-limited",
        "title": "Too many requests",
        "status": 429,
        "detail": format!("this token made more than 1 requests per second (bursts of 3); retry in {detail_seconds}s"),
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

async fn graphql(app: &App, token: &str, body: &Value) -> crate::graphql::Answer {
    let request = app
        .http
        .post(format!("{}/graphql", app.base))
        .bearer_auth(token)
        .json(body);
    answer(request.send().await.unwrap()).await
}

#[tokio::test]
async fn a_token_over_its_limit_gets_a_429_problem_with_retry_after_and_others_are_untouched() {
    let app = app().await;
    let slug = app.tenant("rl").await;
    let (busy, quiet) = (token(&app, &slug).await, token(&app, &slug).await);
    let path = format!("/api/v1/tenants/{slug}");
    // A fresh bucket holds three requests; at one a second, a few more in a row run over.
    for _ in 0..3 {
        assert_eq!(
            app.call(Method::GET, &path, Some(&busy), None).await.status,
            StatusCode::OK
        );
    }
    let mut refused = None;
    for _ in 0..10 {
        let r = app.call(Method::GET, &path, Some(&busy), None).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    let r = refused.expect("a 429 within ten requests at one a second");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.headers["retry-after"], "1");
    assert!(r.headers.contains_key("x-request-id"));
    assert_eq!(r.body, limited(1));
    // Another token of the same tenant has a bucket of its own.
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
    let (first, second) = (token(&app, &slug).await, token(&app, &slug).await);
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
    let third = token(&app, &slug).await;
    let a = graphql(&app, &third, &four).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.text);
    assert_eq!(a.body["errors"][0]["field"], "query", "{}", a.text);
    assert_eq!(
        a.body["errors"][0]["message"],
        "one request may count at most 3 (this token's burst), and this one counts 4: send its mutations in smaller requests"
    );
}

#[tokio::test]
async fn websocket_operations_are_charged_to_the_connection_token() {
    let app = app().await;
    let slug = app.tenant("rlw").await;
    let token = token(&app, &slug).await;
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
        message.starts_with("this token made more than 1 requests per second (bursts of 3); retry in "),
        "{message}"
    );
    // The same bucket as HTTP: three more mutations are refused there too.
    let a = graphql(&app, &token, &mutations(&slug, 3)).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
}

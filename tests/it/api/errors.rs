//! One test per bad-input class: each answers problem+json naming what is wrong, never a 500.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{Reply, spawn_app};

fn assert_problem(r: &Reply, status: StatusCode, title: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["status"], status.as_u16());
    assert_eq!(r.body["title"], title);
    assert!(
        r.body["type"]
            .as_str()
            .unwrap()
            .starts_with("https://tenantplane.dev/problems/")
    );
    assert!(r.body["detail"].is_string());
}

async fn setup() -> (super::App, String, String) {
    let app = spawn_app().await;
    let slug = app.tenant("bad").await;
    let member = app.token(&slug, "tenant-member").await;
    (app, slug, member)
}

#[tokio::test]
async fn unknown_field_is_422_naming_the_field() {
    let (app, slug, member) = setup().await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "a", "kubernetesVersion": "v1.33.2", "colour": "blue"})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "Invalid input");
    assert_eq!(r.body["errors"][0]["field"], "colour");
    assert!(
        r.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("unknown field `colour`"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn wrong_type_is_422_naming_the_nested_field() {
    let (app, slug, member) = setup().await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "a", "kubernetesVersion": "v1.33.2", "addons": {"coreDNS": "yes"}})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "Invalid input");
    assert_eq!(r.body["errors"][0]["field"], "addons.coreDNS");
}

#[tokio::test]
async fn malformed_json_is_400() {
    let (app, slug, member) = setup().await;
    let r = app
        .http
        .post(format!("{}/api/v1/tenants/{slug}/control-planes", app.base))
        .bearer_auth(&member)
        .header("content-type", "application/json")
        .body("{\"name\": \"a\",")
        .send()
        .await
        .unwrap();
    let reply = Reply {
        status: r.status(),
        headers: r.headers().clone(),
        text: String::new(),
        body: r.json().await.unwrap(),
    };
    assert_problem(&reply, StatusCode::BAD_REQUEST, "Malformed JSON");
}

#[tokio::test]
async fn oversized_body_is_413() {
    let (app, slug, member) = setup().await;
    let big = "x".repeat(70 * 1024);
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "a", "kubernetesVersion": "v1.33.2", "labels": {"big": big}})),
        )
        .await;
    assert_problem(&r, StatusCode::PAYLOAD_TOO_LARGE, "Payload too large");
}

#[tokio::test]
async fn non_json_content_type_is_415() {
    let (app, slug, member) = setup().await;
    let r = app
        .http
        .post(format!("{}/api/v1/tenants/{slug}/control-planes", app.base))
        .bearer_auth(&member)
        .body("name=a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn every_invalid_field_is_listed() {
    let (app, slug, member) = setup().await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "Bad_Name", "kubernetesVersion": "v1.29.0", "replicas": 10, "port": 0, "offload": "sometimes",
                        "datastore": {"name": "etcd-1"}})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "Invalid input");
    let fields: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["name", "kubernetesVersion", "replicas", "port", "offload"]
    );
    assert_eq!(
        r.body["errors"][1]["message"],
        "v1.29.0 is outside the supported range v1.30-v1.34"
    );
    assert_eq!(
        r.body["errors"][2]["message"],
        "must be between 0 and 9 (0 puts the control plane to sleep)"
    );
    // A well-formed DataStore choice is a role question, answered once the input is valid: 403.
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "good", "kubernetesVersion": "v1.33.2", "datastore": {"name": "etcd-1"}})),
        )
        .await;
    assert_problem(&r, StatusCode::FORBIDDEN, "Forbidden");
    assert_eq!(
        r.body["detail"],
        "datastore.name: only platform admins may pick a DataStore; give a pool or labels instead"
    );
}

#[tokio::test]
async fn version_without_patch_is_422() {
    let (app, slug, member) = setup().await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "a", "kubernetesVersion": "1.33"})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "Invalid input");
    assert_eq!(
        r.body["errors"],
        json!([{"field": "kubernetesVersion", "message": "\"1.33\" is not a version of the form vMAJOR.MINOR.PATCH, e.g. v1.34.4"}])
    );
}

#[tokio::test]
async fn bad_query_parameters_are_422() {
    let (app, slug, member) = setup().await;
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes?limit=500"),
            Some(&member),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "Invalid input");
    assert_eq!(r.body["errors"][0]["field"], "limit");
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes?cursor=nonsense"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(r.body["errors"][0]["field"], "cursor");
}

#[tokio::test]
async fn internal_errors_carry_only_the_request_id() {
    let (app, slug, member) = setup().await;
    sqlx::query("drop table outbox")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let r = app
        .call_with(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "a", "kubernetesVersion": "v1.33.2"})),
            &[("x-request-id", "req-42")],
        )
        .await;
    assert_problem(&r, StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
    assert_eq!(r.body["requestId"], "req-42");
    assert_eq!(r.headers["x-request-id"], "req-42");
    assert!(
        !r.text.contains("outbox") && !r.text.contains("relation"),
        "the 500 leaks details: {}",
        r.text
    );
    let count: i64 = sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(count, 0, "the failed create was not rolled back");
}

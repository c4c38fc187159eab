//! Per-tenant quotas: defaults, what a platform admin sets, the exact problem when one is reached, and
//! parallel creates that cannot overshoot.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, spawn_app};

async fn put_quotas(app: &App, slug: &str, body: Value) -> super::Reply {
    app.call(
        Method::PUT,
        &format!("/api/v1/tenants/{slug}/quotas"),
        Some(&app.admin),
        Some(body),
    )
    .await
}

async fn create(app: &App, slug: &str, token: &str, name: &str) -> super::Reply {
    app.call(
        Method::POST,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        Some(token),
        Some(json!({"name": name, "kubernetesVersion": "v1.33.2"})),
    )
    .await
}

fn quota_exceeded(quota: &str, limit: i64) -> Value {
    let detail = format!(
        "the tenant has reached its quota of {limit} {quota}: remove one, or ask a platform admin to raise it"
    );
    json!({"type": "https://tenantplane.dev/problems/quota-exceeded", "title": "Quota exceeded", "status": 403,
           "detail": detail, "errors": [{"field": quota, "message": detail}]})
}

/// The problem without its request id.
fn problem(r: &super::Reply) -> Value {
    let mut body = r.body.clone();
    body.as_object_mut().unwrap().remove("requestId");
    body
}

#[tokio::test]
async fn the_control_plane_quota_stops_the_next_create_with_quota_exceeded_until_one_is_gone() {
    let app = spawn_app().await;
    let slug = app.tenant("quota").await;
    let member = app.token(&slug, "tenant-member").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/quotas"),
            Some(&viewer),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let live: i64 = sqlx::query_scalar(
        "select count(*) from api_tokens where revoked_at is null and tenant_id is not null",
    )
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(
        r.body,
        json!({"controlPlanes": {"limit": 50, "used": 0, "default": true},
               "tokens": {"limit": 100, "used": live, "default": true}})
    );

    let set = put_quotas(&app, &slug, json!({"controlPlanes": 2})).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    assert_eq!(
        set.body["controlPlanes"],
        json!({"limit": 2, "used": 0, "default": false})
    );
    let mut ids = Vec::new();
    for name in ["one", "two"] {
        let r = create(&app, &slug, &member, name).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        ids.push(r.body["controlPlane"]["id"].as_str().unwrap().to_string());
    }
    let refused = create(&app, &slug, &member, "three").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    assert_eq!(problem(&refused), quota_exceeded("controlPlanes", 2));
    let rows: i64 = sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(rows, 2, "a refused create records nothing");

    // Being deleted still counts; gone does not.
    let admin = app.token(&slug, "tenant-admin").await;
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/control-planes/{}", ids[0]),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        create(&app, &slug, &member, "three").await.status,
        StatusCode::FORBIDDEN
    );
    sqlx::query("update control_planes set deleted_at = now(), phase = 'Deleted' where id = $1::uuid")
        .bind(&ids[0])
        .execute(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(
        create(&app, &slug, &member, "three").await.status,
        StatusCode::ACCEPTED
    );

    // Back to the default.
    let reset = put_quotas(&app, &slug, json!({})).await;
    assert_eq!(
        reset.body["controlPlanes"],
        json!({"limit": 50, "used": 2, "default": true})
    );
}

#[tokio::test]
async fn parallel_creates_never_overshoot_the_quota() {
    let app = spawn_app().await;
    let slug = app.tenant("quotapar").await;
    let member = app.token(&slug, "tenant-member").await;
    assert_eq!(
        put_quotas(&app, &slug, json!({"controlPlanes": 3})).await.status,
        StatusCode::OK
    );
    let names: Vec<String> = (0..8).map(|i| format!("cp-{i}")).collect();
    let answers = futures::future::join_all(names.iter().map(|n| create(&app, &slug, &member, n))).await;
    let mut statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [202, 202, 202, 403, 403, 403, 403, 403]);
}

#[tokio::test]
async fn the_token_quota_counts_live_tokens_only() {
    let app = spawn_app().await;
    let slug = app.tenant("quotatok").await;
    let admin = app.token(&slug, "tenant-admin").await;
    // Room for exactly one more.
    let used = put_quotas(&app, &slug, json!({})).await.body["tokens"]["used"]
        .as_i64()
        .unwrap();
    assert_eq!(
        put_quotas(&app, &slug, json!({"tokens": used + 1})).await.status,
        StatusCode::OK
    );
    let mint = || async {
        app.call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/tokens"),
            Some(&admin),
            Some(json!({"role": "tenant-viewer"})),
        )
        .await
    };
    let second = mint().await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.text);
    let refused = mint().await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert_eq!(problem(&refused), quota_exceeded("tokens", used + 1));
    // A revoked token does not count.
    let id = second.body["record"]["id"].as_str().unwrap();
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/tokens/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    assert_eq!(mint().await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn quotas_outside_their_range_are_422_naming_the_field_and_tenants_cannot_set_them() {
    let app = spawn_app().await;
    let slug = app.tenant("quotabad").await;
    let r = put_quotas(&app, &slug, json!({"controlPlanes": -1, "tokens": 100001})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(
        r.body["errors"],
        json!([{"field": "controlPlanes", "message": "must be between 0 and 100000"},
               {"field": "tokens", "message": "must be between 0 and 100000"}])
    );
    let admin = app.token(&slug, "tenant-admin").await;
    let r = app
        .call(
            Method::PUT,
            &format!("/api/v1/tenants/{slug}/quotas"),
            Some(&admin),
            Some(json!({"controlPlanes": 1000})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(r.body["type"], "https://tenantplane.dev/problems/forbidden");
}

#[tokio::test]
async fn a_graphql_create_at_the_quota_is_a_quota_exceeded_user_error() {
    let app = spawn_app().await;
    let slug = app.tenant("quotagql").await;
    let member = app.token(&slug, "tenant-member").await;
    assert_eq!(
        put_quotas(&app, &slug, json!({"controlPlanes": 0})).await.status,
        StatusCode::OK
    );
    let data = crate::graphql::data(
        &app,
        &member,
        r#"mutation($t: String!) { createControlPlane(input: {tenant: $t, name: "prod", kubernetesVersion: "v1.33.2"}) {
             controlPlane { name } userErrors { field code message } } }"#,
        json!({"t": slug}),
    )
    .await;
    assert_eq!(
        data["createControlPlane"],
        json!({"controlPlane": null, "userErrors": [{"field": "controlPlanes", "code": "QUOTA_EXCEEDED",
               "message": "the tenant has reached its quota of 0 controlPlanes: remove one, or ask a platform admin to raise it"}]})
    );
}

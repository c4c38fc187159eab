//! Inputs the cluster can never accept are refused with 422 naming the field (issue 17, item 7), never
//! accepted into an operation that "succeeds" while the control plane stays Provisioning forever.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, Reply, spawn_app};

/// The exact problem document of one invalid field.
fn assert_invalid(r: &Reply, field: &str, message: &str) {
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["status"], 422);
    assert_eq!(r.body["title"], "Invalid input");
    assert_eq!(
        r.body["errors"],
        json!([{"field": field, "message": message}]),
        "{}",
        r.text
    );
}

async fn create(app: &App, slug: &str, token: &str, body: Value) -> Reply {
    app.call(
        Method::POST,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        Some(token),
        Some(body),
    )
    .await
}

async fn count(app: &App) -> i64 {
    sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_name_starting_with_a_digit_is_422_on_name() {
    let app = spawn_app().await;
    let slug = app.tenant("dns").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "1prod", "kubernetesVersion": "v1.33.2"}),
    )
    .await;
    assert_invalid(
        &r,
        "name",
        "must be a DNS-1035 label: 1-63 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit (it names the control plane's Service)",
    );
    assert_eq!(count(&app).await, 0, "nothing was recorded");
    let ok = create(
        &app,
        &slug,
        &member,
        json!({"name": "prod1", "kubernetesVersion": "v1.33.2"}),
    )
    .await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.text);
}

#[tokio::test]
async fn a_node_port_outside_the_range_is_422_on_port() {
    let app = spawn_app().await;
    let slug = app.tenant("np").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "np", "kubernetesVersion": "v1.33.2", "serviceType": "NodePort"}),
    )
    .await;
    assert_invalid(
        &r,
        "port",
        "6443 is outside the cluster's NodePort range 30000-32767: a NodePort control plane serves on its node port, so pick a port in that range",
    );
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "np", "kubernetesVersion": "v1.33.2", "serviceType": "NodePort", "port": 32768}),
    )
    .await;
    assert_eq!(r.body["errors"][0]["field"], "port", "{}", r.text);
    // The same port is fine for a ClusterIP control plane.
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "cip", "kubernetesVersion": "v1.33.2", "port": 6443}),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[tokio::test]
async fn a_port_taken_inside_the_control_plane_pod_is_422_on_port() {
    let app = spawn_app().await;
    let slug = app.tenant("podport").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "sched", "kubernetesVersion": "v1.33.2", "port": 10259}),
    )
    .await;
    assert_invalid(
        &r,
        "port",
        "10259 is taken in the control-plane pod: kube-controller-manager and kube-scheduler listen on 10257 and 10259; pick another port",
    );
    let with_konnectivity = |port: i32| json!({"name": "konn", "kubernetesVersion": "v1.33.2", "port": port, "addons": {"konnectivity": true}});
    let r = create(&app, &slug, &member, with_konnectivity(8132)).await;
    assert_invalid(
        &r,
        "port",
        "8132 is taken in the control-plane pod: the konnectivity-server sidecar listens on 8132, 8133 and 8134; pick another port",
    );
    assert_eq!(count(&app).await, 0, "nothing was recorded");
    // Without Konnectivity the sidecar's ports are free.
    let r = create(
        &app,
        &slug,
        &member,
        json!({"name": "konn", "kubernetesVersion": "v1.33.2", "port": 8132}),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[tokio::test]
async fn a_node_port_taken_by_another_live_control_plane_is_409_on_port() {
    let app = spawn_app().await;
    let a = app.tenant("npa").await;
    let b = app.tenant("npb").await;
    let member_a = app.token(&a, "tenant-member").await;
    let admin_a = app.token(&a, "tenant-admin").await;
    let member_b = app.token(&b, "tenant-member").await;
    let body = |name: &str| json!({"name": name, "kubernetesVersion": "v1.33.2", "serviceType": "NodePort", "port": 30443});
    let first = create(&app, &a, &member_a, body("first")).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    // Node ports are cluster-wide: another tenant cannot take it either.
    let r = create(&app, &b, &member_b, body("second")).await;
    // Well-formed, but taken: a conflict with the current state, naming the field.
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], "https://tenantplane.dev/problems/conflict");
    assert_eq!(
        r.body["errors"],
        json!([{"field": "port", "message": "NodePort 30443 is already taken by another control plane: node ports are unique in the cluster"}])
    );
    assert_eq!(count(&app).await, 1);
    // Once the first is deleted (gone from the cluster), the port is free again.
    let id = first.body["controlPlane"]["id"].as_str().unwrap();
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{a}/control-planes/{id}"),
            Some(&admin_a),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let r = create(&app, &b, &member_b, body("second")).await;
    assert_eq!(
        r.status,
        StatusCode::CONFLICT,
        "still held while deleting: {}",
        r.text
    );
    sqlx::query("update control_planes set deleted_at = now(), phase = 'Deleted' where id = $1::uuid")
        .bind(id)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let r = create(&app, &b, &member_b, body("second")).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

#[tokio::test]
async fn a_slug_whose_namespace_exceeds_63_characters_is_422_on_slug() {
    let app = spawn_app().await;
    let long = format!("s{}", "x".repeat(60));
    let r = app
        .call(
            Method::POST,
            "/api/v1/tenants",
            Some(&app.admin),
            Some(json!({"slug": long, "displayName": "long"})),
        )
        .await;
    assert_invalid(
        &r,
        "slug",
        &format!(
            "is too long: the tenant's namespace \"tp-{long}\" (from the namespace template \"tp-{{tenant}}\") would have 64 characters, and Kubernetes allows at most 63; use a slug of at most 60 characters"
        ),
    );
    let fits = "s".repeat(60);
    let r = app
        .call(
            Method::POST,
            "/api/v1/tenants",
            Some(&app.admin),
            Some(json!({"slug": fits, "displayName": "fits"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn a_datastore_secret_reference_the_cluster_cannot_resolve_is_422_naming_the_part() {
    let app = spawn_app().await;
    let reference = |name: &str, namespace: &str, key: &str| json!({"name": name, "namespace": namespace, "keyPath": key});
    let r = app
        .call(
            Method::POST,
            "/api/v1/datastores",
            Some(&app.admin),
            Some(json!({"name": "pg-bad-refs", "driver": "PostgreSQL", "endpoints": ["db:5432"], "capacityTenants": 10,
                        "secrets": {"username": reference("pg_creds", "kamaji-system", "user"),
                                    "password": reference("pg-creds", "Kamaji", "pass word")}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let fields: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "secrets.username.name",
            "secrets.password.namespace",
            "secrets.password.keyPath"
        ]
    );
    assert_eq!(
        r.body["errors"][2]["message"],
        "must be a Secret key: 1-253 letters, digits, '-', '_' or '.'"
    );
}

//! The GraphQL side of live migrations, drains and rebalances (issue 21): the REST checks, refused as user
//! errors naming the field, and the parent operation with its children.

use reqwest::Method;
use serde_json::{Value, json};
use tenantplane::{placement::PlacementConfig, service::drive::drive};

use super::{control_plane_gid, data, gql};
use crate::api::{App, spawn_app};

async fn rest(app: &App, path: &str, body: Value) -> Value {
    let r = app.call(Method::POST, path, Some(&app.admin), Some(body)).await;
    assert!(r.status.is_success(), "{path}: {}", r.text);
    r.body
}

/// A spread pool `p` with DataStore `p-a` holding control plane `cp` of a new tenant, then `p-b`; returns
/// (tenant slug, control plane id).
async fn setup(app: &App, p: &str) -> (String, String) {
    rest(app, "/api/v1/pools", json!({"name": p})).await;
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let secrets = json!({"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")});
    let ds = |name: String| json!({"name": name, "pool": p, "driver": "etcd", "endpoints": ["x:2379"], "capacityTenants": 10, "secrets": secrets, "caId": "ca-g"});
    rest(app, "/api/v1/datastores", ds(format!("{p}-a"))).await;
    let slug = app.tenant("gql-drain").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&admin),
            Some(json!({"name": "cp", "kubernetesVersion": "v1.34.1", "datastore": {"pool": p}})),
        )
        .await;
    sqlx::query("update operations set state = 'succeeded' where id = $1::uuid")
        .bind(r.body["operation"]["id"].as_str().unwrap())
        .execute(&app.ctx.db)
        .await
        .unwrap();
    rest(app, "/api/v1/datastores", ds(format!("{p}-b"))).await;
    (slug, r.body["controlPlane"]["id"].as_str().unwrap().to_string())
}

const MIGRATE: &str = "mutation($id: ID!, $target: String!, $overrides: OverridesPolicy) {
  migrateControlPlane(input: {id: $id, target: $target, overrides: $overrides}) {
    operation { id kind state stage reason } userErrors { field message code } } }";

const ABORT: &str = "mutation($id: ID!) { abortMigration(input: {id: $id}) {
    operation { id kind state reason } userErrors { field message code } } }";

const DRAIN: &str = "mutation($name: String!, $concurrency: Int) {
  drainDataStore(input: {name: $name, concurrency: $concurrency}) {
    operation { id kind subject state concurrency counts { pending running succeeded failed }
                children { tenant controlPlane controlPlaneId usage from to state stage operationId operationKind reason } }
    userErrors { field message code } } }";

const REBALANCE: &str = "mutation($name: String!, $concurrency: Int) {
  rebalancePool(input: {name: $name, concurrency: $concurrency}) {
    operation { id kind subject state children { from to } } userErrors { field message code } } }";

#[tokio::test]
async fn migrate_abort_drain_and_rebalance_answer_as_rest_does() {
    let app = spawn_app().await;
    let p = crate::support::unique("gd");
    let (slug, cp) = setup(&app, &p).await;
    let gid = control_plane_gid(&slug, &cp);
    let (a, b) = (format!("{p}-a"), format!("{p}-b"));

    let refused = data(&app, &app.admin, MIGRATE, json!({"id": gid, "target": "no-such"})).await;
    assert_eq!(
        refused["migrateControlPlane"],
        json!({"operation": null, "userErrors": [{"field": "target", "message": "there is no DataStore named no-such", "code": "INVALID"}]})
    );
    let started = data(
        &app,
        &app.admin,
        MIGRATE,
        json!({"id": gid, "target": b, "overrides": "MOVE"}),
    )
    .await;
    let op = &started["migrateControlPlane"]["operation"];
    assert_eq!(
        (&op["kind"], &op["state"], &op["stage"]),
        (&json!("MIGRATE"), &json!("PENDING"), &json!("PLACED")),
        "{started}"
    );
    let again = data(&app, &app.admin, MIGRATE, json!({"id": gid, "target": b})).await;
    assert_eq!(again["migrateControlPlane"]["userErrors"][0]["code"], "CONFLICT");
    assert_eq!(again["migrateControlPlane"]["userErrors"][0]["field"], "target");

    let aborted = data(&app, &app.admin, ABORT, json!({"id": gid})).await;
    let op = &aborted["abortMigration"]["operation"];
    assert_eq!(
        (&op["state"], &op["reason"]),
        (&json!("FAILED"), &json!("MigrationAborted")),
        "{aborted}"
    );
    let nothing = data(&app, &app.admin, ABORT, json!({"id": gid})).await;
    assert_eq!(
        nothing["abortMigration"]["userErrors"],
        json!([{"field": null, "message": "the control plane has no open migration to abort", "code": "CONFLICT"}])
    );

    let bad = data(&app, &app.admin, DRAIN, json!({"name": a, "concurrency": 0})).await;
    assert_eq!(
        bad["drainDataStore"]["userErrors"],
        json!([{"field": "concurrency", "message": "must be between 1 and 10", "code": "INVALID"}])
    );
    let missing = gql(&app, Some(&app.admin), DRAIN, json!({"name": "no-such"})).await;
    assert_eq!(
        missing.body["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{}",
        missing.text
    );
    let drained = data(&app, &app.admin, DRAIN, json!({"name": a, "concurrency": 1})).await;
    let op = drained["drainDataStore"]["operation"].clone();
    assert_eq!(
        (
            &op["kind"],
            &op["subject"],
            &op["state"],
            &op["concurrency"],
            &op["counts"]
        ),
        (
            &json!("DRAIN"),
            &json!(a),
            &json!("RUNNING"),
            &json!(1),
            &json!({"pending": 1, "running": 0, "succeeded": 0, "failed": 0})
        )
    );
    assert_eq!(
        op["children"],
        json!([{"tenant": slug, "controlPlane": "cp", "controlPlaneId": cp, "usage": "PRIMARY", "from": a, "to": b,
                "state": "PENDING", "stage": null, "operationId": null, "operationKind": null, "reason": null}])
    );
    let second = data(&app, &app.admin, DRAIN, json!({"name": a})).await;
    assert_eq!(second["drainDataStore"]["userErrors"][0]["field"], "name");
    assert_eq!(second["drainDataStore"]["userErrors"][0]["code"], "CONFLICT");

    assert_eq!(drive(&app.ctx.db, &PlacementConfig::default()).await.unwrap(), 1);
    let read = data(
        &app,
        &app.admin,
        "query($id: UUID!) { parentOperation(id: $id) { id state counts { running } children { state stage operationKind operationId } } }",
        json!({"id": op["id"]}),
    )
    .await;
    let parent = &read["parentOperation"];
    assert_eq!(
        (&parent["id"], &parent["state"], &parent["counts"]["running"]),
        (&op["id"], &json!("RUNNING"), &json!(1))
    );
    let child = &parent["children"][0];
    assert_eq!(
        (&child["state"], &child["stage"], &child["operationKind"]),
        (&json!("RUNNING"), &json!("PLACED"), &json!("MIGRATE"))
    );
    assert!(child["operationId"].is_string(), "{read}");
    let unknown = gql(
        &app,
        Some(&app.admin),
        "{ parentOperation(id: \"00000000-0000-0000-0000-000000000009\") { id } }",
        json!({}),
    )
    .await;
    assert_eq!(
        unknown.body["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{}",
        unknown.text
    );

    let balanced = data(&app, &app.admin, REBALANCE, json!({"name": p})).await;
    let op = &balanced["rebalancePool"]["operation"];
    assert_eq!(
        (&op["kind"], &op["state"], &op["children"]),
        (&json!("REBALANCE"), &json!("SUCCEEDED"), &json!([])),
        "{balanced}"
    );
    let bad = data(&app, &app.admin, REBALANCE, json!({"name": p, "concurrency": 11})).await;
    assert_eq!(bad["rebalancePool"]["userErrors"][0]["field"], "concurrency");
}

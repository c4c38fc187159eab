//! `POST …/control-planes/{id}/migrate`: platform admins only, and every target the controller could
//! never move to is refused with a problem naming the field; an accepted migration is a `migrate`
//! operation and blocks a second one.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, Reply, spawn_app};

async fn post(app: &App, path: &str, token: &str, body: Value) -> Reply {
    app.call(Method::POST, path, Some(token), Some(body)).await
}

async fn datastore(app: &App, name: &str, pool: &str, driver: &str) {
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let secrets = if driver == "etcd" {
        json!({"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")})
    } else {
        json!({"username": r("user"), "password": r("password")})
    };
    let body = json!({"name": name, "pool": pool, "driver": driver, "endpoints": [format!("{name}:2379")],
                      "capacityTenants": 10, "secrets": secrets, "caId": "ca-mv"});
    let reply = post(app, "/api/v1/datastores", &app.admin, body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

/// The override policy recorded for the migration that reply `r` started.
async fn overrides_policy(app: &App, r: &Reply) -> String {
    let operation: uuid::Uuid = r.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    sqlx::query_scalar("select overrides_policy from migrations where operation_id = $1")
        .bind(operation)
        .fetch_one(&app.ctx.db)
        .await
        .unwrap()
}

/// The problem's first field error, as (status, field, message).
fn refusal(r: &Reply) -> (StatusCode, String, String) {
    let error = &r.body["errors"][0];
    (
        r.status,
        error["field"].as_str().unwrap_or_default().to_string(),
        error["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn migrate_refuses_what_cannot_move_and_records_one_migrate_operation() {
    let app = spawn_app().await;
    let pool = super::super::support::unique("mv");
    let r = post(&app, "/api/v1/pools", &app.admin, json!({"name": pool})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let (a, b, pg) = (format!("{pool}-a"), format!("{pool}-b"), format!("{pool}-pg"));
    datastore(&app, &a, &pool, "etcd").await;
    let slug = app.tenant("mover").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = post(
        &app,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        &admin,
        json!({"name": "moving", "kubernetesVersion": "v1.34.1", "datastore": {"pool": pool}}),
    )
    .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.text);
    // No worker runs here: the create is marked done, as the worker does once the TCP is Ready.
    let op: uuid::Uuid = created.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    sqlx::query("update operations set state = 'succeeded' where id = $1")
        .bind(op)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    datastore(&app, &b, &pool, "etcd").await;
    datastore(&app, &pg, &pool, "PostgreSQL").await;
    let path = format!("/api/v1/tenants/{slug}/control-planes/moving/migrate");

    let r = post(&app, &path, &admin, json!({"target": b})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a tenant admin: {}", r.text);
    let cases = [
        (
            json!({"target": "no-such"}),
            "target",
            "there is no DataStore named no-such",
        ),
        (
            json!({"target": a}),
            "target",
            "is already the control plane's DataStore",
        ),
        (
            json!({"target": pg}),
            "target",
            "etcd ↔ SQL migration is not supported",
        ),
        (json!({"target": "Not A Name"}), "target", ""),
    ];
    for (body, field, message) in cases {
        let r = post(&app, &path, &app.admin, body.clone()).await;
        let (status, got_field, got_message) = refusal(&r);
        assert_eq!(
            (status, got_field.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, field),
            "{body}: {}",
            r.text
        );
        assert!(got_message.contains(message), "{body}: {}", r.text);
        assert_eq!(r.headers["content-type"], "application/problem+json", "{body}");
    }

    // `move` is accepted: this control plane has no overrides, so nothing is carried.
    let r = post(&app, &path, &app.admin, json!({"target": b, "overrides": "move"})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.body["operation"]["kind"], "migrate", "{}", r.text);
    assert_eq!(overrides_policy(&app, &r).await, "move");
    let again = post(&app, &path, &app.admin, json!({"target": b})).await;
    let (status, field, message) = refusal(&again);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::CONFLICT, "target"),
        "{}",
        again.text
    );
    assert!(message.contains("open migrate operation"), "{}", again.text);

    // A DataStore a migration moves to cannot be deleted while it runs (409 naming the control plane);
    // once the migration has ended, its record does not hold the DataStore back.
    let target = app
        .call(
            Method::DELETE,
            &format!("/api/v1/datastores/{b}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(target.status, StatusCode::CONFLICT, "{}", target.text);
    assert!(
        target.text.contains("live migration of moving"),
        "{}",
        target.text
    );
    let migration: uuid::Uuid = r.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    sqlx::query("update migrations set open = false, finished_at = now() where operation_id = $1")
        .bind(migration)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let target = app
        .call(
            Method::DELETE,
            &format!("/api/v1/datastores/{b}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert!(target.status.is_success(), "{}", target.text);
}

/// kine DataStores move to a DataStore of their own driver: PostgreSQL → MySQL is refused with 422
/// naming `target` (no operation recorded), PostgreSQL → PostgreSQL answers 202 with a `migrate`
/// operation.
#[tokio::test]
async fn migrate_moves_kine_between_datastores_of_one_driver_only() {
    let app = spawn_app().await;
    let pool = super::super::support::unique("mvk");
    let r = post(&app, "/api/v1/pools", &app.admin, json!({"name": pool})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let (a, b, c) = (format!("{pool}-a"), format!("{pool}-b"), format!("{pool}-c"));
    datastore(&app, &a, &pool, "PostgreSQL").await;
    let slug = app.tenant("kinemover").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = post(
        &app,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        &admin,
        json!({"name": "on-kine", "kubernetesVersion": "v1.34.1", "datastore": {"pool": pool}}),
    )
    .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.text);
    let op: uuid::Uuid = created.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    sqlx::query("update operations set state = 'succeeded' where id = $1")
        .bind(op)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    datastore(&app, &b, &pool, "PostgreSQL").await;
    datastore(&app, &c, &pool, "MySQL").await;
    let path = format!("/api/v1/tenants/{slug}/control-planes/on-kine/migrate");
    let migrations = || async {
        let (n,): (i64,) = sqlx::query_as(
            "select count(*) from operations o join control_planes c on c.id = o.control_plane_id \
             where c.name = 'on-kine' and o.kind = 'migrate'",
        )
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
        n
    };

    let r = post(&app, &path, &app.admin, json!({"target": c})).await;
    let (status, field, message) = refusal(&r);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "target"),
        "{}",
        r.text
    );
    assert_eq!(
        message,
        "PostgreSQL → MySQL migration is not supported: the target must use the source's driver (PostgreSQL)"
    );
    assert_eq!(migrations().await, 0, "a refused migration records no operation");

    let r = post(&app, &path, &app.admin, json!({"target": b})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.body["operation"]["kind"], "migrate", "{}", r.text);
    assert_eq!(migrations().await, 1);
}

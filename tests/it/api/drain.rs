//! Drains, rebalances, the PATCH that migrates, and aborts, on real PostgreSQL (issue 21). No worker or
//! cluster runs here: a test drives the open parents as the worker does (`service::drive::drive`, also
//! two at once) and ends child operations as the worker does when the controller reports.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{
    placement::PlacementConfig,
    service::drive::drive,
    store::{self, operations::End},
};
use uuid::Uuid;

use super::{App, Reply, spawn_app};

async fn post(app: &App, path: &str, token: &str, body: Option<Value>) -> Reply {
    app.call(Method::POST, path, Some(token), body).await
}

async fn pool(app: &App, name: &str, policy: &str) {
    let r = post(
        app,
        "/api/v1/pools",
        &app.admin,
        Some(json!({"name": name, "policy": policy})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

async fn datastore(app: &App, name: &str, pool: &str, driver: &str, capacity: i32) {
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let secrets = if driver == "etcd" {
        json!({"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")})
    } else {
        json!({"username": r("user"), "password": r("password")})
    };
    let body = json!({"name": name, "pool": pool, "driver": driver, "endpoints": [format!("{name}:2379")],
                      "capacityTenants": capacity, "secrets": secrets, "caId": "ca-drain"});
    let reply = post(app, "/api/v1/datastores", &app.admin, Some(body)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

/// Creates control plane `name` in tenant `slug` with `extra` fields, and marks its create done (as the
/// worker does once it is Ready); returns its id.
async fn control_plane(app: &App, slug: &str, name: &str, extra: Value) -> Uuid {
    let admin = app.token(slug, "tenant-admin").await;
    let mut body = json!({"name": name, "kubernetesVersion": "v1.34.1"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = post(
        app,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        &admin,
        Some(body),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let op: Uuid = r.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    sqlx::query("update operations set state = 'succeeded' where id = $1")
        .bind(op)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    r.body["controlPlane"]["id"].as_str().unwrap().parse().unwrap()
}

/// One worker pass over the open drains and rebalances; returns how many children it started.
async fn pass(app: &App) -> usize {
    drive(&app.ctx.db, &PlacementConfig::default()).await.unwrap()
}

async fn parent(app: &App, id: &str) -> Value {
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/operations/{id}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.body
}

fn counts(op: &Value) -> [i64; 4] {
    ["pending", "running", "succeeded", "failed"].map(|k| op["counts"][k].as_i64().unwrap())
}

/// The child of `op` for control plane `cp`.
fn child(op: &Value, cp: Uuid) -> &Value {
    op["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["controlPlaneId"] == cp.to_string())
        .unwrap_or_else(|| panic!("no child for {cp}: {op:#}"))
}

/// Ends control plane `cp`'s migration as the worker does on `Done` (placement moves) or on `Failed`.
async fn end_migration(app: &App, cp: Uuid, op: &str, done: bool) {
    let op: Uuid = op.parse().unwrap();
    let mut tx = app.ctx.db.begin().await.unwrap();
    if done {
        store::migrations::complete(&mut tx, cp).await.unwrap();
        store::operations::end(&mut tx, op, End::Succeeded("done"))
            .await
            .unwrap();
    } else {
        store::migrations::release(&mut tx, cp).await.unwrap();
        store::operations::end(&mut tx, op, End::Failed("MigrationFailed", "target unreachable"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
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

async fn audited(app: &App, action: &str, target: &str) -> i64 {
    sqlx::query_scalar("select count(*) from audit_log where action = $1 and target_id = $2")
        .bind(action)
        .bind(target)
        .fetch_one(&app.ctx.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_drain_cordons_then_migrates_at_most_concurrency_at_once_and_fails_naming_a_failed_child() {
    let app = spawn_app().await;
    let p = super::super::support::unique("dr");
    pool(&app, &p, "spread").await;
    let (a, b, c) = (format!("{p}-a"), format!("{p}-b"), format!("{p}-c"));
    datastore(&app, &a, &p, "etcd", 10).await;
    let slug = app.tenant("drained").await;
    let mut cps = Vec::new();
    for name in ["one", "two", "three"] {
        cps.push(control_plane(&app, &slug, name, json!({"datastore": {"pool": p}})).await);
    }
    datastore(&app, &b, &p, "etcd", 10).await;
    datastore(&app, &c, &p, "etcd", 10).await;
    let path = format!("/api/v1/datastores/{a}/drain");

    let tenant_admin = app.token(&slug, "tenant-admin").await;
    let r = post(&app, &path, &tenant_admin, Some(json!({"concurrency": 2}))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = post(&app, "/api/v1/datastores/no-such/drain", &app.admin, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    for (body, field) in [
        (json!({"concurrency": 0}), "concurrency"),
        (json!({"concurrency": 11}), "concurrency"),
        (json!({"overrides": "move"}), "overrides"),
        (json!({"concurrency": 2, "what": 1}), "what"),
    ] {
        let r = post(&app, &path, &app.admin, Some(body.clone())).await;
        let (status, got, _) = refusal(&r);
        assert_eq!(
            (status, got.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, field),
            "{body}: {}",
            r.text
        );
    }
    let ds = app
        .call(
            Method::GET,
            &format!("/api/v1/datastores/{a}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(ds.body["cordoned"], false, "a refused drain cordons nothing");

    let r = post(&app, &path, &app.admin, Some(json!({"concurrency": 2}))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(r.headers["location"], format!("/api/v1/operations/{id}").as_str());
    assert_eq!(
        (
            &r.body["kind"],
            &r.body["subject"],
            &r.body["state"],
            &r.body["concurrency"]
        ),
        (&json!("drain"), &json!(a), &json!("running"), &json!(2))
    );
    assert_eq!(counts(&r.body), [3, 0, 0, 0], "{:#}", r.body);
    for cp in &cps {
        let ch = child(&r.body, *cp);
        assert_eq!(
            (&ch["usage"], &ch["from"], &ch["state"]),
            (&json!("primary"), &json!(a), &json!("pending"))
        );
        assert!(
            [&b, &c].contains(&&ch["to"].as_str().unwrap().to_string()),
            "{ch}"
        );
    }
    let ds = app
        .call(
            Method::GET,
            &format!("/api/v1/datastores/{a}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(ds.body["cordoned"], true, "a drain cordons first");
    assert_eq!(audited(&app, "datastore.cordon", &a).await, 1);
    assert_eq!(audited(&app, "datastore.drain", &a).await, 1);
    let again = post(&app, &path, &app.admin, None).await;
    let (status, field, message) = refusal(&again);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::CONFLICT, "name"),
        "{}",
        again.text
    );
    assert!(message.contains(&a) && message.contains(&id), "{}", again.text);

    // Two workers at once start two children, not four: the parent's row lock.
    let (x, y) = tokio::join!(pass(&app), pass(&app));
    assert_eq!(x + y, 2);
    assert_eq!(pass(&app).await, 0, "no third child while two run");
    let op = parent(&app, &id).await;
    assert_eq!(counts(&op), [1, 2, 0, 0], "{op:#}");
    let running: Vec<(Uuid, String)> = cps
        .iter()
        .filter(|cp| child(&op, **cp)["state"] == "running")
        .map(|cp| (*cp, child(&op, *cp)["operationId"].as_str().unwrap().to_string()))
        .collect();
    for (_, opid) in &running {
        let tenant_op = app
            .call(
                Method::GET,
                &format!("/api/v1/tenants/{slug}/operations/{opid}"),
                Some(&tenant_admin),
                None,
            )
            .await;
        assert_eq!(
            (&tenant_op.body["kind"], &tenant_op.body["stage"]),
            (&json!("migrate"), &json!("placed"))
        );
    }
    assert_eq!(child(&op, running[0].0)["operationKind"], "migrate");

    // One succeeds: the third starts; the other fails, and so does the drain, naming it.
    end_migration(&app, running[0].0, &running[0].1, true).await;
    assert_eq!(pass(&app).await, 1);
    let op = parent(&app, &id).await;
    assert_eq!(counts(&op), [0, 2, 1, 0], "{op:#}");
    end_migration(&app, running[1].0, &running[1].1, false).await;
    let third = cps
        .iter()
        .find(|cp| !running.iter().any(|(r, _)| r == *cp))
        .copied()
        .unwrap();
    let third_op = child(&op, third)["operationId"].as_str().unwrap().to_string();
    end_migration(&app, third, &third_op, true).await;
    assert_eq!(pass(&app).await, 0);
    let op = parent(&app, &id).await;
    assert_eq!(counts(&op), [0, 0, 2, 1], "{op:#}");
    assert_eq!(
        (&op["state"], &op["done"], &op["reason"]),
        (&json!("failed"), &json!(true), &json!("ChildrenFailed"))
    );
    let error = op["error"].as_str().unwrap();
    let failed_name = child(&op, running[1].0)["controlPlane"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.starts_with("1 of 3 children failed: "), "{error}");
    assert!(
        error.contains(&format!(
            "{slug}/{failed_name} (MigrationFailed: target unreachable)"
        )),
        "{error}"
    );
    assert_eq!(child(&op, running[1].0)["reason"], "MigrationFailed");
    // The two that moved left A; the failed one stays.
    let loads: Vec<(String, i32)> =
        sqlx::query_as("select name, load_tenants from datastores where name like $1 order by name")
            .bind(format!("{p}-%"))
            .fetch_all(&app.ctx.db)
            .await
            .unwrap();
    assert_eq!(loads.iter().map(|(_, l)| l).sum::<i32>(), 3, "{loads:?}");
    assert_eq!(loads[0], (a.clone(), 1), "{loads:?}");
    // Now closed, the DataStore may be drained again.
    let r = post(&app, &path, &app.admin, None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        (r.body["concurrency"].clone(), counts(&r.body)),
        (json!(2), [1, 0, 0, 0])
    );
}

#[tokio::test]
async fn a_drain_re_places_overrides_and_reports_what_the_plan_cannot_place_or_skips() {
    let app = spawn_app().await;
    let p = super::super::support::unique("dro");
    let ev = format!("{p}-ev");
    pool(&app, &p, "spread").await;
    pool(&app, &ev, "spread").await;
    let (main, e1, e2) = (format!("{p}-main"), format!("{p}-e1"), format!("{p}-e2"));
    datastore(&app, &main, &p, "etcd", 10).await;
    datastore(&app, &e1, &ev, "etcd", 10).await;
    let slug = app.tenant("offloaded").await;
    let offload = json!({"sizeClass": "large", "offload": format!("pool:{ev}"), "datastore": {"pool": p}});
    let first = control_plane(&app, &slug, "first", offload.clone()).await;
    let second = control_plane(&app, &slug, "second", offload).await;
    // Room for one of them only.
    datastore(&app, &e2, &ev, "etcd", 1).await;

    let r = post(
        &app,
        &format!("/api/v1/datastores/{e1}/drain"),
        &app.admin,
        Some(json!({"concurrency": 1})),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(counts(&r.body), [1, 0, 0, 1], "{:#}", r.body);
    let (placed, unplaced) = if child(&r.body, first)["state"] == "pending" {
        (first, second)
    } else {
        (second, first)
    };
    let ch = child(&r.body, placed);
    assert_eq!(
        (&ch["usage"], &ch["resources"], &ch["to"]),
        (
            &json!("overrides"),
            &json!(["/events", "coordination.k8s.io/leases"]),
            &json!(e2)
        )
    );
    let blocked = child(&r.body, unplaced);
    assert_eq!(
        (&blocked["state"], &blocked["reason"], &blocked["to"]),
        (&json!("failed"), &json!("NoCandidate"), &json!(null))
    );
    assert!(
        blocked["error"]
            .as_str()
            .unwrap()
            .starts_with("no DataStore fits: "),
        "{blocked}"
    );

    assert_eq!(pass(&app).await, 1);
    let op = parent(&app, &id).await;
    let ch = child(&op, placed);
    assert_eq!(
        (&ch["state"], &ch["operationKind"]),
        (&json!("running"), &json!("update")),
        "{op:#}"
    );
    let cp = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes/{placed}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(cp.body["placement"]["dataStore"], main.as_str());
    assert_eq!(
        cp.body["placement"]["overrides"],
        json!([{"resource": "/events", "dataStore": e2}, {"resource": "coordination.k8s.io/leases", "dataStore": e2}])
    );
    let loads: Vec<(String, i32)> =
        sqlx::query_as("select name, load_tenants from datastores where name = any($1) order by name")
            .bind(vec![e1.clone(), e2.clone()])
            .fetch_all(&app.ctx.db)
            .await
            .unwrap();
    assert_eq!(loads, [(e1.clone(), 1), (e2.clone(), 1)]);
    let pending_apply: i64 = sqlx::query_scalar(
        "select count(*) from outbox where control_plane_id = $1 and operation_id = $2 and processed_at is null",
    )
    .bind(placed)
    .bind(ch["operationId"].as_str().unwrap().parse::<Uuid>().unwrap())
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(
        pending_apply, 1,
        "the new overrides go through the normal render path"
    );

    sqlx::query("update operations set state = 'succeeded' where id = $1")
        .bind(ch["operationId"].as_str().unwrap().parse::<Uuid>().unwrap())
        .execute(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(pass(&app).await, 0);
    let op = parent(&app, &id).await;
    assert_eq!(counts(&op), [0, 0, 1, 1], "{op:#}");
    assert_eq!(op["state"], "failed");
    assert!(op["error"].as_str().unwrap().contains("NoCandidate"), "{op:#}");

    // A control plane already migrating is skipped with its reason; the others go on.
    let other = format!("{p}-other");
    datastore(&app, &other, &p, "etcd", 10).await;
    let r = post(
        &app,
        &format!("/api/v1/tenants/{slug}/control-planes/{first}/migrate"),
        &app.admin,
        Some(json!({"target": other})),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let r = post(
        &app,
        &format!("/api/v1/datastores/{main}/drain"),
        &app.admin,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let skipped = child(&r.body, first);
    assert_eq!(
        (&skipped["state"], &skipped["reason"]),
        (&json!("failed"), &json!("AlreadyMigrating")),
        "{:#}",
        r.body
    );
    assert_eq!(child(&r.body, second)["state"], "pending");
}

#[tokio::test]
async fn a_drain_of_a_kine_datastore_moves_to_its_driver_nats_is_refused_and_an_empty_one_just_cordons() {
    let app = spawn_app().await;
    let p = super::super::support::unique("drk");
    pool(&app, &p, "spread").await;
    let (pg, pg2, etcd, empty) = (
        format!("{p}-pg"),
        format!("{p}-pg2"),
        format!("{p}-etcd"),
        format!("{p}-empty"),
    );
    datastore(&app, &pg, &p, "PostgreSQL", 10).await;
    let slug = app.tenant("kined").await;
    let cp = control_plane(&app, &slug, "on-kine", json!({"datastore": {"pool": p}})).await;
    datastore(&app, &etcd, &p, "etcd", 10).await;
    datastore(&app, &pg2, &p, "PostgreSQL", 10).await;
    let r = post(&app, &format!("/api/v1/datastores/{pg}/drain"), &app.admin, None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let moved = child(&r.body, cp);
    assert_eq!(
        (&moved["state"], &moved["to"]),
        (&json!("pending"), &json!(pg2)),
        "a PostgreSQL tenant drains to the other PostgreSQL DataStore, never to etcd: {:#}",
        r.body
    );

    let q = super::super::support::unique("drn");
    pool(&app, &q, "spread").await;
    let nats = format!("{q}-nats");
    datastore(&app, &nats, &q, "NATS", 1).await;
    control_plane(&app, &slug, "on-nats", json!({"datastore": {"pool": q}})).await;
    let r = post(
        &app,
        &format!("/api/v1/datastores/{nats}/drain"),
        &app.admin,
        None,
    )
    .await;
    let (status, field, message) = refusal(&r);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "name"),
        "{}",
        r.text
    );
    assert!(
        message.starts_with("NATS DataStores cannot be drained"),
        "{message}"
    );
    let ds = app
        .call(
            Method::GET,
            &format!("/api/v1/datastores/{nats}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(ds.body["cordoned"], false);

    datastore(&app, &empty, &p, "etcd", 10).await;
    let r = post(
        &app,
        &format!("/api/v1/datastores/{empty}/drain"),
        &app.admin,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        (&r.body["state"], &r.body["children"], counts(&r.body)),
        (&json!("succeeded"), &json!([]), [0, 0, 0, 0])
    );
    let ds = app
        .call(
            Method::GET,
            &format!("/api/v1/datastores/{empty}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(ds.body["cordoned"], true);
}

#[tokio::test]
async fn a_rebalance_moves_primaries_until_the_spread_imbalance_is_at_most_one() {
    let app = spawn_app().await;
    let p = super::super::support::unique("rb");
    pool(&app, &p, "spread").await;
    let (a, b) = (format!("{p}-a"), format!("{p}-b"));
    datastore(&app, &a, &p, "etcd", 10).await;
    let slug = app.tenant("rebalanced").await;
    for i in 0..5 {
        control_plane(&app, &slug, &format!("cp{i}"), json!({"datastore": {"pool": p}})).await;
    }
    datastore(&app, &b, &p, "etcd", 10).await;
    let path = format!("/api/v1/pools/{p}/rebalance");

    let tenant_admin = app.token(&slug, "tenant-admin").await;
    let r = post(&app, &path, &tenant_admin, None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    // An optional body may be absent, blank (JSON whitespace), or JSON `null`; anything but an object is
    // refused, and so is a form feed, which is not JSON whitespace (schemathesis sent one).
    for (body, content_type, status) in [
        ("null", "application/json", StatusCode::ACCEPTED),
        (" \r\n\t", "application/json", StatusCode::ACCEPTED),
        ("\x0c", "application/json", StatusCode::BAD_REQUEST),
        ("\x0c", "text/plain", StatusCode::UNSUPPORTED_MEDIA_TYPE),
        ("[]", "application/json", StatusCode::UNPROCESSABLE_ENTITY),
        ("{}", "text/plain", StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ] {
        let name = super::super::support::unique("rbb");
        pool(&app, &name, "spread").await;
        let r = app
            .http
            .post(format!("{}/api/v1/pools/{name}/rebalance", app.base))
            .bearer_auth(&app.admin)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{body} as {content_type}");
    }
    let r = post(&app, "/api/v1/pools/no-such/rebalance", &app.admin, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = post(&app, &path, &app.admin, Some(json!({"concurrency": 0}))).await;
    assert_eq!(refusal(&r).0, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let packed = format!("{p}-packed");
    pool(&app, &packed, "binpack").await;
    let r = post(
        &app,
        &format!("/api/v1/pools/{packed}/rebalance"),
        &app.admin,
        None,
    )
    .await;
    let (status, field, message) = refusal(&r);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::CONFLICT, "name"),
        "{}",
        r.text
    );
    assert!(message.contains("binpack"), "{}", r.text);

    // 5 on a, 0 on b: two moves make it 3 and 2.
    let r = post(&app, &path, &app.admin, Some(json!({"concurrency": 1}))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(
        (&r.body["kind"], &r.body["subject"]),
        (&json!("rebalance"), &json!(p))
    );
    assert_eq!(counts(&r.body), [2, 0, 0, 0], "{:#}", r.body);
    for ch in r.body["children"].as_array().unwrap() {
        assert_eq!(
            (&ch["usage"], &ch["from"], &ch["to"]),
            (&json!("primary"), &json!(a), &json!(b)),
            "{ch}"
        );
    }
    let again = post(&app, &path, &app.admin, None).await;
    assert_eq!(refusal(&again).0, StatusCode::CONFLICT, "{}", again.text);
    assert_eq!(pass(&app).await, 1, "concurrency 1");
    assert_eq!(pass(&app).await, 0);
    let op = parent(&app, &id).await;
    assert_eq!(counts(&op), [1, 1, 0, 0], "{op:#}");

    // A balanced pool: a rebalance with nothing to do has succeeded already.
    let q = super::super::support::unique("rbq");
    pool(&app, &q, "spread").await;
    datastore(&app, &format!("{q}-a"), &q, "etcd", 10).await;
    let r = post(&app, &format!("/api/v1/pools/{q}/rebalance"), &app.admin, None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        (&r.body["state"], &r.body["done"], &r.body["children"]),
        (&json!("succeeded"), &json!(true), &json!([]))
    );
}

#[tokio::test]
async fn a_patch_with_a_datastore_is_a_migration_for_platform_admins_only() {
    let app = spawn_app().await;
    let p = super::super::support::unique("pm");
    pool(&app, &p, "spread").await;
    let (a, b) = (format!("{p}-a"), format!("{p}-b"));
    datastore(&app, &a, &p, "etcd", 10).await;
    let slug = app.tenant("patched").await;
    let cp = control_plane(&app, &slug, "patched", json!({"datastore": {"pool": p}})).await;
    datastore(&app, &b, &p, "etcd", 10).await;
    let path = format!("/api/v1/tenants/{slug}/control-planes/{cp}");
    let patch = |token: String, body: Value, if_match: Option<&'static str>| {
        let (app, path) = (&app, path.clone());
        async move {
            let headers: Vec<(&str, &str)> = if_match.map(|v| ("if-match", v)).into_iter().collect();
            app.call_with(Method::PATCH, &path, Some(&token), Some(body), &headers)
                .await
        }
    };

    for role in ["tenant-admin", "tenant-member"] {
        let token = app.token(&slug, role).await;
        let r = patch(token, json!({"datastore": b}), None).await;
        assert_eq!(
            refusal(&r),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "datastore".to_string(),
                "unknown field `datastore`, expected one of `kubernetesVersion`, `replicas`, `labels`"
                    .to_string()
            ),
            "{role}: {}",
            r.text
        );
    }
    // What serde says of another unknown field, in the same words.
    let r = patch(app.admin.clone(), json!({"dataStore": b}), None).await;
    assert_eq!(
        refusal(&r),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "dataStore".to_string(),
            "unknown field `dataStore`, expected one of `kubernetesVersion`, `replicas`, `labels`, `datastore`"
                .to_string()
        ),
        "{}",
        r.text
    );
    for (body, status, message) in [
        (
            json!({"datastore": b, "replicas": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "send it alone",
        ),
        (
            json!({"datastore": "no-such"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "there is no DataStore named no-such",
        ),
        (
            json!({"datastore": a}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "is already the control plane's DataStore",
        ),
        (
            json!({"datastore": "Not A Name"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
    ] {
        let r = patch(app.admin.clone(), body.clone(), None).await;
        let (got, field, text) = refusal(&r);
        assert_eq!((got, field.as_str()), (status, "datastore"), "{body}: {}", r.text);
        assert!(text.contains(message), "{body}: {}", r.text);
    }
    let r = patch(app.admin.clone(), json!({"datastore": b}), Some("\"99\"")).await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED, "{}", r.text);

    let r = patch(app.admin.clone(), json!({"datastore": b}), Some("\"1\"")).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.body["operation"]["kind"], "migrate", "{}", r.text);
    assert_eq!(r.body["controlPlane"]["generation"], 2);
    let op = r.body["operation"]["id"].as_str().unwrap();
    assert_eq!(
        r.headers["location"],
        format!("/api/v1/tenants/{slug}/operations/{op}").as_str()
    );
    let open = store::migrations::open(&app.ctx.db, cp).await.unwrap().unwrap();
    assert_eq!(
        (open.source.as_str(), open.target.as_str(), open.aborted),
        (a.as_str(), b.as_str(), false)
    );
    let again = patch(app.admin.clone(), json!({"datastore": b}), None).await;
    let (status, field, message) = refusal(&again);
    assert_eq!(
        (status, field.as_str()),
        (StatusCode::CONFLICT, "datastore"),
        "{}",
        again.text
    );
    assert!(message.contains("open migrate operation"), "{}", again.text);
}

#[tokio::test]
async fn an_abort_before_the_switch_renders_the_source_and_after_it_is_409_naming_the_stage() {
    let app = spawn_app().await;
    let p = super::super::support::unique("ab");
    pool(&app, &p, "spread").await;
    let (a, b) = (format!("{p}-a"), format!("{p}-b"));
    datastore(&app, &a, &p, "etcd", 10).await;
    let slug = app.tenant("aborted").await;
    let cp = control_plane(&app, &slug, "aborted", json!({"datastore": {"pool": p}})).await;
    datastore(&app, &b, &p, "etcd", 10).await;
    let migrate = format!("/api/v1/tenants/{slug}/control-planes/{cp}/migrate");
    let abort = format!("{migrate}/abort");
    let r = post(&app, &abort, &app.admin, None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "no migration: {}", r.text);
    assert!(r.text.contains("no open migration"), "{}", r.text);

    // Before copying started: it ends at once, and the reservation goes.
    let r = post(&app, &migrate, &app.admin, Some(json!({"target": b}))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(load(&app, &b).await, 1);
    let tenant_admin = app.token(&slug, "tenant-admin").await;
    let r = post(&app, &abort, &tenant_admin, None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = post(&app, &abort, &app.admin, None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(
        (&r.body["operation"]["state"], &r.body["operation"]["reason"]),
        (&json!("failed"), &json!("MigrationAborted")),
        "{}",
        r.text
    );
    assert_eq!(load(&app, &b).await, 0);
    assert_eq!(store::migrations::open(&app.ctx.db, cp).await.unwrap(), None);
    let generation = r.body["controlPlane"]["generation"].as_i64().unwrap();
    let rendered: i64 = sqlx::query_scalar(
        "select count(*) from outbox where control_plane_id = $1 and (payload ->> 'generation')::bigint = $2",
    )
    .bind(cp)
    .bind(generation)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(rendered, 1, "the source is rendered again");

    // While copying: the controller unwinds it; meanwhile the source is rendered.
    let r = post(&app, &migrate, &app.admin, Some(json!({"target": b}))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let op: Uuid = r.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    stamp(&app, op, &["copying", "catchingUp", "frozen"]).await;
    let r = post(&app, &abort, &app.admin, None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.body["operation"]["state"], "running", "{}", r.text);
    let open = store::migrations::open(&app.ctx.db, cp).await.unwrap().unwrap();
    assert!(open.aborted);
    let recorded = tenantplane::translate::Placement {
        data_store: Some(a.clone()),
        overrides: Vec::new(),
    };
    assert_eq!(
        tenantplane::worker::migration::rendered(recorded.clone(), Some(&open)),
        recorded
    );
    let r = post(&app, &abort, &app.admin, None).await;
    assert_eq!(
        r.status,
        StatusCode::ACCEPTED,
        "a second abort is the same: {}",
        r.text
    );
    end_migration(&app, cp, &op.to_string(), false).await;

    // After the switch: 409 naming the stage.
    let r = post(&app, &migrate, &app.admin, Some(json!({"target": b}))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let op: Uuid = r.body["operation"]["id"].as_str().unwrap().parse().unwrap();
    stamp(&app, op, &["copying", "catchingUp", "frozen", "switching"]).await;
    let r = post(&app, &abort, &app.admin, None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("has reached stage switching"),
        "{}",
        r.text
    );
    assert!(
        !store::migrations::open(&app.ctx.db, cp)
            .await
            .unwrap()
            .unwrap()
            .aborted
    );
}

/// The load of DataStore `name`.
async fn load(app: &App, name: &str) -> i32 {
    sqlx::query_scalar("select load_tenants from datastores where name = $1")
        .bind(name)
        .fetch_one(&app.ctx.db)
        .await
        .unwrap()
}

/// Stamps `stages` on operation `op`, as the worker does from `status.migration`.
async fn stamp(app: &App, op: Uuid, stages: &[&str]) {
    let mut tx = app.ctx.db.begin().await.unwrap();
    store::migrations::stamp(&mut tx, op, stages).await.unwrap();
    tx.commit().await.unwrap();
}

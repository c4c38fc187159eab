//! Placement in the store: reserved atomically under concurrency, shown on control planes, simulated and
//! drained on a fixed pool.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, spawn_app};

async fn pool(app: &App, name: &str, policy: &str) {
    let r = app
        .call(
            Method::POST,
            "/api/v1/pools",
            Some(&app.admin),
            Some(json!({"name": name, "policy": policy})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

async fn datastore(app: &App, name: &str, pool: &str, driver: &str, capacity: i32, ca: &str) {
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let secrets = if driver == "etcd" {
        json!({"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")})
    } else {
        json!({"username": r("user"), "password": r("password")})
    };
    let body = json!({"name": name, "pool": pool, "driver": driver, "endpoints": [format!("{name}:2379")],
                      "capacityTenants": capacity, "secrets": secrets, "caId": ca});
    let reply = app
        .call(Method::POST, "/api/v1/datastores", Some(&app.admin), Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

async fn create(app: &App, slug: &str, token: &str, name: String, extra: Value) -> super::Reply {
    let mut body = json!({"name": name, "kubernetesVersion": "v1.34.1"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    app.call(
        Method::POST,
        &format!("/api/v1/tenants/{slug}/control-planes"),
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn two_hundred_parallel_creates_fill_a_pool_of_fifty_exactly() {
    let app = spawn_app().await;
    pool(&app, "cap50", "spread").await;
    for i in 0..5 {
        datastore(&app, &format!("etcd-cap-{i}"), "cap50", "etcd", 10, "ca-1").await;
    }
    let slug = app.tenant("crowd").await;
    super::set_quotas(&app, &slug, json!({"controlPlanes": 1000})).await;
    let member = app.token(&slug, "tenant-member").await;
    let calls = (0..200).map(|i| {
        create(
            &app,
            &slug,
            &member,
            format!("cp-{i}"),
            json!({"datastore": {"pool": "cap50"}}),
        )
    });
    let replies = futures::future::join_all(calls).await;
    let placed = replies
        .iter()
        .filter(|r| r.status == StatusCode::ACCEPTED)
        .count();
    let refused: Vec<&super::Reply> = replies
        .iter()
        .filter(|r| r.status == StatusCode::CONFLICT)
        .collect();
    assert_eq!(
        (placed, refused.len()),
        (50, 150),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in &refused {
        assert_eq!(r.body["detail"], "no DataStore fits: 5 at capacity", "{}", r.text);
    }
    let per_store: Vec<(String, i64)> = sqlx::query_as(
        "select d.name, count(p.control_plane_id) from datastores d left join placements p on p.datastore_id = d.id
         where d.name like 'etcd-cap-%' group by d.name order by d.name",
    )
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(
        per_store,
        (0..5).map(|i| (format!("etcd-cap-{i}"), 10)).collect::<Vec<_>>()
    );
    let orphans: i64 = sqlx::query_scalar("select count(*) from control_planes c where not exists (select 1 from placements p where p.control_plane_id = c.id)")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(orphans, 0, "a refused create left a control plane behind");
}

#[tokio::test]
async fn twenty_parallel_creates_get_exactly_three_nats_datastores() {
    let app = spawn_app().await;
    pool(&app, "nats", "spread").await;
    for i in 0..3 {
        datastore(&app, &format!("nats-{i}"), "nats", "NATS", 1, "").await;
    }
    let slug = app.tenant("nats").await;
    let member = app.token(&slug, "tenant-member").await;
    let calls = (0..20).map(|i| {
        create(
            &app,
            &slug,
            &member,
            format!("n-{i}"),
            json!({"datastore": {"pool": "nats"}}),
        )
    });
    let replies = futures::future::join_all(calls).await;
    let placed: Vec<String> = replies
        .iter()
        .filter(|r| r.status == StatusCode::ACCEPTED)
        .map(|r| {
            r.body["controlPlane"]["placement"]["dataStore"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut sorted = placed.clone();
    sorted.sort();
    assert_eq!(sorted, ["nats-0", "nats-1", "nats-2"]);
    assert!(
        replies
            .iter()
            .filter(|r| r.status != StatusCode::ACCEPTED)
            .all(|r| r.status == StatusCode::CONFLICT)
    );
}

#[tokio::test]
async fn the_database_refuses_a_second_tenant_on_a_nats_datastore_even_without_the_engine() {
    let app = spawn_app().await;
    pool(&app, "natsx", "spread").await;
    datastore(&app, "nats-x", "natsx", "NATS", 1, "").await;
    let slug = app.tenant("natsx").await;
    let member = app.token(&slug, "tenant-member").await;
    assert_eq!(
        create(
            &app,
            &slug,
            &member,
            "first".into(),
            json!({"datastore": {"pool": "natsx"}})
        )
        .await
        .status,
        StatusCode::ACCEPTED
    );
    // Bypass the engine: a second control plane, then a raw second placement on the same NATS DataStore.
    let tenant = super::tenant_id(&app, &slug).await;
    sqlx::query(
        "insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class)
         values (gen_random_uuid(), $1, 'second', 'v1.34.1', 2, 'ClusterIP', 6443, 'small')",
    )
    .bind(tenant)
    .execute(&app.ctx.db)
    .await
    .unwrap();
    let err = sqlx::query(
        "insert into placements (control_plane_id, tenant_id, datastore_id, driver)
         select c.id, c.tenant_id, d.id, 'NATS' from control_planes c, datastores d where d.name = 'nats-x' and c.name = 'second'",
    )
    .execute(&app.ctx.db)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("placements_nats_exclusive"), "{err}");
}

#[tokio::test]
async fn control_planes_show_their_placement_with_overrides() {
    let app = spawn_app().await;
    pool(&app, "primary", "binpack").await;
    pool(&app, "events", "spread").await;
    datastore(&app, "etcd-main", "primary", "etcd", 10, "ca-shared").await;
    datastore(&app, "etcd-events-a", "events", "etcd", 10, "ca-shared").await;
    datastore(&app, "etcd-events-b", "events", "etcd", 10, "ca-other").await;
    let slug = app.tenant("offload").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = create(
        &app,
        &slug,
        &member,
        "big".into(),
        json!({"sizeClass": "large", "offload": "pool:events", "datastore": {"pool": "primary"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let placement = &r.body["controlPlane"]["placement"];
    assert_eq!(placement["dataStore"], "etcd-main");
    assert_eq!(
        placement["overrides"],
        json!([{"resource": "/events", "dataStore": "etcd-events-a"}, {"resource": "coordination.k8s.io/leases", "dataStore": "etcd-events-a"}])
    );
    // A tenant sees only the DataStores chosen for it, never the other candidates or their scores.
    let names = |decision: &Value, key: &str| -> Vec<String> {
        decision[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["data_store"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&placement["decision"], "candidates"), ["etcd-main"]);
    assert_eq!(
        names(&placement["decision"], "override_candidates"),
        ["etcd-events-a"]
    );
    let path = format!(
        "/api/v1/tenants/{slug}/control-planes/{}",
        r.body["controlPlane"]["id"].as_str().unwrap()
    );
    let got = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(got.body["placement"], *placement);
    // A platform admin sees why etcd-events-b was not taken.
    let admin = app.call(Method::GET, &path, Some(&app.admin), None).await;
    let rejected: Vec<&Value> = admin.body["placement"]["decision"]["override_candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["data_store"] == "etcd-events-b")
        .collect();
    assert_eq!(rejected[0]["outcome"], json!({"rejected": "ca_mismatch"}));
}

/// Creates race on shared rows through both reservation paths (optimistic on the chosen rows, then the
/// all-rows lock once a chosen DataStore filled up): no deadlock (500), no oversubscription, and every
/// DataStore's load counter equals the placements and overrides that use it.
#[tokio::test]
async fn parallel_creates_with_overrides_fill_the_override_pool_exactly_and_keep_loads_consistent() {
    let app = spawn_app().await;
    pool(&app, "race-main", "spread").await;
    pool(&app, "race-events", "spread").await;
    for i in 0..4 {
        datastore(
            &app,
            &format!("etcd-race-main-{i}"),
            "race-main",
            "etcd",
            10,
            "ca-race",
        )
        .await;
    }
    for i in 0..2 {
        datastore(
            &app,
            &format!("etcd-race-ev-{i}"),
            "race-events",
            "etcd",
            10,
            "ca-race",
        )
        .await;
    }
    let slug = app.tenant("race").await;
    let member = app.token(&slug, "tenant-member").await;
    let calls = (0..60).map(|i| {
        create(
            &app,
            &slug,
            &member,
            format!("r-{i}"),
            json!({"sizeClass": "large", "offload": "pool:race-events", "datastore": {"pool": "race-main"}}),
        )
    });
    let replies = futures::future::join_all(calls).await;
    let statuses: Vec<StatusCode> = replies.iter().map(|r| r.status).collect();
    let accepted = statuses.iter().filter(|s| **s == StatusCode::ACCEPTED).count();
    let refused = statuses.iter().filter(|s| **s == StatusCode::CONFLICT).count();
    // Each accepted create takes one override DataStore (events and leases share it): 2 x 10 slots.
    assert_eq!((accepted, refused), (20, 40), "{statuses:?}");
    let loads: Vec<(String, i32, i64)> = sqlx::query_as(
        "select d.name, d.load_tenants,
                (select count(*) from (select p.control_plane_id from placements p where p.datastore_id = d.id
                                       union select o.control_plane_id from placement_overrides o
                                       where o.datastore_id = d.id) u)
         from datastores d where d.name like 'etcd-race-%' order by d.name",
    )
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    for (name, counter, actual) in &loads {
        assert_eq!(i64::from(*counter), *actual, "{name}: load counter vs placements");
        assert!(*counter <= 10, "{name} oversubscribed: {counter}");
    }
    let events: Vec<i32> = loads
        .iter()
        .filter(|(n, _, _)| n.starts_with("etcd-race-ev-"))
        .map(|(_, c, _)| *c)
        .collect();
    assert_eq!(events, [10, 10]);
    let primaries: i32 = loads
        .iter()
        .filter(|(n, _, _)| n.starts_with("etcd-race-main-"))
        .map(|(_, c, _)| *c)
        .sum();
    assert_eq!(primaries, 20);
}

#[tokio::test]
async fn simulate_answers_without_reserving_and_cordon_takes_a_datastore_out() {
    let app = spawn_app().await;
    pool(&app, "sim", "spread").await;
    datastore(&app, "etcd-s1", "sim", "etcd", 4, "ca").await;
    datastore(&app, "etcd-s2", "sim", "etcd", 4, "ca").await;
    let body = json!({"sizeClass": "small", "pool": "sim", "controlPlaneId": "cp-fixed"});
    let first = app
        .call(
            Method::POST,
            "/api/v1/placements:simulate",
            Some(&app.admin),
            Some(body.clone()),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.body["primary"], "etcd-s1");
    assert_eq!(
        first.body["candidates"],
        json!([{"data_store": "etcd-s1", "pool": "sim", "outcome": {"scored": first.body["candidates"][0]["outcome"]["scored"]}},
               {"data_store": "etcd-s2", "pool": "sim", "outcome": {"scored": first.body["candidates"][1]["outcome"]["scored"]}}])
    );
    let again = app
        .call(
            Method::POST,
            "/api/v1/placements:simulate",
            Some(&app.admin),
            Some(body.clone()),
        )
        .await;
    assert_eq!(again.body, first.body, "a simulation must not reserve anything");
    let cordon = app
        .call(
            Method::POST,
            "/api/v1/datastores/etcd-s1/cordon",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(cordon.body["cordoned"], true);
    let after = app
        .call(
            Method::POST,
            "/api/v1/placements:simulate",
            Some(&app.admin),
            Some(body),
        )
        .await;
    assert_eq!(after.body["primary"], "etcd-s2");
    assert_eq!(
        after.body["candidates"][0]["outcome"],
        json!({"rejected": "cordoned"})
    );
}

#[tokio::test]
async fn drain_plan_lists_the_moves_that_empty_a_cordoned_datastore() {
    let app = spawn_app().await;
    pool(&app, "drain", "spread").await;
    datastore(&app, "etcd-d1", "drain", "etcd", 10, "ca").await;
    datastore(&app, "etcd-d2", "drain", "etcd", 10, "ca").await;
    datastore(&app, "etcd-d3", "drain", "etcd", 10, "ca").await;
    let slug = app.tenant("drain").await;
    let member = app.token(&slug, "tenant-member").await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = create(
            &app,
            &slug,
            &member,
            format!("d-{i}"),
            json!({"datastore": {"pool": "drain"}}),
        )
        .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        ids.push((
            r.body["controlPlane"]["id"].as_str().unwrap().to_string(),
            r.body["controlPlane"]["placement"]["dataStore"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    // Spread over three equal DataStores: one each, ties by name.
    let mut stores: Vec<&str> = ids.iter().map(|(_, s)| s.as_str()).collect();
    stores.sort();
    assert_eq!(stores, ["etcd-d1", "etcd-d2", "etcd-d3"]);
    app.call(
        Method::POST,
        "/api/v1/datastores/etcd-d1/cordon",
        Some(&app.admin),
        None,
    )
    .await;
    let plan = app
        .call(
            Method::GET,
            "/api/v1/datastores/etcd-d1/drain-plan",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(plan.status, StatusCode::OK, "{}", plan.text);
    let on_d1 = ids.iter().find(|(_, s)| s == "etcd-d1").unwrap().0.clone();
    assert_eq!(
        plan.body,
        json!([{"controlPlaneId": on_d1, "usage": "primary", "from": "etcd-d1", "to": "etcd-d2", "blockedBy": []}])
    );
}

#[tokio::test]
async fn a_request_without_a_pool_lands_in_any_pool_registered_through_the_api() {
    let app = spawn_app().await;
    sqlx::query("delete from datastores")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    pool(&app, "anywhere", "spread").await;
    datastore(&app, "etcd-any", "anywhere", "etcd", 1_000_000, "ca").await;
    let slug = app.tenant("nopool").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = create(&app, &slug, &member, "free".into(), json!({})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.body["controlPlane"]["placement"]["dataStore"], "etcd-any");
}

/// A chosen DataStore cordoned between a create's choice and its reservation (the reservation comes last,
/// after the answer is stored): the create is placed again under the all-rows lock, and both its answer
/// and the answer stored for its idempotency key name the DataStore it got.
#[tokio::test]
async fn a_datastore_cordoned_before_the_reservation_moves_the_create_and_its_stored_answer() {
    use tenantplane::service::{ServiceError, control_planes, idempotency};
    let app = spawn_app().await;
    pool(&app, "late", "spread").await;
    for i in 0..2 {
        datastore(&app, &format!("etcd-late-{i}"), "late", "etcd", 10, "ca-late").await;
    }
    let slug = app.tenant("late").await;
    let who = tenantplane::auth::Principal {
        jti: uuid::Uuid::new_v4(),
        tenant_id: None,
        role: tenantplane::domain::Role::PlatformAdmin,
        subject: "test".into(),
        expires_at: chrono::Utc::now() + chrono::Duration::minutes(5),
        external: false,
    };
    let input = serde_json::from_value(
        json!({"name": "moved", "kubernetesVersion": "v1.34.1", "datastore": {"pool": "late"}}),
    )
    .unwrap();
    let request = idempotency::Request {
        route: "POST /tenants/late/control-planes",
        key: Some("late-1"),
        request_hash: b"same body",
        status: 202,
    };
    let (ctx, db) = (&app.ctx, app.ctx.db.clone());
    let mut chosen = String::new();
    let work = async |tx: &mut sqlx::PgConnection| {
        let (accepted, pending) =
            control_planes::create_unreserved(ctx, tx, &who, &slug, input, None).await?;
        chosen = accepted.control_plane.placement.clone().unwrap().data_store;
        sqlx::query("update datastores set cordoned = true where name = $1")
            .bind(&chosen)
            .execute(&db)
            .await
            .unwrap();
        Ok((accepted, pending))
    };
    let last = async |tx: &mut sqlx::PgConnection, pending| {
        control_planes::reserve_created(ctx, tx, &who, pending).await
    };
    let outcome = idempotency::run_then(ctx, &who, request, work, last)
        .await
        .unwrap();
    let other = if chosen == "etcd-late-0" {
        "etcd-late-1"
    } else {
        "etcd-late-0"
    };
    assert_eq!(
        outcome.body["controlPlane"]["placement"]["dataStore"], other,
        "{:#}",
        outcome.body
    );
    let replay = idempotency::run(ctx, &who, request, async |_| -> Result<(), ServiceError> {
        panic!("a replay runs no work")
    })
    .await
    .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.body, outcome.body, "the stored answer is the one given");
    let loads: Vec<(String, i32)> = sqlx::query_as(
        "select name, load_tenants from datastores where name like 'etcd-late-%' order by name",
    )
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    let expected: Vec<(String, i32)> = ["etcd-late-0", "etcd-late-1"]
        .iter()
        .map(|n| (n.to_string(), i32::from(*n == other)))
        .collect();
    assert_eq!(loads, expected);
}

//! The CRUD automation expects (issue 20, item 5): keyset pages with filters on every list, tenant
//! suspension enforced in authentication, tenant delete (at once, or cascading through the control-plane
//! delete path), and PATCH/DELETE of pools and DataStores.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::worker::{Worker, WorkerMetrics, WorkerSettings};

use super::{App, spawn_app, tenant_id};
use crate::support;

/// Every page of `path` (which has a query string) at `limit`, following `nextCursor`: the pages' items.
async fn pages(app: &App, path: &str, token: &str, limit: usize) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}&limit={limit}&cursor={c}"),
            None => format!("{path}&limit={limit}"),
        };
        let r = app.call(Method::GET, &url, Some(token), None).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.text);
        out.push(r.body["items"].as_array().unwrap().clone());
        match r.body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

fn field<'a>(items: &'a [Value], key: &str) -> Vec<&'a str> {
    items.iter().map(|i| i[key].as_str().unwrap()).collect()
}

/// The fields a 422 names, in order.
fn named_fields(r: &super::Reply) -> Vec<String> {
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_string())
        .collect()
}

async fn post(app: &App, path: &str, token: &str, body: Value) -> super::Reply {
    app.call(Method::POST, path, Some(token), Some(body)).await
}

#[tokio::test]
async fn tenants_page_oldest_first_filtered_by_prefix_and_suspension() {
    let app = spawn_app().await;
    let prefix = support::unique("pg");
    let mut slugs = Vec::new();
    for i in 0..5 {
        let slug = format!("{prefix}-{i}");
        let r = post(
            &app,
            "/api/v1/tenants",
            &app.admin,
            json!({"slug": slug, "displayName": "P"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        slugs.push(slug);
    }
    app.tenant("elsewhere").await;
    let got = pages(&app, &format!("/api/v1/tenants?prefix={prefix}"), &app.admin, 2).await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2, 1]);
    let flat: Vec<Value> = got.concat();
    assert_eq!(field(&flat, "slug"), slugs);

    let r = post(
        &app,
        &format!("/api/v1/tenants/{}/suspend", slugs[1]),
        &app.admin,
        json!({}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::OK, Some("suspended")),
        "{}",
        r.text
    );
    let suspended = pages(
        &app,
        &format!("/api/v1/tenants?prefix={prefix}&suspended=true"),
        &app.admin,
        10,
    )
    .await;
    assert_eq!(field(&suspended.concat(), "slug"), [slugs[1].as_str()]);
    let active = pages(
        &app,
        &format!("/api/v1/tenants?prefix={prefix}&suspended=false"),
        &app.admin,
        10,
    )
    .await;
    assert_eq!(
        field(&active.concat(), "slug"),
        [&slugs[0], &slugs[2], &slugs[3], &slugs[4]]
    );

    let bad = app
        .call(
            Method::GET,
            "/api/v1/tenants?limit=101&cursor=zz&prefix=Nope",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(named_fields(&bad), ["limit", "cursor", "prefix"]);
    let member = app.token(&slugs[0], "tenant-admin").await;
    let forbidden = app
        .call(Method::GET, "/api/v1/tenants", Some(&member), None)
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN, "{}", forbidden.text);
}

#[tokio::test]
async fn tokens_page_newest_first_filtered_by_revocation_and_role() {
    let app = spawn_app().await;
    let slug = app.tenant("tokpg").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let path = format!("/api/v1/tenants/{slug}/tokens");
    let mut minted = Vec::new();
    for role in ["tenant-viewer", "tenant-member", "tenant-viewer", "tenant-member"] {
        let r = post(&app, &path, &admin, json!({"role": role, "ttlSeconds": 600})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        minted.push(r.body["record"]["id"].as_str().unwrap().to_string());
    }
    let revoked = &minted[0];
    let r = app
        .call(Method::DELETE, &format!("{path}/{revoked}"), Some(&admin), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    // Newest first: the four minted here, then the helper's admin token and its bootstrap token.
    let all = pages(&app, &format!("{path}?"), &admin, 2).await;
    assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2]);
    let ids: Vec<String> = field(&all.concat(), "id").into_iter().map(String::from).collect();
    let mut newest_first = minted.clone();
    newest_first.reverse();
    assert_eq!(&ids[..4], &newest_first[..]);
    assert!(
        !all.concat().iter().any(|t| t.get("token").is_some()),
        "no token is ever listed"
    );

    let only_revoked = pages(&app, &format!("{path}?revoked=true"), &admin, 10)
        .await
        .concat();
    assert_eq!(field(&only_revoked, "id"), [revoked.as_str()]);
    let live_viewers = pages(
        &app,
        &format!("{path}?revoked=false&role=tenant-viewer"),
        &admin,
        10,
    )
    .await
    .concat();
    assert_eq!(field(&live_viewers, "id"), [minted[2].as_str()]);

    let bad = app
        .call(
            Method::GET,
            &format!("{path}?limit=0&cursor=x"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(named_fields(&bad), ["limit", "cursor"]);
    let bad_role = app
        .call(Method::GET, &format!("{path}?role=root"), Some(&admin), None)
        .await;
    assert_eq!(named_fields(&bad_role), ["query"]);
}

fn datastore(name: &str, pool: Option<&str>, driver: &str) -> Value {
    let r = |k: &str| json!({"name": "certs", "namespace": "kamaji-system", "keyPath": k});
    let secrets = if driver == "etcd" {
        json!({"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")})
    } else {
        json!({"username": r("user"), "password": r("password")})
    };
    let capacity = if driver == "NATS" { 1 } else { 10 };
    json!({"name": name, "pool": pool, "driver": driver, "endpoints": ["db-0:2379"], "capacityTenants": capacity, "secrets": secrets})
}

#[tokio::test]
async fn pools_and_datastores_page_with_filters() {
    let app = spawn_app().await;
    for pool in ["p1", "p2", "p3"] {
        let r = post(&app, "/api/v1/pools", &app.admin, json!({"name": pool})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let pools = pages(&app, "/api/v1/pools?", &app.admin, 2).await;
    assert_eq!(pools.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
    assert_eq!(field(&pools.concat(), "name"), ["default", "p1", "p2", "p3"]);

    for (name, pool, driver) in [
        ("e1", "p1", "etcd"),
        ("m1", "p1", "MySQL"),
        ("e2", "p2", "etcd"),
        ("n1", "p2", "NATS"),
    ] {
        let r = post(
            &app,
            "/api/v1/datastores",
            &app.admin,
            datastore(name, Some(pool), driver),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let r = post(&app, "/api/v1/datastores/e2/cordon", &app.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let all = pages(&app, "/api/v1/datastores?", &app.admin, 3).await;
    assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2]);
    assert_eq!(
        field(&all.concat(), "name"),
        ["etcd-default", "e1", "m1", "e2", "n1"]
    );
    let in_p1 = pages(&app, "/api/v1/datastores?pool=p1", &app.admin, 10)
        .await
        .concat();
    assert_eq!(field(&in_p1, "name"), ["e1", "m1"]);
    let etcd_p2 = pages(&app, "/api/v1/datastores?pool=p2&driver=etcd", &app.admin, 10)
        .await
        .concat();
    assert_eq!(field(&etcd_p2, "name"), ["e2"]);
    let cordoned = pages(&app, "/api/v1/datastores?cordoned=true", &app.admin, 10)
        .await
        .concat();
    assert_eq!(field(&cordoned, "name"), ["e2"]);

    let bad = app
        .call(
            Method::GET,
            "/api/v1/datastores?driver=mongo&pool=Bad_Pool&limit=500",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(named_fields(&bad), ["limit", "pool", "driver"]);
    let bad_pools = app
        .call(Method::GET, "/api/v1/pools?cursor=%00", Some(&app.admin), None)
        .await;
    assert_eq!(named_fields(&bad_pools), ["cursor"]);
}

async fn graphql_viewer(app: &App, token: &str) -> super::Reply {
    app.call(
        Method::POST,
        "/graphql",
        Some(token),
        Some(json!({"query": "{ viewer { role } }"})),
    )
    .await
}

#[tokio::test]
async fn a_suspended_tenants_existing_tokens_are_refused_at_once_and_work_again_after_resume() {
    let app = spawn_app().await;
    let slug = app.tenant("susp").await;
    let other = app.tenant("susp-other").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let other_admin = app.token(&other, "tenant-admin").await;
    let cps = format!("/api/v1/tenants/{slug}/control-planes");
    assert_eq!(
        app.call(Method::GET, &cps, Some(&admin), None).await.status,
        StatusCode::OK
    );
    assert_eq!(graphql_viewer(&app, &admin).await.status, StatusCode::OK);

    // Only a platform admin suspends: the tenant's own admin is forbidden.
    let own = post(
        &app,
        &format!("/api/v1/tenants/{slug}/suspend"),
        &admin,
        json!({}),
    )
    .await;
    assert_eq!(
        (own.status, own.body["title"].as_str()),
        (StatusCode::FORBIDDEN, Some("Forbidden"))
    );
    let r = post(
        &app,
        &format!("/api/v1/tenants/{slug}/suspend"),
        &app.admin,
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["state"], "suspended");

    // The very next request with the existing token is refused in authentication: reads, writes, GraphQL.
    let expected = json!({
        "type": "https://tenantplane.dev/problems/tenant-suspended",
        "title": "Tenant suspended",
        "status": 403,
        "detail": "the token's tenant is suspended: every request with its tokens is refused until a platform admin resumes it",
    });
    for reply in [
        app.call(Method::GET, &cps, Some(&admin), None).await,
        app.call(
            Method::POST,
            &cps,
            Some(&admin),
            Some(json!({"name": "new", "kubernetesVersion": "v1.33.2"})),
        )
        .await,
        app.call(Method::GET, "/api/v1/viewer", Some(&admin), None).await,
        graphql_viewer(&app, &admin).await,
    ] {
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
        assert_eq!(reply.headers["content-type"], "application/problem+json");
        let mut body = reply.body.clone();
        body.as_object_mut().unwrap().remove("requestId");
        assert_eq!(body, expected);
    }
    // Another tenant is untouched; the platform admin still sees the suspended one.
    assert_eq!(
        app.call(
            Method::GET,
            &format!("/api/v1/tenants/{other}"),
            Some(&other_admin),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    let seen = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(seen.body["state"], "suspended");

    let r = post(
        &app,
        &format!("/api/v1/tenants/{slug}/resume"),
        &app.admin,
        json!({}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::OK, Some("active")),
        "{}",
        r.text
    );
    assert_eq!(
        app.call(Method::GET, &cps, Some(&admin), None).await.status,
        StatusCode::OK
    );
    assert_eq!(graphql_viewer(&app, &admin).await.status, StatusCode::OK);
    let missing = post(
        &app,
        "/api/v1/tenants/no-such-tenant/suspend",
        &app.admin,
        json!({}),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn deleting_a_tenant_without_control_planes_is_204_and_removes_it_and_its_tokens() {
    let app = spawn_app().await;
    let slug = app.tenant("delnow").await;
    let id = tenant_id(&app, &slug).await;
    let admin = app.token(&slug, "tenant-admin").await;
    let path = format!("/api/v1/tenants/{slug}");
    let own = app.call(Method::DELETE, &path, Some(&admin), None).await;
    assert_eq!(own.status, StatusCode::FORBIDDEN, "{}", own.text);
    let r = app.call(Method::DELETE, &path, Some(&app.admin), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(r.text, "");
    assert_eq!(
        app.call(Method::GET, &path, Some(&app.admin), None).await.status,
        StatusCode::NOT_FOUND
    );
    let refused = app.call(Method::GET, "/api/v1/viewer", Some(&admin), None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.text);
    let (tokens, keys): (i64, i64) = sqlx::query_as(
        "select (select count(*) from api_tokens where tenant_id = $1), (select count(*) from signing_keys where tenant_id = $1)",
    )
    .bind(id)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!((tokens, keys), (0, 0));
    assert_eq!(
        app.call(Method::DELETE, &path, Some(&app.admin), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let bad = app
        .call(
            Method::DELETE,
            "/api/v1/tenants/x?cascade=maybe",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(named_fields(&bad), ["query"]);
}

fn worker_settings() -> WorkerSettings {
    WorkerSettings {
        batch_size: 20,
        poll_ms: 50,
        backoff_ms: 100,
        backoff_max_ms: 1000,
        resync_seconds: 3600.0,
        ..WorkerSettings::default()
    }
}

#[tokio::test]
async fn a_tenant_with_control_planes_is_409_unless_cascade_which_deletes_them_and_then_the_tenant() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let slug = app.tenant("cascade").await;
    let id = tenant_id(&app, &slug).await;
    let admin = app.token(&slug, "tenant-admin").await;
    let mut cps = Vec::new();
    for name in ["one", "two"] {
        cps.push(app.control_plane(&slug, &admin, name).await["controlPlane"]["id"].clone());
    }
    let path = format!("/api/v1/tenants/{slug}");
    let refused = app.call(Method::DELETE, &path, Some(&app.admin), None).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    assert_eq!(refused.body["type"], "https://tenantplane.dev/problems/conflict");
    assert_eq!(
        refused.body["detail"],
        format!(
            "tenant {slug:?} still has 2 control planes: delete them first, or delete the tenant with cascade=true"
        )
    );

    let r = app
        .call(
            Method::DELETE,
            &format!("{path}?cascade=true"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(r.headers["location"], path.as_str());
    assert_eq!(r.body["tenant"]["state"], "deleting");
    let ops = r.body["operations"].as_array().unwrap();
    let kinds: Vec<(&Value, &str)> = ops
        .iter()
        .map(|o| (&o["controlPlaneId"], o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [(&cps[0], "delete"), (&cps[1], "delete")]);
    // Deleting: the tenant's tokens stop working, nothing new is created in it, and it still shows.
    let gone_token = app.call(Method::GET, "/api/v1/viewer", Some(&admin), None).await;
    assert_eq!(gone_token.status, StatusCode::UNAUTHORIZED, "{}", gone_token.text);
    assert_eq!(gone_token.body["detail"], "the token's tenant is being deleted");
    let new_cp = app
        .call(
            Method::POST,
            &format!("{path}/control-planes"),
            Some(&app.admin),
            Some(json!({"name": "late", "kubernetesVersion": "v1.33.2"})),
        )
        .await;
    assert_eq!(new_cp.status, StatusCode::CONFLICT, "{}", new_cp.text);
    let shown = app.call(Method::GET, &path, Some(&app.admin), None).await;
    assert_eq!(
        (shown.status, shown.body["state"].as_str()),
        (StatusCode::OK, Some("deleting"))
    );
    let suspend = post(&app, &format!("{path}/suspend"), &app.admin, json!({})).await;
    assert_eq!(suspend.status, StatusCode::CONFLICT, "{}", suspend.text);
    // Again: the same deletes, no new operations.
    let again = app
        .call(
            Method::DELETE,
            &format!("{path}?cascade=true"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.text);
    assert_eq!(
        again.body["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["id"])
            .collect::<Vec<_>>(),
        ops.iter().map(|o| &o["id"]).collect::<Vec<_>>()
    );

    // The worker deletes both control planes; with the last one the tenant and all its rows go.
    let worker = Arc::new(Worker::new(
        app.ctx.db.clone(),
        kube,
        worker_settings(),
        WorkerMetrics::default(),
    ));
    let running = tokio::spawn(worker.run());
    support::eventually("the tenant is gone", Duration::from_secs(60), || async {
        let r = app.call(Method::GET, &path, Some(&app.admin), None).await;
        (r.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    running.abort();
    let left: i64 = sqlx::query_scalar(
        "select (select count(*) from control_planes where tenant_id = $1) + (select count(*) from operations where tenant_id = $1)
              + (select count(*) from outbox where tenant_id = $1) + (select count(*) from api_tokens where tenant_id = $1)
              + (select count(*) from placements where tenant_id = $1) + (select count(*) from audit_log where tenant_id = $1)",
    )
    .bind(id)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(left, 0);
    let load: i32 = sqlx::query_scalar("select load_tenants from datastores where name = 'etcd-default'")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(load, 0, "the DataStore's capacity is released");
}

#[tokio::test]
async fn pools_and_datastores_patch_checks_like_create_and_delete_refuses_while_in_use() {
    let app = spawn_app().await;
    assert_eq!(
        post(&app, "/api/v1/pools", &app.admin, json!({"name": "silver"}))
            .await
            .status,
        StatusCode::CREATED
    );
    let r = app
        .call(
            Method::PATCH,
            "/api/v1/pools/silver",
            Some(&app.admin),
            Some(json!({"policy": "binpack", "labels": {"tier": "2"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        (r.body["policy"].as_str(), r.body["labels"].clone()),
        (Some("binpack"), json!({"tier": "2"}))
    );
    let bad = app
        .call(
            Method::PATCH,
            "/api/v1/pools/silver",
            Some(&app.admin),
            Some(json!({"policy": "random", "labels": {"": "x"}})),
        )
        .await;
    assert_eq!(named_fields(&bad), ["policy", "labels."]);
    let renamed = app
        .call(
            Method::PATCH,
            "/api/v1/pools/silver",
            Some(&app.admin),
            Some(json!({"name": "gold"})),
        )
        .await;
    assert_eq!(named_fields(&renamed), ["name"]);
    let missing = app
        .call(
            Method::PATCH,
            "/api/v1/pools/nope",
            Some(&app.admin),
            Some(json!({})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    // DataStores: pool, labels and capacities change; the driver does not; the checks are create's.
    let created = post(
        &app,
        "/api/v1/datastores",
        &app.admin,
        datastore("n1", Some("silver"), "NATS"),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let moved = app
        .call(
            Method::PATCH,
            "/api/v1/datastores/n1",
            Some(&app.admin),
            Some(json!({"pool": "default", "labels": {"a": "b"}, "capacityTenants": 0})),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    assert_eq!(
        (
            moved.body["pool"].as_str(),
            moved.body["labels"].clone(),
            moved.body["capacityTenants"].as_i64()
        ),
        (Some("default"), json!({"a": "b"}), Some(0))
    );
    let bad = app
        .call(
            Method::PATCH,
            "/api/v1/datastores/n1",
            Some(&app.admin),
            Some(json!({"capacityTenants": -1, "capacityBytes": 0})),
        )
        .await;
    assert_eq!(named_fields(&bad), ["capacityTenants", "capacityBytes"]);
    // The NATS rule is the stored DataStore's: 409 naming the field.
    let nats = app
        .call(
            Method::PATCH,
            "/api/v1/datastores/n1",
            Some(&app.admin),
            Some(json!({"capacityTenants": 2})),
        )
        .await;
    assert_eq!(nats.status, StatusCode::CONFLICT, "{}", nats.text);
    assert_eq!(
        nats.body["errors"],
        json!([{"field": "capacityTenants", "message": "a NATS DataStore takes at most 1 tenant"}])
    );
    let null_policy = app
        .call(
            Method::PATCH,
            "/api/v1/pools/silver",
            Some(&app.admin),
            Some(json!({"policy": null})),
        )
        .await;
    assert_eq!(named_fields(&null_policy), ["policy"]);
    let driver = app
        .call(
            Method::PATCH,
            "/api/v1/datastores/n1",
            Some(&app.admin),
            Some(json!({"driver": "etcd"})),
        )
        .await;
    assert_eq!(named_fields(&driver), ["driver"]);
    let no_pool = app
        .call(
            Method::PATCH,
            "/api/v1/datastores/n1",
            Some(&app.admin),
            Some(json!({"pool": "nowhere"})),
        )
        .await;
    assert_eq!(no_pool.status, StatusCode::CONFLICT, "{}", no_pool.text);
    assert_eq!(
        no_pool.body["errors"],
        json!([{"field": "pool", "message": "no pool named \"nowhere\""}])
    );

    // The default DataStore holds control planes: its delete is refused naming them (capped, counted).
    let slug = app.tenant("inuse").await;
    let member = app.token(&slug, "tenant-member").await;
    for i in 0..12 {
        app.control_plane(&slug, &member, &format!("cp{i:02}")).await;
    }
    let r = app
        .call(
            Method::DELETE,
            "/api/v1/datastores/etcd-default",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], "https://tenantplane.dev/problems/in-use");
    assert_eq!(r.body["title"], "In use");
    let named: Vec<String> = (0..10).map(|i| format!("{slug}/cp{i:02}")).collect();
    assert_eq!(r.body["usedBy"], json!({"count": 12, "items": named}));
    assert_eq!(
        r.body["detail"],
        format!(
            "DataStore \"etcd-default\" is in use: 12 control planes are placed on it ({} and 2 more); delete or move them first",
            named.join(", ")
        )
    );
    // The pool holding DataStores is refused too, naming them.
    let r = app
        .call(Method::DELETE, "/api/v1/pools/default", Some(&app.admin), None)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(
        r.body["usedBy"],
        json!({"count": 2, "items": ["etcd-default", "n1"]})
    );

    // Unused: deleted (204), then gone; an emptied pool goes too.
    let r = app
        .call(Method::DELETE, "/api/v1/datastores/n1", Some(&app.admin), None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(
        app.call(Method::GET, "/api/v1/datastores/n1", Some(&app.admin), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let r = app
        .call(Method::DELETE, "/api/v1/pools/silver", Some(&app.admin), None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert_eq!(
        app.call(Method::DELETE, "/api/v1/pools/silver", Some(&app.admin), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let tenant_token = app.token(&slug, "tenant-admin").await;
    let r = app
        .call(
            Method::DELETE,
            "/api/v1/datastores/etcd-default",
            Some(&tenant_token),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

//! One test per query root field, with exact results.

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::json;

use super::{control_plane_gid, data, gql};
use crate::api::spawn_app;

fn time(v: &serde_json::Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn viewer_names_the_callers_token_tenant_role_and_expiry() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-viewer").await;
    let member = app.token(&slug, "tenant-member").await;
    let rest = app
        .call(Method::GET, "/api/v1/viewer", Some(&member), None)
        .await
        .body;
    let got = data(
        &app,
        &member,
        "{ viewer { tokenId tenant role expiresAt } }",
        json!({}),
    )
    .await;
    assert_eq!(
        (
            &got["viewer"]["tokenId"],
            &got["viewer"]["tenant"],
            &got["viewer"]["role"]
        ),
        (&rest["tokenId"], &json!(slug), &json!("TENANT_MEMBER"))
    );
    assert_eq!(time(&got["viewer"]["expiresAt"]), time(&rest["expiresAt"]));
    let admin = data(&app, &app.admin, "{ viewer { tenant role } }", json!({})).await;
    assert_eq!(
        admin,
        json!({"viewer": {"tenant": null, "role": "PLATFORM_ADMIN"}})
    );
}

#[tokio::test]
async fn tenant_returns_the_callers_tenant() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-tenant").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let got = data(
        &app,
        &viewer,
        "query($s: String!) { tenant(slug: $s) { slug displayName state labels { key value } } }",
        json!({"s": slug}),
    )
    .await;
    assert_eq!(
        got,
        json!({"tenant": {"slug": slug, "displayName": "gq-tenant", "state": "ACTIVE", "labels": []}})
    );
}

/// A page of `tenants` whose slug starts with `prefix`, after `after`, two at a time.
const TENANT_PAGE: &str = "query($p: String!, $after: String, $s: Boolean) {
    tenants(first: 2, after: $after, prefix: $p, suspended: $s) {
        nodes { slug state } edges { cursor node { slug } }
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";

#[tokio::test]
async fn tenants_pages_oldest_first_with_prefix_and_suspension_filters_for_platform_admins() {
    let app = spawn_app().await;
    let prefix = crate::support::unique("gqp");
    let mut slugs = Vec::new();
    for _ in 0..3 {
        slugs.push(app.tenant(&prefix).await);
    }
    app.tenant("gq-other").await;
    let first = data(&app, &app.admin, TENANT_PAGE, json!({"p": prefix})).await["tenants"].clone();
    let slugs_of = |page: &serde_json::Value| -> Vec<String> {
        page["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["slug"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(slugs_of(&first), slugs[..2]);
    let edges = first["edges"].as_array().unwrap();
    assert_eq!(
        first["pageInfo"],
        json!({"hasNextPage": true, "hasPreviousPage": false,
               "startCursor": edges[0]["cursor"], "endCursor": edges[1]["cursor"]})
    );
    assert_eq!(edges[1]["node"]["slug"], json!(slugs[1]));
    let vars = json!({"p": prefix, "after": first["pageInfo"]["endCursor"]});
    let second = data(&app, &app.admin, TENANT_PAGE, vars).await["tenants"].clone();
    assert_eq!(slugs_of(&second), slugs[2..]);
    assert_eq!(
        (
            &second["pageInfo"]["hasNextPage"],
            &second["pageInfo"]["hasPreviousPage"]
        ),
        (&json!(false), &json!(true))
    );

    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{}/suspend", slugs[1]),
            Some(&app.admin),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.text);
    let suspended = data(&app, &app.admin, TENANT_PAGE, json!({"p": prefix, "s": true})).await;
    assert_eq!(
        suspended["tenants"]["nodes"],
        json!([{"slug": slugs[1], "state": "SUSPENDED"}])
    );

    let bad = gql(
        &app,
        Some(&app.admin),
        "{ tenants(first: 0, after: \"x\") { nodes { slug } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        bad.body["errors"][0]["extensions"],
        json!({"code": "BAD_USER_INPUT", "fields": [
            {"field": "first", "message": "must be between 1 and 100"},
            {"field": "after", "message": "is not a cursor returned by this API"}]}),
        "{}",
        bad.text
    );
}

#[tokio::test]
async fn control_planes_pages_filters_and_resolves_placement_operations_and_audit() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-list").await;
    let member = app.token(&slug, "tenant-member").await;
    let mut ids = Vec::new();
    for name in ["one", "two", "three"] {
        ids.push(
            app.control_plane(&slug, &member, name).await["controlPlane"]["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let query = "query($t: String!, $after: String) { controlPlanes(tenant: $t, first: 2, after: $after) {
        edges { cursor node { id controlPlaneId name phase tenant } }
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";
    let first = data(&app, &member, query, json!({"t": slug})).await;
    let names: Vec<&str> = first["controlPlanes"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one", "two"]);
    assert_eq!(
        first["controlPlanes"]["edges"][0]["node"],
        json!({"id": control_plane_gid(&slug, &ids[0]), "controlPlaneId": ids[0], "name": "one", "phase": "PENDING", "tenant": slug})
    );
    assert_eq!(first["controlPlanes"]["pageInfo"]["hasNextPage"], json!(true));
    let after = first["controlPlanes"]["pageInfo"]["endCursor"].clone();
    let second = data(&app, &member, query, json!({"t": slug, "after": after})).await;
    assert_eq!(
        second["controlPlanes"]["edges"][0]["node"]["name"],
        json!("three")
    );
    // The page info is Relay's: the first and last edges' cursors, and whether pages come before and after.
    let second_cursor = second["controlPlanes"]["edges"][0]["cursor"].clone();
    assert_eq!(
        second["controlPlanes"]["pageInfo"],
        json!({"hasNextPage": false, "hasPreviousPage": true, "startCursor": second_cursor, "endCursor": second_cursor})
    );
    assert_eq!(
        first["controlPlanes"]["pageInfo"]["hasPreviousPage"],
        json!(false)
    );
    assert_eq!(
        first["controlPlanes"]["pageInfo"]["startCursor"],
        first["controlPlanes"]["edges"][0]["cursor"]
    );
    // Every edge's cursor continues after it; the last edge's is the page's end cursor.
    let edge_cursor = |i: usize| first["controlPlanes"]["edges"][i]["cursor"].clone();
    assert_eq!(edge_cursor(1), after);
    let from_first = data(
        &app,
        &member,
        "query($t: String!, $after: String) { controlPlanes(tenant: $t, after: $after) { nodes { name } } }",
        json!({"t": slug, "after": edge_cursor(0)}),
    )
    .await;
    assert_eq!(
        from_first,
        json!({"controlPlanes": {"nodes": [{"name": "two"}, {"name": "three"}]}})
    );

    // Filters as in REST, and the nested fields of one control plane.
    let detail = data(
        &app,
        &member,
        r#"query($t: String!) { controlPlanes(tenant: $t, version: "v1.33.2", status: PENDING, labels: []) { nodes {
            name spec { kubernetesVersion replicas serviceType port sizeClass offload
                        datastore { pool name labels { key } } addons { coreDNS kubeProxy konnectivity } labels { key } }
            status { phase endpoint installedVersion observedGeneration conditions { type } raw
                     addons { coreDNS { installed lastUpdate } kubeProxy { installed lastUpdate }
                              konnectivity { installed lastUpdate } ready { type status } }
                     nodeJoin { ready { type status reason } } }
            conditions { type } endpoint
            placement { dataStore overrides { resource dataStore } }
            latestOperation { kind state error }
            operations { kind state }
            auditEntries { action actor }
            generation etag } } }"#,
        json!({"t": slug}),
    )
    .await;
    let nodes = detail["controlPlanes"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let actor = nodes[0]["auditEntries"][0]["actor"].clone();
    assert!(actor.as_str().unwrap().starts_with("tenant-member:"), "{actor}");
    assert_eq!(
        nodes[0],
        json!({
            "name": "one",
            "spec": {"kubernetesVersion": "v1.33.2", "replicas": 2, "serviceType": "ClusterIP", "port": 6443,
                     "sizeClass": "small", "offload": "none",
                     "datastore": {"pool": null, "name": null, "labels": []},
                     "addons": {"coreDNS": true, "kubeProxy": true, "konnectivity": false}, "labels": []},
            "status": {"phase": "PENDING", "endpoint": null, "installedVersion": null, "observedGeneration": null,
                       "conditions": [], "raw": {},
                       "addons": {"coreDNS": {"installed": false, "lastUpdate": null},
                                  "kubeProxy": {"installed": false, "lastUpdate": null},
                                  "konnectivity": {"installed": false, "lastUpdate": null}, "ready": null},
                       "nodeJoin": {"ready": null}},
            "conditions": [], "endpoint": null,
            "placement": {"dataStore": "etcd-default", "overrides": []},
            "latestOperation": {"kind": "CREATE", "state": "PENDING", "error": null},
            "operations": [{"kind": "CREATE", "state": "PENDING"}],
            "auditEntries": [{"action": "control-plane.create", "actor": actor}],
            "generation": 1, "etag": "\"1\""
        })
    );
    let none = data(
        &app,
        &member,
        r#"query($t: String!) { controlPlanes(tenant: $t, labels: ["team=none"]) { nodes { name } pageInfo { hasNextPage } } }"#,
        json!({"t": slug}),
    )
    .await;
    assert_eq!(
        none,
        json!({"controlPlanes": {"nodes": [], "pageInfo": {"hasNextPage": false}}})
    );
}

#[tokio::test]
async fn node_resolves_control_planes_and_tenants_by_global_id() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-node").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let member = app.token(&slug, "tenant-member").await;
    let id = app.control_plane(&slug, &member, "noded").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gid = control_plane_gid(&slug, &id);
    let got = data(
        &app,
        &viewer,
        "query($id: ID!) { node(id: $id) { id __typename ... on ControlPlane { name controlPlaneId } } }",
        json!({"id": gid}),
    )
    .await;
    assert_eq!(
        got,
        json!({"node": {"id": gid, "__typename": "ControlPlane", "name": "noded", "controlPlaneId": id}})
    );
    let tenant_gid = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("Tenant:{slug}"))
    };
    let got = data(
        &app,
        &viewer,
        "query($id: ID!) { node(id: $id) { id ... on Tenant { slug } } }",
        json!({"id": tenant_gid}),
    )
    .await;
    assert_eq!(got, json!({"node": {"id": tenant_gid, "slug": slug}}));
    let junk = data(&app, &viewer, r#"{ node(id: "bm90LWFuLWlk") { id } }"#, json!({})).await;
    assert_eq!(junk, json!({"node": null}));
}

#[tokio::test]
async fn data_stores_and_pools_show_their_used_by_counts() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-ds").await;
    let member = app.token(&slug, "tenant-member").await;
    app.control_plane(&slug, &member, "user-one").await;
    app.control_plane(&slug, &member, "user-two").await;
    let got = data(
        &app,
        &app.admin,
        "{ dataStores { nodes { name pool driver endpoints capacityTenants ready cordoned usedBy } }
           pools { nodes { name policy dataStoreCount usedBy } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        got,
        json!({
            "dataStores": {"nodes": [{"name": "etcd-default", "pool": "default", "driver": "etcd", "endpoints": ["etcd-default:2379"],
                            "capacityTenants": 1_000_000, "ready": true, "cordoned": false, "usedBy": 2}]},
            "pools": {"nodes": [{"name": "default", "policy": "spread", "dataStoreCount": 1, "usedBy": 2}]}
        })
    );
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_datastore_in_the_placement_decision() {
    let app = spawn_app().await;
    let pool = tenantplane::store::datastores::pool(&app.ctx.db, "default")
        .await
        .unwrap()
        .unwrap();
    tenantplane::store::datastores::insert(
        &app.ctx.db,
        &tenantplane::store::datastores::NewDataStore {
            name: "etcd-someone-elses".into(),
            pool_id: Some(pool.id),
            driver: "etcd".into(),
            endpoints: vec!["etcd-2:2379".into()],
            secret_refs: json!({}),
            labels: json!({}),
            capacity_tenants: 0,
            capacity_bytes: None,
            ca_id: None,
        },
    )
    .await
    .unwrap();
    let slug = app.tenant("gq-redact").await;
    let member = app.token(&slug, "tenant-member").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    app.control_plane(&slug, &member, "mine").await;
    let query = "query($t: String!) { controlPlanes(tenant: $t, first: 5) { nodes { placement { dataStore decision } } } }";
    let candidates = |d: &serde_json::Value| -> Vec<String> {
        d["controlPlanes"]["nodes"][0]["placement"]["decision"]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["data_store"].as_str().unwrap().to_string())
            .collect()
    };
    let as_viewer = data(&app, &viewer, query, json!({"t": slug})).await;
    assert_eq!(candidates(&as_viewer), ["etcd-default"]);
    let as_admin = data(&app, &app.admin, query, json!({"t": slug})).await;
    let mut all = candidates(&as_admin);
    all.sort();
    assert_eq!(all, ["etcd-default", "etcd-someone-elses"]);
}

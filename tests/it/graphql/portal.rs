//! The operations the portal (issue 22) needs beyond the first schema: cordon and uncordon, drain plans,
//! placement previews, tenant quotas and the versions a control plane may move to. Each answers what its
//! REST twin answers, on real PostgreSQL.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{control_plane_gid, data, gql};
use crate::api::{App, spawn_app};

/// Registers pool `pool` (spread) and an etcd DataStore `name` in it with room for `capacity` tenants.
async fn datastore(app: &App, name: &str, pool: &str, capacity: i32) {
    let p = app
        .call(
            Method::POST,
            "/api/v1/pools",
            Some(&app.admin),
            Some(json!({"name": pool, "policy": "spread"})),
        )
        .await;
    assert!(
        [StatusCode::CREATED, StatusCode::CONFLICT].contains(&p.status),
        "{}",
        p.text
    );
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let body = json!({"name": name, "pool": pool, "driver": "etcd", "endpoints": [format!("{name}:2379")],
                      "capacityTenants": capacity, "caId": "ca-1",
                      "secrets": {"caCertificate": r("ca.crt"), "caPrivateKey": r("ca.key"),
                                  "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")}});
    let reply = app
        .call(Method::POST, "/api/v1/datastores", Some(&app.admin), Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

/// The audit actions recorded about DataStore `name`, oldest first.
async fn datastore_audit(app: &App, name: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select action from audit_log where target_kind = 'datastore' and target_id = $1 order by id",
    )
    .bind(name)
    .fetch_all(&app.ctx.db)
    .await
    .unwrap()
}

const CORDON: &str = "mutation($n: String!) { cordonDataStore(input: {name: $n}) {
    dataStore { name cordoned ready } userErrors { field message code } } }";
const UNCORDON: &str = "mutation($n: String!) { uncordonDataStore(input: {name: $n}) {
    dataStore { name cordoned ready } userErrors { field message code } } }";

#[tokio::test]
async fn cordon_and_uncordon_flip_the_data_store_and_audit_as_rest_does() {
    let app = spawn_app().await;
    let got = data(&app, &app.admin, CORDON, json!({"n": "etcd-default"})).await;
    assert_eq!(
        got["cordonDataStore"],
        json!({"dataStore": {"name": "etcd-default", "cordoned": true, "ready": true}, "userErrors": []})
    );
    let rest = app
        .call(
            Method::GET,
            "/api/v1/datastores/etcd-default",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(rest.body["cordoned"], true, "{}", rest.text);
    // A cordoned DataStore takes no new control plane.
    let slug = app.tenant("gq-cordon").await;
    let member = app.token(&slug, "tenant-member").await;
    let refused = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "late", "kubernetesVersion": "v1.33.2"})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);

    let got = data(&app, &app.admin, UNCORDON, json!({"n": "etcd-default"})).await;
    assert_eq!(
        got["uncordonDataStore"],
        json!({"dataStore": {"name": "etcd-default", "cordoned": false, "ready": true}, "userErrors": []})
    );
    assert_eq!(
        datastore_audit(&app, "etcd-default").await,
        ["datastore.cordon", "datastore.uncordon"]
    );
    let missing = gql(&app, Some(&app.admin), CORDON, json!({"n": "nope"})).await;
    assert_eq!(missing.body["data"], json!(null), "{}", missing.text);
    assert_eq!(
        missing.body["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{}",
        missing.text
    );
}

#[tokio::test]
async fn the_drain_plan_is_the_rest_plan() {
    let app = spawn_app().await;
    datastore(&app, "etcd-d1", "drain", 10).await;
    datastore(&app, "etcd-d2", "drain", 10).await;
    let slug = app.tenant("gq-drain").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "mover", "kubernetesVersion": "v1.33.2", "datastore": {"pool": "drain"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.body["controlPlane"]["id"].as_str().unwrap().to_string();
    // Spread over two empty DataStores: ties go by name.
    assert_eq!(r.body["controlPlane"]["placement"]["dataStore"], "etcd-d1");
    let query = "query($d: String!) { drainPlan(dataStore: $d) {
        controlPlaneId usage { primary overrides } from to blockedBy { reason count } } }";
    let got = data(&app, &app.admin, query, json!({"d": "etcd-d1"})).await;
    assert_eq!(
        got["drainPlan"],
        json!([{"controlPlaneId": id, "usage": {"primary": true, "overrides": []},
                "from": "etcd-d1", "to": "etcd-d2", "blockedBy": []}])
    );
    let rest = app
        .call(
            Method::GET,
            "/api/v1/datastores/etcd-d1/drain-plan",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(
        rest.body,
        json!([{"controlPlaneId": id, "usage": "primary", "from": "etcd-d1", "to": "etcd-d2", "blockedBy": []}])
    );
    // With the other DataStore cordoned, nothing fits, and the plan says why.
    data(&app, &app.admin, CORDON, json!({"n": "etcd-d2"})).await;
    let got = data(&app, &app.admin, query, json!({"d": "etcd-d1"})).await;
    assert_eq!(got["drainPlan"][0]["to"], json!(null), "{:#}", got["drainPlan"]);
    assert_eq!(
        got["drainPlan"][0]["blockedBy"][0]["reason"], "cordoned",
        "{:#}",
        got["drainPlan"]
    );
    let empty = data(&app, &app.admin, query, json!({"d": "etcd-d2"})).await;
    assert_eq!(empty["drainPlan"], json!([]));
}

const PREVIEW: &str = "query($t: String!, $i: CreateControlPlaneInput!) {
    placementPreview(tenant: $t, input: $i) { dataStore overrides { resource dataStore } decision } }";

/// The candidates' DataStore names of a decision.
fn candidates(decision: &Value) -> Vec<String> {
    decision["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["data_store"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_placement_preview_shows_where_a_create_would_land_redacted_and_reserves_nothing() {
    let app = spawn_app().await;
    datastore(&app, "etcd-p1", "preview", 10).await;
    datastore(&app, "etcd-p2", "preview", 10).await;
    let slug = app.tenant("gq-preview").await;
    let member = app.token(&slug, "tenant-member").await;
    let input = json!({"tenant": slug, "name": "soon", "kubernetesVersion": "v1.34.1",
                       "datastore": {"pool": "preview"}});
    let got = data(&app, &member, PREVIEW, json!({"t": slug, "i": input})).await;
    let preview = &got["placementPreview"];
    assert_eq!(preview["dataStore"], "etcd-p1", "{preview:#}");
    assert_eq!(preview["overrides"], json!([]));
    assert_eq!(preview["decision"]["primary"], "etcd-p1");
    // A tenant sees its chosen DataStore's candidate only; a platform admin every one, with reasons.
    assert_eq!(candidates(&preview["decision"]), ["etcd-p1"]);
    let admin = data(&app, &app.admin, PREVIEW, json!({"t": slug, "i": input})).await;
    let decision = &admin["placementPreview"]["decision"];
    assert_eq!(candidates(decision), ["etcd-p1", "etcd-p2"], "{decision:#}");
    assert_eq!(decision["candidates"][1]["outcome"], json!({"scored": 0.9}));
    // Nothing was reserved: the create itself lands there, and the load counts one.
    let created = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "soon", "kubernetesVersion": "v1.34.1", "datastore": {"pool": "preview"}})),
        )
        .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.text);
    assert_eq!(created.body["controlPlane"]["placement"]["dataStore"], "etcd-p1");
    let used = data(
        &app,
        &app.admin,
        "{ dataStores { nodes { name usedBy } } }",
        json!({}),
    )
    .await;
    let p1 = used["dataStores"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "etcd-p1")
        .unwrap()
        .clone();
    assert_eq!(p1, json!({"name": "etcd-p1", "usedBy": 1}));
    // The next preview spreads to the emptier one.
    let next = data(&app, &member, PREVIEW, json!({"t": slug, "i": input})).await;
    assert_eq!(next["placementPreview"]["dataStore"], "etcd-p2");
}

#[tokio::test]
async fn a_placement_preview_refuses_invalid_input_with_the_create_field_errors() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-preview-bad").await;
    let member = app.token(&slug, "tenant-member").await;
    let input = json!({"tenant": slug, "name": "Bad_Name", "kubernetesVersion": "v9.0.0", "replicas": 12});
    let create = data(
        &app,
        &member,
        "mutation($i: CreateControlPlaneInput!) { createControlPlane(input: $i) { userErrors { field message } } }",
        json!({"i": input}),
    )
    .await;
    let expected = create["createControlPlane"]["userErrors"].clone();
    assert_eq!(expected.as_array().unwrap().len(), 3, "{expected:#}");
    let a = gql(&app, Some(&member), PREVIEW, json!({"t": slug, "i": input})).await;
    assert_eq!(a.body["data"], json!(null), "{}", a.text);
    assert_eq!(a.body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
    assert_eq!(a.body["errors"][0]["extensions"]["fields"], expected);
    // A service type the create refuses, named the same way.
    let bad_type =
        json!({"tenant": slug, "name": "ok", "kubernetesVersion": "v1.34.1", "serviceType": "Bogus"});
    let a = gql(&app, Some(&member), PREVIEW, json!({"t": slug, "i": bad_type})).await;
    assert_eq!(
        a.body["errors"][0]["extensions"]["fields"][0]["field"], "serviceType",
        "{}",
        a.text
    );
    // The input's tenant must be the one previewed.
    let other = json!({"tenant": "someone-else", "name": "ok", "kubernetesVersion": "v1.34.1"});
    let a = gql(&app, Some(&member), PREVIEW, json!({"t": slug, "i": other})).await;
    assert_eq!(
        a.body["errors"][0]["extensions"]["fields"],
        json!([{"field": "tenant", "message": "must be the tenant the preview is for"}]),
        "{}",
        a.text
    );
    // Nothing fits: a conflict saying why.
    data(&app, &app.admin, CORDON, json!({"n": "etcd-default"})).await;
    let fine = json!({"tenant": slug, "name": "ok", "kubernetesVersion": "v1.34.1"});
    let a = gql(&app, Some(&member), PREVIEW, json!({"t": slug, "i": fine})).await;
    assert_eq!(
        a.body["errors"][0]["extensions"]["code"], "CONFLICT",
        "{}",
        a.text
    );
    assert_eq!(
        a.body["errors"][0]["message"], "no DataStore fits: 1 cordoned",
        "{}",
        a.text
    );
}

const QUOTAS: &str = "query($t: String!) { tenant(slug: $t) { quotas {
    controlPlanes { limit used default } tokens { limit used default } } } }";
const SET_QUOTAS: &str = "mutation($i: SetTenantQuotasInput!) { setTenantQuotas(input: $i) {
    quotas { controlPlanes { limit used default } tokens { limit used default } }
    userErrors { field message code } } }";

#[tokio::test]
async fn tenant_quotas_show_usage_and_set_tenant_quotas_is_the_rest_put() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-quotas").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let member = app.token(&slug, "tenant-member").await;
    app.control_plane(&slug, &member, "counted").await;
    let rest = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/quotas"),
            Some(&viewer),
            None,
        )
        .await;
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.text);
    let got = data(&app, &viewer, QUOTAS, json!({"t": slug})).await;
    assert_eq!(got["tenant"]["quotas"], rest.body);
    assert_eq!(got["tenant"]["quotas"]["controlPlanes"]["used"], 1);
    assert_eq!(got["tenant"]["quotas"]["controlPlanes"]["default"], true);

    let set = data(
        &app,
        &app.admin,
        SET_QUOTAS,
        json!({"i": {"tenant": slug, "controlPlanes": 3}}),
    )
    .await;
    let tokens = &got["tenant"]["quotas"]["tokens"];
    assert_eq!(
        set["setTenantQuotas"],
        json!({"quotas": {"controlPlanes": {"limit": 3, "used": 1, "default": false}, "tokens": tokens},
               "userErrors": []})
    );
    let rest = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/quotas"),
            Some(&viewer),
            None,
        )
        .await;
    assert_eq!(set["setTenantQuotas"]["quotas"], rest.body);
    let audited: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where action = 'tenant.quotas' and target_id = (select id::text from tenants where slug = $1)",
    )
    .bind(&slug)
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(audited, ["tenant.quotas"]);

    let bad = data(
        &app,
        &app.admin,
        SET_QUOTAS,
        json!({"i": {"tenant": slug, "controlPlanes": -1, "tokens": 100001}}),
    )
    .await;
    assert_eq!(
        bad["setTenantQuotas"],
        json!({"quotas": null, "userErrors": [
            {"field": "controlPlanes", "message": "must be between 0 and 100000", "code": "INVALID"},
            {"field": "tokens", "message": "must be between 0 and 100000", "code": "INVALID"}]})
    );
    // Another tenant's token sees no tenant at all.
    let other = app.tenant("gq-quotas-other").await;
    let intruder = app.token(&other, "tenant-admin").await;
    let hidden = gql(&app, Some(&intruder), QUOTAS, json!({"t": slug})).await;
    assert_eq!(hidden.body, json!({"data": {"tenant": null}}), "{}", hidden.text);
}

#[tokio::test]
async fn allowed_upgrades_are_the_lines_the_update_accepts() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-upgrades").await;
    let member = app.token(&slug, "tenant-member").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = app.control_plane(&slug, &member, "old").await;
    let gid = control_plane_gid(&slug, created["controlPlane"]["id"].as_str().unwrap());
    let query = "query($id: ID!) { node(id: $id) { ... on ControlPlane { spec { kubernetesVersion } allowedUpgrades etag } } }";
    let node = |token: String| {
        let (app, gid) = (&app, gid.clone());
        async move { data(app, &token, query, json!({"id": gid})).await["node"].clone() }
    };
    // v1.33.2 in the default range v1.30-v1.34: its own line and the next.
    let cp = node(member.clone()).await;
    assert_eq!(cp["allowedUpgrades"], json!(["v1.33", "v1.34"]), "{cp:#}");
    let update =
        "mutation($id: ID!, $v: String!) { updateControlPlane(input: {id: $id, kubernetesVersion: $v}) {
        controlPlane { spec { kubernetesVersion } } userErrors { field code } } }";
    // A line not listed is refused by the update.
    let refused = data(&app, &member, update, json!({"id": gid, "v": "v1.32.9"})).await;
    assert_eq!(
        refused["updateControlPlane"]["userErrors"],
        json!([{"field": "kubernetesVersion", "code": "CONFLICT"}])
    );
    let moved = data(&app, &member, update, json!({"id": gid, "v": "v1.34.0"})).await;
    assert_eq!(
        moved["updateControlPlane"],
        json!({"controlPlane": {"spec": {"kubernetesVersion": "v1.34.0"}}, "userErrors": []})
    );
    let cp = node(member.clone()).await;
    assert_eq!(cp["allowedUpgrades"], json!(["v1.34"]), "{cp:#}");
    // Being deleted, it may move nowhere.
    let delete = "mutation($id: ID!) { deleteControlPlane(input: {id: $id}) { userErrors { message } } }";
    data(&app, &admin, delete, json!({"id": gid})).await;
    let cp = node(member).await;
    assert_eq!(cp["allowedUpgrades"], json!([]), "{cp:#}");
}

//! One test per mutation: results, and user errors next to them (errors as data).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{control_plane_gid, data, gql};
use crate::api::{App, spawn_app};

const CREATE: &str = "mutation($input: CreateControlPlaneInput!) { createControlPlane(input: $input) {
    controlPlane { name tenant phase generation spec { kubernetesVersion replicas sizeClass labels { key value } }
                   placement { dataStore } latestOperation { kind state } }
    operation { kind state }
    userErrors { field message code } } }";

async fn create(app: &App, token: &str, input: Value) -> Value {
    data(app, token, CREATE, json!({"input": input})).await["createControlPlane"].clone()
}

#[tokio::test]
async fn create_control_plane_records_it_with_its_operation() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-create").await;
    let member = app.token(&slug, "tenant-member").await;
    let got = create(
        &app,
        &member,
        json!({"tenant": slug, "name": "made", "kubernetesVersion": "v1.33.2", "sizeClass": "medium",
               "labels": [{"key": "team", "value": "web"}]}),
    )
    .await;
    assert_eq!(
        got,
        json!({
            "controlPlane": {"name": "made", "tenant": slug, "phase": "PENDING", "generation": 1,
                             "spec": {"kubernetesVersion": "v1.33.2", "replicas": 2, "sizeClass": "medium",
                                      "labels": [{"key": "team", "value": "web"}]},
                             "placement": {"dataStore": "etcd-default"},
                             "latestOperation": {"kind": "CREATE", "state": "PENDING"}},
            "operation": {"kind": "CREATE", "state": "PENDING"},
            "userErrors": []
        })
    );
    // The same record REST shows.
    let list = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(list.body["items"][0]["name"], "made");
    assert_eq!(list.body["items"][0]["labels"], json!({"team": "web"}));
}

#[tokio::test]
async fn create_control_plane_reports_the_same_field_errors_as_rest() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-invalid").await;
    let member = app.token(&slug, "tenant-member").await;
    let rest = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "Bad_Name", "kubernetesVersion": "v9.0.0", "replicas": 12})),
        )
        .await;
    assert_eq!(rest.status, StatusCode::UNPROCESSABLE_ENTITY);
    let expected: Vec<Value> = rest.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!({"field": e["field"], "message": e["message"], "code": "INVALID"}))
        .collect();
    assert_eq!(expected.len(), 3, "{}", rest.text);
    let got = create(
        &app,
        &member,
        json!({"tenant": slug, "name": "Bad_Name", "kubernetesVersion": "v9.0.0", "replicas": 12}),
    )
    .await;
    assert_eq!(
        got,
        json!({"controlPlane": null, "operation": null, "userErrors": expected})
    );
    let bad_enum = create(
        &app,
        &member,
        json!({"tenant": slug, "name": "ok", "kubernetesVersion": "v1.33.2", "serviceType": "Ingress"}),
    )
    .await;
    assert_eq!(bad_enum["userErrors"][0]["field"], "serviceType");
    assert_eq!(bad_enum["userErrors"][0]["code"], "INVALID");
    let count = data(
        &app,
        &member,
        "query($t: String!) { controlPlanes(tenant: $t) { nodes { name } } }",
        json!({"t": slug}),
    )
    .await;
    assert_eq!(count, json!({"controlPlanes": {"nodes": []}}));
}

#[tokio::test]
async fn create_control_plane_with_a_taken_name_is_a_conflict() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-taken").await;
    let member = app.token(&slug, "tenant-member").await;
    let input = json!({"tenant": slug, "name": "twice", "kubernetesVersion": "v1.33.2"});
    assert_eq!(
        create(&app, &member, input.clone()).await["userErrors"],
        json!([])
    );
    let got = create(&app, &member, input).await;
    assert_eq!(
        got,
        json!({"controlPlane": null, "operation": null, "userErrors": [
            {"field": null, "message": "a control plane named \"twice\" already exists in this tenant", "code": "CONFLICT"}]})
    );
}

const UPDATE: &str = "mutation($input: UpdateControlPlaneInput!) { updateControlPlane(input: $input) {
    controlPlane { name generation etag spec { replicas labels { key value } } } operation { kind state }
    userErrors { field message code } } }";

#[tokio::test]
async fn update_control_plane_changes_the_spec_and_checks_if_match() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-update").await;
    let member = app.token(&slug, "tenant-member").await;
    let id = app.control_plane(&slug, &member, "upd").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gid = control_plane_gid(&slug, &id);
    let input =
        json!({"id": gid, "replicas": 1, "labels": [{"key": "tier", "value": "gold"}], "ifMatch": "\"1\""});
    let got = data(&app, &member, UPDATE, json!({"input": input})).await;
    assert_eq!(
        got["updateControlPlane"],
        json!({"controlPlane": {"name": "upd", "generation": 2, "etag": "\"2\"",
                                "spec": {"replicas": 1, "labels": [{"key": "tier", "value": "gold"}]}},
               "operation": {"kind": "UPDATE", "state": "PENDING"}, "userErrors": []})
    );
    let stale = data(&app, &member, UPDATE, json!({"input": input})).await;
    assert_eq!(
        stale["updateControlPlane"],
        json!({"controlPlane": null, "operation": null, "userErrors": [{"field": "ifMatch",
               "message": "the control plane changed: its ETag is now \"2\"; fetch it and retry",
               "code": "PRECONDITION_FAILED"}]})
    );
    let downgrade = data(
        &app,
        &member,
        UPDATE,
        json!({"input": {"id": gid, "kubernetesVersion": "v1.32.0"}}),
    )
    .await;
    assert_eq!(
        downgrade["updateControlPlane"]["userErrors"][0],
        json!({"field": "kubernetesVersion", "message": "downgrading from v1.33.2 to v1.32.0 is not supported",
               "code": "CONFLICT"})
    );
}

#[tokio::test]
async fn delete_control_plane_queues_one_delete() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-delete").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let id = app.control_plane(&slug, &admin, "doomed").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let query = "mutation($id: ID!) { deleteControlPlane(input: {id: $id}) {
        controlPlane { name phase } operation { id kind state } userErrors { field message code } } }";
    let vars = json!({"id": control_plane_gid(&slug, &id)});
    let first = data(&app, &admin, query, vars.clone()).await["deleteControlPlane"].clone();
    assert_eq!(
        (
            &first["controlPlane"],
            &first["operation"]["kind"],
            &first["operation"]["state"],
            &first["userErrors"]
        ),
        (
            &json!({"name": "doomed", "phase": "DELETING"}),
            &json!("DELETE"),
            &json!("PENDING"),
            &json!([])
        )
    );
    let again = data(&app, &admin, query, vars).await["deleteControlPlane"].clone();
    assert_eq!(again["operation"]["id"], first["operation"]["id"]);
}

#[tokio::test]
async fn mint_token_hands_out_a_working_token_once() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-mint").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let query = "mutation($input: MintTokenInput!) { mintToken(input: $input) {
        token record { role description revokedAt } userErrors { field message code } } }";
    let got = data(
        &app,
        &admin,
        query,
        json!({"input": {"tenant": slug, "role": "TENANT_VIEWER", "ttlSeconds": 600, "description": "dashboard"}}),
    )
    .await["mintToken"]
        .clone();
    assert_eq!(
        (&got["record"], &got["userErrors"]),
        (
            &json!({"role": "TENANT_VIEWER", "description": "dashboard", "revokedAt": null}),
            &json!([])
        )
    );
    let token = got["token"].as_str().unwrap();
    let me = data(&app, token, "{ viewer { role tenant } }", json!({})).await;
    assert_eq!(me, json!({"viewer": {"role": "TENANT_VIEWER", "tenant": slug}}));
    let refused = data(
        &app,
        &admin,
        query,
        json!({"input": {"tenant": slug, "role": "PLATFORM_ADMIN"}}),
    )
    .await["mintToken"]
        .clone();
    assert_eq!(
        refused,
        json!({"token": null, "record": null, "userErrors": [{"field": "role",
               "message": "a tenant token can be tenant-admin, tenant-member or tenant-viewer", "code": "INVALID"}]})
    );
}

#[tokio::test]
async fn revoke_token_makes_it_stop_working() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-revoke").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let victim = app.token(&slug, "tenant-viewer").await;
    let jti = data(&app, &victim, "{ viewer { tokenId } }", json!({})).await["viewer"]["tokenId"].clone();
    let got = data(
        &app,
        &admin,
        "mutation($t: String!, $id: UUID!) { revokeToken(input: {tenant: $t, tokenId: $id}) {
            token { id role } userErrors { field } } }",
        json!({"t": slug, "id": jti}),
    )
    .await;
    assert_eq!(
        got,
        json!({"revokeToken": {"token": {"id": jti, "role": "TENANT_VIEWER"}, "userErrors": []}})
    );
    let after = gql(&app, Some(&victim), "{ viewer { role } }", json!({})).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert_eq!(after.body["detail"], "the token was revoked");
}

#[tokio::test]
async fn inputs_the_cluster_cannot_satisfy_are_user_errors_naming_the_field() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-unsat").await;
    let member = app.token(&slug, "tenant-member").await;
    let got = create(
        &app,
        &member,
        json!({"tenant": slug, "name": "1prod", "kubernetesVersion": "v1.33.2"}),
    )
    .await;
    assert_eq!(got["controlPlane"], Value::Null);
    assert_eq!(got["userErrors"][0]["field"], "name", "{got}");
    assert_eq!(got["userErrors"][0]["code"], "INVALID");
    let got = create(
        &app,
        &member,
        json!({"tenant": slug, "name": "np", "kubernetesVersion": "v1.33.2", "serviceType": "NodePort"}),
    )
    .await;
    assert_eq!(
        got["userErrors"],
        json!([{"field": "port", "code": "INVALID",
                "message": "6443 is outside the cluster's NodePort range 30000-32767: a NodePort control plane serves on its node port, so pick a port in that range"}])
    );
}

const CREATE_JOIN_TOKEN: &str = "mutation($input: CreateJoinTokenInput!) { createJoinToken(input: $input) {
    joinToken { id token joinCommand } userErrors { field message code } } }";

#[tokio::test]
async fn join_token_mutations_name_the_field_refuse_members_and_wait_for_a_served_control_plane() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-join").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let member = app.token(&slug, "tenant-member").await;
    let id = app.control_plane(&slug, &member, "nodes").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gid = control_plane_gid(&slug, &id);
    let create = |token: String, input: Value| {
        let app = &app;
        async move { gql(app, Some(&token), CREATE_JOIN_TOKEN, json!({"input": input})).await }
    };

    // Field errors as data, named as in the input (and as in REST).
    let a = create(
        admin.clone(),
        json!({"tenant": slug, "controlPlane": gid, "ttlSeconds": 0, "description": "x".repeat(257)}),
    )
    .await;
    assert_eq!(
        a.body,
        json!({"data": {"createJoinToken": {"joinToken": null, "userErrors": [
            {"field": "ttlSeconds", "message": "must be between 1 and 604800 seconds (7 days)", "code": "INVALID"},
            {"field": "description", "message": "must be at most 256 characters", "code": "INVALID"}]}}}),
        "{}",
        a.text
    );
    // Not served yet: a conflict, as REST's 409; the database id works as well as the global id.
    let a = create(
        admin.clone(),
        json!({"tenant": slug, "controlPlane": id, "ttlSeconds": 600}),
    )
    .await;
    assert_eq!(
        a.body["data"]["createJoinToken"]["userErrors"],
        json!([{"field": null, "code": "CONFLICT",
                "message": "the control plane is Pending, not Ready yet: nodes cannot join it yet"}]),
        "{}",
        a.text
    );
    // A member is refused; another tenant's global id is not found.
    let a = create(member.clone(), json!({"tenant": slug, "controlPlane": gid})).await;
    assert_eq!(a.body["data"], Value::Null, "{}", a.text);
    assert_eq!(
        a.body["errors"][0]["extensions"]["code"], "FORBIDDEN",
        "{}",
        a.text
    );
    let other = app.tenant("gq-join-other").await;
    let a = create(admin.clone(), json!({"tenant": other, "controlPlane": gid})).await;
    assert_eq!(
        a.body["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{}",
        a.text
    );

    // The list is empty; revoking an unknown token is not found.
    let listed = data(
        &app,
        &admin,
        "query($t: String!, $cp: ID!) { joinTokens(tenant: $t, controlPlane: $cp) { id description expiresAt createdAt } }",
        json!({"t": slug, "cp": gid}),
    )
    .await;
    assert_eq!(listed, json!({"joinTokens": []}));
    let a = gql(
        &app,
        Some(&admin),
        "mutation($t: String!, $cp: ID!) { revokeJoinToken(input: {tenant: $t, controlPlane: $cp, tokenId: \"abc123\"}) { tokenId userErrors { field } } }",
        json!({"t": slug, "cp": gid}),
    )
    .await;
    assert_eq!(a.body["data"], Value::Null, "{}", a.text);
    assert_eq!(
        a.body["errors"][0]["extensions"]["code"], "NOT_FOUND",
        "{}",
        a.text
    );
    assert_eq!(
        a.body["errors"][0]["message"], "join token not found",
        "{}",
        a.text
    );
}

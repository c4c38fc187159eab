//! Limits (depth, complexity, page size, request size, introspection, GET), the statement count of a
//! 100-item page, GraphiQL, and the committed SDL.

use reqwest::StatusCode;
use serde_json::json;
use tenantplane::{api::graphql::GraphqlSettings, domain::Role, service};

use super::{answer, data, gql};
use crate::api::{spawn_app, spawn_app_with_graphql, statements};

#[tokio::test]
async fn over_deep_queries_are_refused() {
    let app = spawn_app().await;
    let deep = "{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } } }";
    let a = gql(&app, Some(&app.admin), deep, json!({})).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.body,
        json!({"data": null, "errors": [{"message": "Query is nested too deep."}]}),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn over_complex_queries_are_refused() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-complex").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    // 100 items × 51 fields > 5000.
    let fields: String = (0..50).map(|i| format!("f{i}: name ")).collect();
    let query = format!(r#"{{ controlPlanes(tenant: "{slug}", first: 100) {{ nodes {{ {fields} }} }} }}"#);
    let a = gql(&app, Some(&viewer), &query, json!({})).await;
    assert_eq!(
        a.body,
        json!({"data": null, "errors": [{"message": "Query is too complex."}]}),
        "{}",
        a.text
    );
    // The same selection on a page of 10 is fine.
    let small = query.replace("first: 100", "first: 10");
    data(&app, &viewer, &small, json!({})).await;
}

#[tokio::test]
async fn the_page_size_is_capped_at_100() {
    let app = spawn_app().await;
    let slug = app.tenant("gq-page").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let a = gql(
        &app,
        Some(&viewer),
        "query($t: String!) { controlPlanes(tenant: $t, first: 101) { nodes { name } } }",
        json!({"t": slug}),
    )
    .await;
    assert_eq!(
        a.body,
        json!({"data": null, "errors": [{"message": "first: must be between 1 and 100", "locations": [{"line": 1, "column": 22}],
               "path": ["controlPlanes"], "extensions": {"code": "BAD_USER_INPUT",
               "fields": [{"field": "first", "message": "must be between 1 and 100"}]}}]}),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn oversized_requests_get_413_and_get_runs_only_queries() {
    let app = spawn_app().await;
    let padding = " ".repeat(40 * 1024);
    let a = gql(
        &app,
        Some(&app.admin),
        &format!("{{ viewer {{ role }} {padding} }}"),
        json!({}),
    )
    .await;
    assert_eq!(
        (a.status, a.content_type.as_str(), &a.body["detail"]),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "application/problem+json",
            &json!("the GraphQL request exceeds 32768 bytes")
        )
    );
    let get = |q: &str| {
        let encoded: String = q
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        app.http
            .get(format!("{}/graphql?query={encoded}", app.base))
            .bearer_auth(&app.admin)
            .send()
    };
    let ok = answer(get("{ viewer { role } }").await.unwrap()).await;
    assert_eq!(ok.body, json!({"data": {"viewer": {"role": "PLATFORM_ADMIN"}}}));
    let mutation = answer(
        get(r#"mutation { mintToken(input: {tenant: "x", role: TENANT_VIEWER}) { token } }"#)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (mutation.status, &mutation.body["detail"]),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            &json!("only queries run over GET; send mutations with POST and subscriptions over WebSocket")
        )
    );
    let page = app
        .http
        .get(format!("{}/graphql", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("graphiql"), "GraphiQL page: {html}");
}

#[tokio::test]
async fn introspection_can_be_turned_off() {
    let app = spawn_app_with_graphql(GraphqlSettings {
        introspection: false,
        ..Default::default()
    })
    .await;
    let a = gql(
        &app,
        Some(&app.admin),
        "{ __schema { queryType { name } } }",
        json!({}),
    )
    .await;
    // async-graphql answers a disabled `__schema` with null (no error, nothing revealed).
    assert_eq!(a.body, json!({"data": {"__schema": null}}), "{}", a.text);
    let typed = gql(
        &app,
        Some(&app.admin),
        r#"{ __type(name: "ControlPlane") { name } }"#,
        json!({}),
    )
    .await;
    assert_eq!(typed.body, json!({"data": {"__type": null}}), "{}", typed.text);
    assert_eq!(
        data(&app, &app.admin, "{ viewer { role } }", json!({})).await,
        json!({"viewer": {"role": "PLATFORM_ADMIN"}})
    );
}

#[tokio::test]
async fn a_page_of_100_control_planes_runs_a_fixed_number_of_statements() {
    let app = spawn_app().await;
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let slug = app.tenant("gq-count").await;
    crate::api::set_quotas(&app, &slug, json!({"controlPlanes": 1000})).await;
    let tenant = crate::api::tenant_id(&app, &slug).await;
    let member =
        service::tokens::mint_unchecked(&app.ctx, Some(tenant), Role::TenantMember, 3600, "count", "tests")
            .await
            .unwrap()
            .token;
    for i in 0..100 {
        app.control_plane(&slug, &member, &format!("cp-{i:03}")).await;
    }
    let query = "query($t: String!, $n: Int!) { controlPlanes(tenant: $t, first: $n) { nodes {
        name placement { dataStore overrides { resource } } latestOperation { kind state }
        operations { kind } auditEntries { action } } pageInfo { hasNextPage } } }";
    let mut counts = Vec::new();
    for n in [100, 10, 100] {
        let before = statements(&app).await;
        let got = data(&app, &member, query, json!({"t": slug, "n": n})).await;
        let after = statements(&app).await;
        let nodes = got["controlPlanes"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), n as usize);
        assert!(nodes.iter().all(|cp| cp["latestOperation"]
            == json!({"kind": "CREATE", "state": "PENDING"})
            && cp["placement"]["dataStore"] == "etcd-default"
            && cp["auditEntries"] == json!([{"action": "control-plane.create"}])));
        counts.push(after - before);
    }
    // Token check (jti; the verifying key is cached), tenant, page, placements, latest operations,
    // operations, audit entries.
    assert_eq!(
        counts,
        [7, 7, 7],
        "statements per request for 100, 10 and 100 items"
    );
}

#[test]
fn the_committed_sdl_matches_the_schema() {
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/schema.graphql")).unwrap();
    assert!(
        committed == tenantplane::api::graphql::sdl(),
        "schema/schema.graphql is stale: run `cargo run -- sdl > schema/schema.graphql` (or `make generate`)"
    );
}

#[tokio::test]
async fn requests_over_the_alias_or_root_field_caps_are_refused() {
    let app = spawn_app().await;
    let refused = |message: &str| json!({"data": null, "errors": [{"message": message}]});
    let aliases: String = (0..51).map(|i| format!("a{i}: role ")).collect();
    let a = gql(
        &app,
        Some(&app.admin),
        &format!("{{ viewer {{ {aliases} }} }}"),
        json!({}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.body,
        refused("Query has too many aliases (51; at most 50)."),
        "{}",
        a.text
    );
    let roots: String = (0..21).map(|i| format!("v{i}: viewer {{ role }} ")).collect();
    let a = gql(&app, Some(&app.admin), &format!("{{ {roots} }}"), json!({})).await;
    assert_eq!(
        a.body,
        refused("Query has too many root fields (21; at most 20)."),
        "{}",
        a.text
    );
    // At the caps, the request runs.
    let aliases: String = (0..50).map(|i| format!("a{i}: role ")).collect();
    data(
        &app,
        &app.admin,
        &format!("{{ viewer {{ {aliases} }} }}"),
        json!({}),
    )
    .await;
}

#[tokio::test]
async fn aliases_are_counted_through_every_fragment_spread() {
    let app = spawn_app_with_graphql(GraphqlSettings {
        max_aliases: 3,
        ..Default::default()
    })
    .await;
    let query = "fragment F on Viewer { a: role b: role } { viewer { ...F ... on Viewer { ...F } } }";
    let a = gql(&app, Some(&app.admin), query, json!({})).await;
    assert_eq!(
        a.body,
        json!({"data": null, "errors": [{"message": "Query has too many aliases (4; at most 3)."}]}),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn an_operation_over_the_caps_on_a_websocket_is_refused_alone() {
    use super::{Incoming, ws_next, ws_ready, ws_send};
    let app = spawn_app().await;
    let mut ws = ws_ready(&app, &app.admin).await;
    let roots: String = (0..21).map(|i| format!("v{i}: viewer {{ role }} ")).collect();
    ws_send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": format!("{{ {roots} }}")}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws, std::time::Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "error", "id": "1", "payload": [
            {"message": "Query has too many root fields (21; at most 20).", "extensions": {"code": "BAD_REQUEST"}}]}))
    );
    ws_send(
        &mut ws,
        json!({"id": "2", "type": "subscribe", "payload": {"query": "{ viewer { role } }"}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws, std::time::Duration::from_secs(5)).await,
        Incoming::Json(
            json!({"type": "next", "id": "2", "payload": {"data": {"viewer": {"role": "PLATFORM_ADMIN"}}}})
        )
    );
}

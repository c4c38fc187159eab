//! The REST authorization matrix, repeated over every GraphQL root field. The fields are read from the
//! schema itself (introspection), so a new root field without a rule and an operation here fails.

use std::{collections::BTreeMap, time::Duration};

use reqwest::StatusCode;
use serde_json::json;
use tenantplane::domain::Role;

use super::{Incoming, control_plane_gid, gql, ws_next, ws_open, ws_send};
use crate::api::auth_matrix::{Fixture, fixture, role_below};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    AnyToken,
    Platform,
    Tenant(Role),
}

/// Per root field (`Query.x`, `Mutation.x`, `Subscription.x`): who may call it, and an operation using it
/// (`$T` is the tenant slug, `$CP` the control plane's global id, `$TOKEN` a token id, `$NEW` a fresh name).
fn rules() -> BTreeMap<&'static str, (Needs, &'static str)> {
    use Needs::*;
    BTreeMap::from([
        ("Query.viewer", (AnyToken, "{ viewer { role } }")),
        (
            "Query.tenant",
            (Tenant(Role::TenantViewer), r#"{ tenant(slug: "$T") { slug } }"#),
        ),
        ("Query.tenants", (Platform, "{ tenants { nodes { slug } } }")),
        (
            "Query.controlPlanes",
            (
                Tenant(Role::TenantViewer),
                r#"{ controlPlanes(tenant: "$T") { nodes { name controlPlaneId } } }"#,
            ),
        ),
        (
            "Query.node",
            (
                Tenant(Role::TenantViewer),
                r#"{ node(id: "$CP") { id ... on ControlPlane { name controlPlaneId } } }"#,
            ),
        ),
        (
            "Query.joinTokens",
            (
                Tenant(Role::TenantAdmin),
                r#"{ joinTokens(tenant: "$T", controlPlane: "$CP") { id expiresAt } }"#,
            ),
        ),
        (
            "Query.operation",
            (
                Tenant(Role::TenantViewer),
                r#"{ operation(tenant: "$T", id: "$CPID") { id state } }"#,
            ),
        ),
        (
            "Query.operations",
            (
                Tenant(Role::TenantViewer),
                r#"{ operations(tenant: "$T") { nodes { id state stage } } }"#,
            ),
        ),
        (
            "Query.dataStores",
            (Platform, "{ dataStores { nodes { name usedBy } } }"),
        ),
        ("Query.pools", (Platform, "{ pools { nodes { name usedBy } } }")),
        (
            "Query.drainPlan",
            (
                Platform,
                r#"{ drainPlan(dataStore: "etcd-1") { controlPlaneId to } }"#,
            ),
        ),
        (
            "Query.placementPreview",
            (
                Tenant(Role::TenantMember),
                r#"{ placementPreview(tenant: "$T", input: {tenant: "$T", name: "$NEW", kubernetesVersion: "v1.33.2"}) { dataStore } }"#,
            ),
        ),
        (
            "Query.parentOperation",
            (
                Platform,
                r#"{ parentOperation(id: "00000000-0000-0000-0000-000000000001") { id state counts { running } } }"#,
            ),
        ),
        (
            "Mutation.migrateControlPlane",
            (
                Platform,
                r#"mutation { migrateControlPlane(input: {id: "$CP", target: "etcd-1"}) { operation { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.abortMigration",
            (
                Platform,
                r#"mutation { abortMigration(input: {id: "$CP"}) { operation { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.drainDataStore",
            (
                Platform,
                r#"mutation { drainDataStore(input: {name: "etcd-1", concurrency: 1}) { operation { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.rebalancePool",
            (
                Platform,
                r#"mutation { rebalancePool(input: {name: "gold", concurrency: 1}) { operation { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.cordonDataStore",
            (
                Platform,
                r#"mutation { cordonDataStore(input: {name: "etcd-1"}) { dataStore { cordoned } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.uncordonDataStore",
            (
                Platform,
                r#"mutation { uncordonDataStore(input: {name: "etcd-1"}) { dataStore { cordoned } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.setTenantQuotas",
            (
                Platform,
                r#"mutation { setTenantQuotas(input: {tenant: "$T", controlPlanes: 5}) { quotas { controlPlanes { limit } } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.createControlPlane",
            (
                Tenant(Role::TenantMember),
                r#"mutation { createControlPlane(input: {tenant: "$T", name: "$NEW", kubernetesVersion: "v1.33.2"}) { controlPlane { name } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.updateControlPlane",
            (
                Tenant(Role::TenantMember),
                r#"mutation { updateControlPlane(input: {id: "$CP", replicas: 1}) { controlPlane { name } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.deleteControlPlane",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { deleteControlPlane(input: {id: "$CP"}) { controlPlane { name } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.mintToken",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { mintToken(input: {tenant: "$T", role: TENANT_VIEWER}) { token userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.revokeToken",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { revokeToken(input: {tenant: "$T", tokenId: "$TOKEN"}) { token { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.createJoinToken",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { createJoinToken(input: {tenant: "$T", controlPlane: "$CP", ttlSeconds: 600}) { joinToken { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.createClusterCredential",
            (
                Tenant(Role::TenantViewer),
                r#"mutation { createClusterCredential(input: {tenant: "$T", controlPlane: "$CP", ttlSeconds: 600}) { credential { audience } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.addAuthenticator",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { addAuthenticator(input: {tenant: "$T", controlPlane: "$CP", spec: {issuer: {url: "https://idp.example.com", audiences: ["a"]}, claimMappings: {username: {claim: "email", prefix: "idp:"}}}}) { authenticator { id } userErrors { message } } }"#,
            ),
        ),
        (
            "Mutation.removeAuthenticator",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { removeAuthenticator(input: {tenant: "$T", controlPlane: "$CP", authenticatorId: "00000000-0000-0000-0000-000000000001"}) { authenticatorId userErrors { message } } }"#,
            ),
        ),
        (
            "Query.authenticators",
            (
                Tenant(Role::TenantAdmin),
                r#"{ authenticators(tenant: "$T", controlPlane: "$CP") { id state } }"#,
            ),
        ),
        (
            "Mutation.revokeJoinToken",
            (
                Tenant(Role::TenantAdmin),
                r#"mutation { revokeJoinToken(input: {tenant: "$T", controlPlane: "$CP", tokenId: "abc123"}) { tokenId userErrors { message } } }"#,
            ),
        ),
        (
            "Subscription.operationEvents",
            (
                Tenant(Role::TenantViewer),
                r#"subscription { operationEvents(tenant: "$T") { operation { id state } } }"#,
            ),
        ),
        (
            "Subscription.controlPlaneEvents",
            (
                Tenant(Role::TenantViewer),
                r#"subscription { controlPlaneEvents(tenant: "$T") { controlPlane { name } } }"#,
            ),
        ),
    ])
}

fn operation(f: &Fixture, template: &str) -> String {
    template
        .replace("$TOKEN", &f.token_id)
        .replace("$CPID", &f.cp_id)
        .replace("$T", &f.slug)
        .replace("$CP", &control_plane_gid(&f.slug, &f.cp_id))
        .replace("$NEW", &crate::support::unique("cp"))
}

/// Asserts that nothing of the fixture's control plane leaks.
fn no_leak(f: &Fixture, case: &str, text: &str) {
    assert!(
        !text.contains("secret-project-x") && !text.contains(&f.cp_id),
        "{case} leaks data: {text}"
    );
}

/// Over HTTP: refused with `code` as the only error, on the field's path, and no data.
async fn refused(f: &Fixture, field: &str, token: &str, query: &str, code: &str, case: &str) {
    let a = gql(&f.app, Some(token), query, json!({})).await;
    no_leak(f, case, &a.text);
    assert_eq!(a.status, StatusCode::OK, "{case}: {}", a.text);
    // Every refusable root field is non-null, so the error nulls the whole `data`.
    assert_eq!(a.body["data"], json!(null), "{case}: {}", a.text);
    assert_eq!(
        a.body["errors"][0]["path"],
        json!([field.split_once('.').unwrap().1]),
        "{case}: {}",
        a.text
    );
    assert_eq!(
        a.body["errors"].as_array().unwrap().len(),
        1,
        "{case}: {}",
        a.text
    );
    assert_eq!(
        a.body["errors"][0]["extensions"]["code"], code,
        "{case}: {}",
        a.text
    );
}

/// Over WebSocket: the first message after subscribing.
async fn subscribe_as(f: &Fixture, token: &str, query: &str) -> Incoming {
    let mut ws = ws_open(&f.app, "graphql-transport-ws").await;
    ws_send(
        &mut ws,
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
    )
    .await;
    match ws_next(&mut ws, Duration::from_secs(5)).await {
        Incoming::Json(ack) if ack == json!({"type": "connection_ack"}) => {}
        other => return other,
    }
    ws_send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query}}),
    )
    .await;
    ws_next(&mut ws, Duration::from_secs(5)).await
}

#[tokio::test]
async fn every_root_field_refuses_bad_tokens_other_tenants_and_low_roles() {
    let f = fixture().await;
    let schema = gql(
        &f.app,
        Some(&f.app.admin),
        "{ __schema { queryType { fields { name } } mutationType { fields { name } } subscriptionType { fields { name } } } }",
        json!({}),
    )
    .await;
    let mut fields = Vec::new();
    for (root, key) in [
        ("Query", "queryType"),
        ("Mutation", "mutationType"),
        ("Subscription", "subscriptionType"),
    ] {
        for field in schema.body["data"]["__schema"][key]["fields"].as_array().unwrap() {
            fields.push(format!("{root}.{}", field["name"].as_str().unwrap()));
        }
    }
    fields.sort();
    let rules = rules();
    let covered: Vec<String> = rules.keys().map(|k| k.to_string()).collect();
    assert_eq!(
        fields, covered,
        "the schema's root fields and this matrix differ: add the new field's rule"
    );

    let mut checked = 0;
    for (field, (needs, template)) in &rules {
        let query = operation(&f, template);
        if field.starts_with("Subscription.") {
            // The token goes in connection_init: every bad token closes the socket with 4403.
            let missing = {
                let mut ws = ws_open(&f.app, "graphql-transport-ws").await;
                ws_send(&mut ws, json!({"type": "connection_init", "payload": {}})).await;
                ws_next(&mut ws, Duration::from_secs(5)).await
            };
            assert_eq!(
                missing,
                Incoming::Closed(4403, "unauthorized: a bearer token is required".into())
            );
            checked += 1;
            for (case, token) in &f.forged {
                match subscribe_as(&f, token, &query).await {
                    Incoming::Closed(4403, reason) => {
                        assert!(reason.starts_with("unauthorized: "), "{case}: {reason}")
                    }
                    other => panic!("{field} with {case}: {other:?}"),
                }
                checked += 1;
            }
            let Needs::Tenant(role) = needs else {
                panic!("subscriptions are tenant-scoped")
            };
            match subscribe_as(&f, &f.other_tenant_admin, &query).await {
                Incoming::Json(m) => {
                    no_leak(&f, "another tenant's subscription", &m.to_string());
                    assert_eq!(
                        m["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND",
                        "{m}"
                    );
                    assert_eq!(m["payload"]["data"], json!(null), "{m}");
                }
                other => panic!("{field} with another tenant's token: {other:?}"),
            }
            checked += 1;
            assert_eq!(
                role_below(*role),
                None,
                "a subscription needing more than tenant-viewer needs a low-role case"
            );
            continue;
        }
        let a = gql(&f.app, None, &query, json!({})).await;
        assert_eq!(
            (a.status, a.content_type.as_str(), &a.body["detail"]),
            (
                StatusCode::UNAUTHORIZED,
                "application/problem+json",
                &json!("a bearer token is required")
            ),
            "{field} without a token"
        );
        checked += 1;
        for (case, token) in &f.forged {
            let a = gql(&f.app, Some(token), &query, json!({})).await;
            no_leak(&f, case, &a.text);
            assert_eq!(
                (a.status, a.content_type.as_str(), a.body.get("data")),
                (StatusCode::UNAUTHORIZED, "application/problem+json", None),
                "{field} with {case}: {}",
                a.text
            );
            checked += 1;
        }
        match needs {
            Needs::AnyToken => {}
            Needs::Platform => {
                refused(
                    &f,
                    field,
                    &f.tokens[&Role::TenantAdmin],
                    &query,
                    "FORBIDDEN",
                    &format!("{field} as a tenant admin"),
                )
                .await;
                checked += 1;
            }
            Needs::Tenant(role) => {
                if let Some(lookup) = ["Query.node", "Query.operation", "Query.tenant"]
                    .contains(field)
                    .then(|| field.split_once('.').unwrap().1)
                {
                    // A lookup of what the caller may not see resolves to null, without an error.
                    let a = gql(&f.app, Some(&f.other_tenant_admin), &query, json!({})).await;
                    assert_eq!(a.body, json!({"data": {lookup: null}}), "{field}: {}", a.text);
                } else {
                    refused(
                        &f,
                        field,
                        &f.other_tenant_admin,
                        &query,
                        "NOT_FOUND",
                        &format!("{field} with another tenant's token"),
                    )
                    .await;
                }
                checked += 1;
                if let Some(low) = role_below(*role) {
                    refused(
                        &f,
                        field,
                        &f.tokens[&low],
                        &query,
                        "FORBIDDEN",
                        &format!("{field} as {low}"),
                    )
                    .await;
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 13 * 10, "only {checked} checks ran");
}

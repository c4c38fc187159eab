//! `GET /tenants/{tenant}/audit`: the tenant's log, newest first in keyset pages, with filters, and
//! kubeconfig downloads recorded in it (who, never the kubeconfig).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, spawn_app, spawn_app_with};

async fn audit(app: &App, slug: &str, token: &str, query: &str) -> super::Reply {
    app.call(
        Method::GET,
        &format!("/api/v1/tenants/{slug}/audit{query}"),
        Some(token),
        None,
    )
    .await
}

fn actions(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_audit_log_pages_newest_first_with_filters_and_stays_inside_the_tenant() {
    let app = spawn_app().await;
    let slug = app.tenant("audit").await;
    let other = app.tenant("audit-other").await;
    let member = app.token(&slug, "tenant-member").await;
    let before_creates = chrono::Utc::now();
    for name in ["a", "b", "c"] {
        app.control_plane(&slug, &member, name).await;
    }
    app.control_plane(&other, &app.token(&other, "tenant-member").await, "x")
        .await;

    // The tenant's whole log: its creation, the member token's mint, three creates; nothing of the other.
    let all = audit(&app, &slug, &member, "?limit=100").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(
        actions(&all.body),
        [
            "control-plane.create",
            "control-plane.create",
            "control-plane.create",
            "token.mint",
            "tenant.create"
        ]
    );
    assert_eq!(all.body["nextCursor"], Value::Null);
    let first = &all.body["items"][0];
    assert_eq!(first["targetKind"], "control-plane");
    assert!(
        first["actor"].as_str().unwrap().starts_with("tenant-member:"),
        "{first}"
    );

    // Pages of two: 2 + 2 + 1, no entry twice, in the same order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".to_string(),
        };
        let page = audit(&app, &slug, &member, &q).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        pages += 1;
        seen.extend(
            page.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].clone()),
        );
        match page.body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let ids: Vec<Value> = all.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!((pages, seen), (3, ids));

    // Filters: one action; since a time (the creates only).
    let mints = audit(&app, &slug, &member, "?action=token.mint").await;
    assert_eq!(actions(&mints.body), ["token.mint"]);
    let since = before_creates.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let recent = audit(
        &app,
        &slug,
        &member,
        &format!("?since={}", since.replace('+', "%2B")),
    )
    .await;
    assert_eq!(recent.status, StatusCode::OK, "{}", recent.text);
    assert_eq!(actions(&recent.body), ["control-plane.create"; 3]);

    // The platform admin reads it too; a viewer may not; another tenant's admin sees no such tenant.
    assert_eq!(audit(&app, &slug, &app.admin, "").await.status, StatusCode::OK);
    let viewer = app.token(&slug, "tenant-viewer").await;
    let low = audit(&app, &slug, &viewer, "").await;
    assert_eq!(low.status, StatusCode::FORBIDDEN, "{}", low.text);
    let stranger = app.token(&other, "tenant-admin").await;
    assert_eq!(
        audit(&app, &slug, &stranger, "").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn bad_audit_parameters_are_422_naming_each() {
    let app = spawn_app().await;
    let slug = app.tenant("auditbad").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = audit(
        &app,
        &slug,
        &member,
        "?limit=0&cursor=nope&action=Token%20Mint&since=yesterday",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], "https://tenantplane.dev/problems/invalid-input");
    let fields: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["limit", "cursor", "action", "since"]);
    let unknown = audit(&app, &slug, &member, "?actor=x").await;
    assert_eq!(
        unknown.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        unknown.text
    );
    assert_eq!(unknown.body["errors"][0]["field"], "query");
}

/// A TenantControlPlane `name` in `namespace`; returns its UID.
async fn owner_tcp(client: &kube::Client, namespace: &str, name: &str) -> String {
    let tcp: tenantplane::k8s::crd::TenantControlPlane = serde_json::from_value(json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": name},
        "spec": {"controlPlane": {"service": {"serviceType": "ClusterIP"}},
                 "kubernetes": {"version": "v1.33.2", "kubelet": {}}}
    }))
    .unwrap();
    kube::Api::<tenantplane::k8s::crd::TenantControlPlane>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &tcp)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

#[tokio::test]
async fn a_kubeconfig_download_is_audited_with_who_and_which_but_not_the_kubeconfig() {
    crate::support::crds_installed();
    let client = crate::support::client().await;
    let app = spawn_app_with(Some(client.clone())).await;
    let slug = app.tenant("auditkc").await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": format!("tp-{slug}")}})).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .unwrap();
    let ns = format!("tp-{slug}");
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "k").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}/kubeconfig");

    // Refused downloads (not served yet; another tenant's admin) record nothing.
    assert_eq!(
        app.call(Method::GET, &path, Some(&member), None).await.status,
        StatusCode::CONFLICT
    );
    let other = app.tenant("auditkc-other").await;
    let intruder = app.token(&other, "tenant-admin").await;
    assert_eq!(
        app.call(Method::GET, &path, Some(&intruder), None).await.status,
        StatusCode::NOT_FOUND
    );
    let none = audit(&app, &slug, &member, "?action=control-plane.kubeconfig").await;
    assert_eq!(none.body["items"], json!([]));

    let uid = owner_tcp(&client, &ns, "k").await;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "k-admin-kubeconfig", "ownerReferences": [{"apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane", "name": "k", "uid": uid}]},
        "stringData": {"admin.conf": "apiVersion: v1\nkind: Config\nclusters: [{name: k, cluster: {server: 'https://10.0.0.1:6443'}}]\nusers: [{name: admin, user: {client-key-data: c2VjcmV0}}]\n"}
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    sqlx::query("update control_planes set phase = 'Ready', tcp_uid = $2 where id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .bind(&uid)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let download = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(download.status, StatusCode::OK, "{}", download.text);

    let viewer_row = app.call(Method::GET, "/api/v1/viewer", Some(&member), None).await;
    let jti = viewer_row.body["tokenId"].as_str().unwrap();
    let logged = audit(&app, &slug, &member, "?action=control-plane.kubeconfig").await;
    assert_eq!(logged.status, StatusCode::OK, "{}", logged.text);
    let items = logged.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", logged.text);
    assert_eq!(
        (
            items[0]["targetKind"].as_str(),
            items[0]["targetId"].as_str(),
            items[0]["details"].clone()
        ),
        (Some("control-plane"), Some(id.as_str()), json!({}))
    );
    let actor = items[0]["actor"].as_str().unwrap();
    assert!(
        actor.starts_with("tenant-member:") && actor.ends_with(&format!("({jti})")),
        "{actor}"
    );
    assert!(!logged.text.contains("c2VjcmV0") && !logged.text.contains(&member));
}

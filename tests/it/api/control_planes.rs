//! The control-plane lifecycle: create, read, update with ETags, delete, operations, pagination.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{spawn_app, statements, tenant_id};

#[tokio::test]
async fn create_records_spec_operation_outbox_and_audit_in_one_transaction() {
    let app = spawn_app().await;
    let slug = app.tenant("life").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(
                json!({"name": "prod", "kubernetesVersion": "v1.33.2", "replicas": 3, "sizeClass": "medium",
                        "offload": "auto", "labels": {"env": "prod"}, "datastore": {"pool": "default"}}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let cp = &r.body["controlPlane"];
    let op = &r.body["operation"];
    assert_eq!(cp["name"], "prod");
    assert_eq!(cp["kubernetesVersion"], "v1.33.2");
    assert_eq!(cp["replicas"], 3);
    assert_eq!(cp["serviceType"], "ClusterIP");
    assert_eq!(cp["port"], 6443);
    assert_eq!(cp["sizeClass"], "medium");
    assert_eq!(cp["offload"], "auto");
    assert_eq!(cp["datastore"], json!({"pool": "default"}));
    assert_eq!(cp["placement"]["dataStore"], "etcd-default");
    assert_eq!(
        cp["placement"]["overrides"],
        json!([]),
        "auto offload without an override pool offloads nothing"
    );
    let addon = |requested: bool| json!({"requested": requested, "installed": false, "lastUpdate": null});
    assert_eq!(
        cp["addons"],
        json!({"coreDNS": addon(true), "kubeProxy": addon(true), "konnectivity": addon(false), "ready": null}),
        "requested as the defaults say, nothing installed before the controller reports"
    );
    assert_eq!(cp["nodeJoin"], json!({"ready": null}));
    assert_eq!(cp["phase"], "Pending");
    assert_eq!(cp["generation"], 1);
    assert_eq!(
        (op["kind"].as_str(), op["state"].as_str()),
        (Some("create"), Some("pending"))
    );
    assert_eq!(r.headers["etag"], "\"1\"");
    assert_eq!(
        r.headers["location"].to_str().unwrap(),
        format!("/api/v1/tenants/{slug}/operations/{}", op["id"].as_str().unwrap())
    );

    let id: uuid::Uuid = cp["id"].as_str().unwrap().parse().unwrap();
    let outbox: Vec<(String, Value)> =
        sqlx::query_as("select kind, payload from outbox where control_plane_id = $1")
            .bind(id)
            .fetch_all(&app.ctx.db)
            .await
            .unwrap();
    assert_eq!(outbox, vec![("apply".to_string(), json!({"generation": 1}))]);
    let audit: Vec<(String, String)> = sqlx::query_as(
        "select action, target_id from audit_log where tenant_id = $1 and target_kind = 'control-plane'",
    )
    .bind(tenant_id(&app, &slug).await)
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(audit, vec![("control-plane.create".to_string(), id.to_string())]);

    let op_reply = app
        .call(
            Method::GET,
            r.headers["location"].to_str().unwrap(),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(op_reply.status, StatusCode::OK);
    assert_eq!(op_reply.body, *op);
}

#[tokio::test]
async fn a_failed_create_leaves_no_trace() {
    let app = spawn_app().await;
    let slug = app.tenant("atomic").await;
    let member = app.token(&slug, "tenant-member").await;
    app.control_plane(&slug, &member, "dup").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "dup", "kubernetesVersion": "v1.33.2"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(
        r.body["detail"],
        "a control plane named \"dup\" already exists in this tenant"
    );
    let counts: (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from control_planes), (select count(*) from operations), (select count(*) from outbox)",
    )
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1, 1));
}

#[tokio::test]
async fn update_honours_if_match_and_version_rules() {
    let app = spawn_app().await;
    let slug = app.tenant("etag").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "api").await;
    let path = format!(
        "/api/v1/tenants/{slug}/control-planes/{}",
        created["controlPlane"]["id"].as_str().unwrap()
    );

    let got = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(got.headers["etag"], "\"1\"");

    let ok = app
        .call_with(
            Method::PATCH,
            &path,
            Some(&member),
            Some(json!({"kubernetesVersion": "v1.34.0", "replicas": 0})),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.text);
    assert_eq!(ok.body["controlPlane"]["generation"], 2);
    assert_eq!(ok.body["controlPlane"]["kubernetesVersion"], "v1.34.0");
    assert_eq!(ok.body["controlPlane"]["replicas"], 0);
    assert_eq!(ok.body["controlPlane"]["placement"]["dataStore"], "etcd-default");
    assert_eq!(ok.body["operation"]["kind"], "update");
    assert_eq!(ok.headers["etag"], "\"2\"");

    let stale = app
        .call_with(
            Method::PATCH,
            &path,
            Some(&member),
            Some(json!({"replicas": 2})),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(stale.headers["etag"], "\"2\"");
    assert_eq!(stale.headers["content-type"], "application/problem+json");

    let down = app
        .call(
            Method::PATCH,
            &path,
            Some(&member),
            Some(json!({"kubernetesVersion": "v1.33.9"})),
        )
        .await;
    assert_eq!(
        down.status,
        StatusCode::CONFLICT,
        "a downgrade conflicts with the running version"
    );
    assert_eq!(
        down.body["errors"],
        json!([{"field": "kubernetesVersion", "message": "downgrading from v1.34.0 to v1.33.9 is not supported"}])
    );

    let final_state = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(
        final_state.body["generation"], 2,
        "a refused update must not change anything"
    );
}

#[tokio::test]
async fn upgrades_cannot_skip_a_minor() {
    let app = spawn_app().await;
    let slug = app.tenant("skip").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "old", "kubernetesVersion": "v1.31.0"})),
        )
        .await;
    let path = format!(
        "/api/v1/tenants/{slug}/control-planes/{}",
        r.body["controlPlane"]["id"].as_str().unwrap()
    );
    let skip = app
        .call(
            Method::PATCH,
            &path,
            Some(&member),
            Some(json!({"kubernetesVersion": "v1.33.0"})),
        )
        .await;
    assert_eq!(
        skip.status,
        StatusCode::CONFLICT,
        "a skipped minor conflicts with the running version"
    );
    assert_eq!(
        skip.body["errors"][0]["message"],
        "upgrading from v1.31.0 to v1.33.0 skips a minor version: upgrade to v1.32.x first"
    );
}

#[tokio::test]
async fn delete_is_accepted_once_and_repeats_the_same_operation() {
    let app = spawn_app().await;
    let slug = app.tenant("del").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = app.control_plane(&slug, &admin, "gone").await;
    let path = format!(
        "/api/v1/tenants/{slug}/control-planes/{}",
        created["controlPlane"]["id"].as_str().unwrap()
    );
    let first = app.call(Method::DELETE, &path, Some(&admin), None).await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    assert_eq!(first.body["operation"]["kind"], "delete");
    assert_eq!(first.body["controlPlane"]["phase"], "Deleting");
    let second = app.call(Method::DELETE, &path, Some(&admin), None).await;
    assert_eq!(second.status, StatusCode::ACCEPTED);
    assert_eq!(second.body["operation"]["id"], first.body["operation"]["id"]);
    let outbox: Vec<String> = sqlx::query_scalar("select kind from outbox order by id")
        .fetch_all(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(outbox, vec!["apply", "delete"]);
    let patch = app
        .call(Method::PATCH, &path, Some(&admin), Some(json!({"replicas": 1})))
        .await;
    assert_eq!(patch.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn idempotency_key_replays_the_first_response_and_refuses_another_body() {
    let app = spawn_app().await;
    let slug = app.tenant("idem").await;
    let member = app.token(&slug, "tenant-member").await;
    let path = format!("/api/v1/tenants/{slug}/control-planes");
    let body = json!({"name": "once", "kubernetesVersion": "v1.33.2"});
    let first = app
        .call_with(
            Method::POST,
            &path,
            Some(&member),
            Some(body.clone()),
            &[("idempotency-key", "k-1")],
        )
        .await;
    let again = app
        .call_with(
            Method::POST,
            &path,
            Some(&member),
            Some(body.clone()),
            &[("idempotency-key", "k-1")],
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert_eq!(again.body, first.body);
    assert_eq!(again.headers["location"], first.headers["location"]);
    let other = app
        .call_with(
            Method::POST,
            &path,
            Some(&member),
            Some(json!({"name": "twice", "kubernetesVersion": "v1.33.2"})),
            &[("idempotency-key", "k-1")],
        )
        .await;
    assert_eq!(other.status, StatusCode::CONFLICT);
    assert_eq!(other.body["title"], "Idempotency-Key reused");
    let count: i64 = sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(count, 1);
}

#[tokio::test]
async fn concurrent_retries_with_one_key_create_exactly_one_control_plane() {
    let app = spawn_app().await;
    let slug = app.tenant("race").await;
    let member = app.token(&slug, "tenant-member").await;
    let path = format!("/api/v1/tenants/{slug}/control-planes");
    let body = json!({"name": "raced", "kubernetesVersion": "v1.33.2"});
    let calls = (0..10).map(|_| {
        app.call_with(
            Method::POST,
            &path,
            Some(&member),
            Some(body.clone()),
            &[("idempotency-key", "same")],
        )
    });
    let replies = futures::future::join_all(calls).await;
    let ids: BTreeSet<String> = replies
        .iter()
        .map(|r| r.body["controlPlane"]["id"].to_string())
        .collect();
    assert!(
        replies.iter().all(|r| r.status == StatusCode::ACCEPTED),
        "{:?}",
        replies.iter().map(|r| &r.text).collect::<Vec<_>>()
    );
    assert_eq!(ids.len(), 1);
    let count: i64 = sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
    assert_eq!(count, 1);
}

#[tokio::test]
async fn pagination_has_no_duplicates_or_gaps_under_concurrent_inserts() {
    let app = spawn_app().await;
    let slug = app.tenant("pages").await;
    let tenant = tenant_id(&app, &slug).await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    // 250 existing rows, inserted directly for speed.
    sqlx::query(
        "insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class)
         select gen_random_uuid(), $1, 'cp-' || g, 'v1.33.2', 2, 'ClusterIP', 6443, 'small' from generate_series(1, 250) g",
    )
    .bind(tenant)
    .execute(&app.ctx.db)
    .await
    .unwrap();
    let before: BTreeSet<String> =
        sqlx::query_scalar::<_, uuid::Uuid>("select id from control_planes where tenant_id = $1")
            .bind(tenant)
            .fetch_all(&app.ctx.db)
            .await
            .unwrap()
            .into_iter()
            .map(|u| u.to_string())
            .collect();
    let db = app.ctx.db.clone();
    let writer = tokio::spawn(async move {
        for i in 0..100 {
            sqlx::query(
                "insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class)
                 values (gen_random_uuid(), $1, $2, 'v1.33.2', 2, 'ClusterIP', 6443, 'small')",
            )
            .bind(tenant)
            .bind(format!("late-{i}"))
            .execute(&db)
            .await
            .unwrap();
        }
    });
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/tenants/{slug}/control-planes?limit=37&cursor={c}"),
            None => format!("/api/v1/tenants/{slug}/control-planes?limit=37"),
        };
        let r = app.call(Method::GET, &path, Some(&viewer), None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        seen.extend(
            r.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string()),
        );
        pages += 1;
        match r.body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    writer.await.unwrap();
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a page repeated an item");
    assert!(
        before.is_subset(&unique),
        "{} existing rows were skipped",
        before.difference(&unique).count()
    );
    assert!(pages >= 7);
}

#[tokio::test]
async fn list_filters_by_status_version_and_label() {
    let app = spawn_app().await;
    let slug = app.tenant("filter").await;
    let member = app.token(&slug, "tenant-member").await;
    let path = format!("/api/v1/tenants/{slug}/control-planes");
    for (name, version, env) in [
        ("a", "v1.33.2", "prod"),
        ("b", "v1.34.1", "prod"),
        ("c", "v1.34.1", "dev"),
    ] {
        let r = app
            .call(
                Method::POST,
                &path,
                Some(&member),
                Some(json!({"name": name, "kubernetesVersion": version, "labels": {"env": env}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED);
    }
    let names = |r: &super::Reply| {
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            &app.call(
                Method::GET,
                &format!("{path}?version=v1.34.1"),
                Some(&member),
                None
            )
            .await
        ),
        ["b", "c"]
    );
    assert_eq!(
        names(
            &app.call(
                Method::GET,
                &format!("{path}?label=env%3Dprod"),
                Some(&member),
                None
            )
            .await
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            &app.call(
                Method::GET,
                &format!("{path}?status=Pending&version=v1.34.1&label=env%3Ddev"),
                Some(&member),
                None
            )
            .await
        ),
        ["c"]
    );
    assert!(
        names(
            &app.call(Method::GET, &format!("{path}?status=Ready"), Some(&member), None)
                .await
        )
        .is_empty()
    );
}

/// A TenantControlPlane `name` in `namespace` (only to own Secrets); returns its UID.
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

/// An admin.conf as Kamaji writes it (key material shortened).
const KAMAJI_ADMIN_CONF: &str = "apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster: {certificate-authority-data: Q0E=, server: 'https://10.0.0.1:6443'}
users:
- name: kubernetes-admin
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
contexts:
- name: kubernetes-admin@kubernetes
  context: {cluster: kubernetes, user: kubernetes-admin}
current-context: kubernetes-admin@kubernetes
";

/// An admin kubeconfig Secret `name` owned by the TCP `owner` (UID `uid`).
async fn kubeconfig_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    owner: &str,
    uid: &str,
    text: &str,
) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane", "name": owner, "uid": uid}]},
        "stringData": {"admin.conf": text}
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn kubeconfig_is_409_until_ready_then_comes_from_the_secret_the_row_names() {
    crate::support::crds_installed();
    let client = crate::support::client().await;
    let app = super::spawn_app_with(Some(client.clone())).await;
    let slug = app.tenant("kcfg").await;
    // The tenant's namespace, as the worker's namespace template makes it.
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
    let early = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(early.status, StatusCode::CONFLICT);
    assert_eq!(early.body["title"], "Not ready yet");

    let uid = owner_tcp(&client, &ns, "k").await;
    kubeconfig_secret(&client, &ns, "k-admin-kubeconfig", "k", &uid, KAMAJI_ADMIN_CONF).await;
    // Somewhere else, a Secret that reported status might point at: never read.
    let elsewhere = crate::support::namespace(&client, "kcfg-other").await;
    let decoy_uid = owner_tcp(&client, &elsewhere, "k").await;
    kubeconfig_secret(
        &client,
        &elsewhere,
        "k-admin-kubeconfig",
        "k",
        &decoy_uid,
        "decoy\n",
    )
    .await;
    sqlx::query("update control_planes set phase = 'Ready', status = $2, tcp_uid = $3 where id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .bind(json!({"kubeconfigSecret": {"namespace": elsewhere, "name": "k-admin-kubeconfig"}}))
        .bind(&uid)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let ready = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text);
    assert_eq!(ready.headers["content-type"], "application/yaml");
    assert_eq!(ready.headers["cache-control"], "no-store");
    // The cluster of the admin kubeconfig under one name unique per tenant and control plane, and a user
    // that runs the credential plugin: no key, no certificate, no token.
    let name = format!("tenantplane_{slug}_k");
    let served: serde_yaml::Value = serde_yaml::from_str(&ready.text).unwrap();
    let expected: serde_yaml::Value = serde_yaml::from_str(&format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster: {{certificate-authority-data: Q0E=, server: 'https://10.0.0.1:6443'}}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: {}
      args: [credential, --url, '{}/api/v1', --tenant, {slug}, --control-plane, {id}]
      interactiveMode: Never
      provideClusterInfo: false
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
",
        env!("CARGO_BIN_EXE_tenantplane"),
        app.base
    ))
    .unwrap();
    assert_eq!(served, expected, "{}", ready.text);
    // A viewer gets the same: what it may do is decided by its credential's group.
    let viewer = app.token(&slug, "tenant-viewer").await;
    let as_viewer = app.call(Method::GET, &path, Some(&viewer), None).await;
    assert_eq!(as_viewer.status, StatusCode::OK, "{}", as_viewer.text);
    assert_eq!(as_viewer.text, ready.text);
    // The system:masters kubeconfig is break-glass: platform admins only.
    let admin_path = format!("/api/v1/tenants/{slug}/control-planes/{id}/admin-kubeconfig");
    let refused = app.call(Method::GET, &admin_path, Some(&member), None).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    let glass = app.call(Method::GET, &admin_path, Some(&app.admin), None).await;
    assert_eq!(glass.status, StatusCode::OK, "{}", glass.text);
    let glass: serde_yaml::Value = serde_yaml::from_str(&glass.text).unwrap();
    assert_eq!(glass["users"][0]["user"]["client-key-data"], "S0VZ");
    assert_eq!(glass["current-context"], format!("{name}_break-glass").as_str());

    // A Secret of that name not owned by the control plane's own TCP is not served.
    sqlx::query("update control_planes set tcp_uid = $2 where id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .bind(&decoy_uid)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let foreign = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(foreign.status, StatusCode::CONFLICT, "{}", foreign.text);
    assert_eq!(
        foreign.body["detail"],
        "the kubeconfig Secret is not owned by this control plane's TenantControlPlane (yet)"
    );
}

#[tokio::test]
async fn kubeconfig_without_a_management_cluster_is_a_503_problem_once_served() {
    let app = spawn_app().await;
    let slug = app.tenant("kcfg-nokube").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "k").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}/kubeconfig");
    // Before it has served, the 409 comes first, cluster or not.
    let early = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.text);
    sqlx::query("update control_planes set phase = 'Ready', tcp_uid = $2 where id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .bind("uid-of-its-tcp")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    // A server without a credential issuer hands out no kubeconfig: tenant clusters would not accept it.
    let r = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("no credential issuer"),
        "{}",
        r.text
    );
    // The break-glass route needs the management cluster.
    let admin_path = format!("/api/v1/tenants/{slug}/control-planes/{id}/admin-kubeconfig");
    let r = app.call(Method::GET, &admin_path, Some(&app.admin), None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], "https://tenantplane.dev/problems/no-cluster");
    assert_eq!(r.body["title"], "No management cluster");
    assert_eq!(
        r.body["detail"],
        "this server has no management cluster configured"
    );
    assert_eq!(r.body["requestId"], r.headers["x-request-id"].to_str().unwrap());
}

#[tokio::test]
async fn metrics_count_requests_per_route() {
    let app = spawn_app().await;
    let slug = app.tenant("metrics").await;
    let member = app.token(&slug, "tenant-member").await;
    app.control_plane(&slug, &member, "m").await;
    let metrics = app.call(Method::GET, "/metrics", None, None).await.text;
    assert!(
        metrics.contains(r#"tenantplane_http_requests_total{method="POST",route="/api/v1/tenants/{tenant}/control-planes",status="202"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"tenantplane_http_request_duration_seconds_count{method="POST",route="/api/v1/tenants/{tenant}/control-planes"} 1"#));
}

#[tokio::test]
async fn served_openapi_is_the_committed_document() {
    let app = spawn_app().await;
    let served = app.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/openapi.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        served.body, committed,
        "schema/openapi.json is stale: run `cargo run -- openapi > schema/openapi.json`"
    );
    assert_eq!(committed["openapi"], "3.1.0");
}

/// A GET of one control plane is two statements: the token's revocation check, then the tenant, the row
/// and its placement together.
#[tokio::test]
async fn get_one_runs_two_statements() {
    let app = spawn_app().await;
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let slug = app.tenant("get-count").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "counted").await;
    let id = created["controlPlane"]["id"].as_str().unwrap();
    let url = format!("/api/v1/tenants/{slug}/control-planes/{id}");
    // The first request also loads the verifying key.
    let warm = app.call(Method::GET, &url, Some(&viewer), None).await;
    assert_eq!(warm.status, StatusCode::OK, "{}", warm.text);
    let before = statements(&app).await;
    let got = app.call(Method::GET, &url, Some(&viewer), None).await;
    let after = statements(&app).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.body["name"], "counted");
    assert_eq!(got.body["placement"], created["controlPlane"]["placement"]);
    assert_eq!(after - before, 2);
}

/// The worker's status path (the one `Worker::write_status` of the status watcher runs) on a
/// TenantControlPlane whose in-tenant phase reported its addons and conditions, then the REST GET.
#[tokio::test]
async fn get_reports_the_addons_that_run_and_node_join_from_the_mirrored_tcp_status() {
    let app = spawn_app().await;
    let slug = app.tenant("addons").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "web", "kubernetesVersion": "v1.33.2",
                        "addons": {"coreDNS": true, "kubeProxy": true, "konnectivity": true}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let id = r.body["controlPlane"]["id"].as_str().unwrap().to_string();
    let tenant = tenant_id(&app, &slug).await;
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 1})
    };
    let tcp = tenantplane_testkit::tcp(&format!("tp-{slug}"), "web")
        .uid("uid-web")
        .generation(1)
        .label("tenantplane.io/tenant", &tenant.to_string())
        .label("tenantplane.io/control-plane-id", &id)
        .version("v1.33.2")
        .status(json!({
            "controlPlaneEndpoint": "10.0.0.7:6443",
            "conditions": [
                condition("Ready", "True", "Ready", "serving"),
                condition("NodeJoinReady", "True", "JoinObjectsPresent", "nodes can join"),
                condition("AddonsReady", "False", "AddonNotAvailable", "kube-proxy is not in the tenant cluster yet"),
            ],
            "addons": {
                "coreDNS": {"enabled": true, "checksum": "sha256:c0ffee", "lastUpdate": "2026-12-01T10:00:05Z"},
                "kubeProxy": {"enabled": false}
            },
            "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
        }))
        .build();
    // A client that never connects: the status path only writes PostgreSQL.
    let unused = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let worker = tenantplane::worker::Worker::new(
        app.ctx.db.clone(),
        unused,
        tenantplane::worker::WorkerSettings::default(),
        tenantplane::worker::WorkerMetrics::default(),
    );
    assert!(worker.write_status(&tcp).await.unwrap(), "the status was written");

    let got = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.body["phase"], "Ready");
    assert_eq!(
        got.body["addons"],
        json!({
            "coreDNS": {"requested": true, "installed": true, "lastUpdate": "2026-12-01T10:00:05Z"},
            "kubeProxy": {"requested": true, "installed": false, "lastUpdate": null},
            "konnectivity": {"requested": true, "installed": false, "lastUpdate": null},
            "ready": {"type": "AddonsReady", "status": "False", "reason": "AddonNotAvailable",
                      "message": "kube-proxy is not in the tenant cluster yet",
                      "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 1}
        })
    );
    assert_eq!(
        got.body["nodeJoin"],
        json!({"ready": {"type": "NodeJoinReady", "status": "True", "reason": "JoinObjectsPresent",
                         "message": "nodes can join", "lastTransitionTime": "2026-12-01T10:00:00Z",
                         "observedGeneration": 1}})
    );
    assert_eq!(
        got.body["status"]["addons"],
        json!({"coreDNS": {"enabled": true, "checksum": "sha256:c0ffee", "lastUpdate": "2026-12-01T10:00:05Z"},
               "kubeProxy": {"enabled": false}}),
        "the raw status mirrors the TCP's status.addons as reported"
    );
    // The list shows the same representation.
    let list = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(list.body["items"][0]["addons"], got.body["addons"]);
    assert_eq!(list.body["items"][0]["nodeJoin"], got.body["nodeJoin"]);
}

#[tokio::test]
async fn a_control_plane_is_addressed_by_its_name_as_well_as_by_its_id() {
    let app = spawn_app().await;
    let slug = app.tenant("byname").await;
    let other = app.tenant("byname-other").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let other_admin = app.token(&other, "tenant-admin").await;
    let created = app.control_plane(&slug, &admin, "prod").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    // The other tenant's control plane of the same name is never the one found.
    app.control_plane(&other, &other_admin, "prod").await;
    // A name may look like a UUID; no control plane has it as its id, so the name finds it.
    let uuid_like = "abcdef01-2345-4789-8bcd-ef0123456789";
    let looks_like = app.control_plane(&slug, &admin, uuid_like).await;
    let base = format!("/api/v1/tenants/{slug}/control-planes");

    let by_name = app
        .call(Method::GET, &format!("{base}/prod"), Some(&admin), None)
        .await;
    assert_eq!(by_name.status, StatusCode::OK, "{}", by_name.text);
    assert_eq!(
        by_name.body,
        app.call(Method::GET, &format!("{base}/{id}"), Some(&admin), None)
            .await
            .body
    );
    let found = app
        .call(Method::GET, &format!("{base}/{uuid_like}"), Some(&admin), None)
        .await;
    assert_eq!(
        (found.status, found.body["id"].clone()),
        (StatusCode::OK, looks_like["controlPlane"]["id"].clone()),
        "{}",
        found.text
    );
    let missing = app
        .call(Method::GET, &format!("{base}/staging"), Some(&admin), None)
        .await;
    assert_eq!(
        (missing.status, missing.body["detail"].as_str()),
        (StatusCode::NOT_FOUND, Some("control plane not found"))
    );
    let foreign = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{other}/control-planes/prod"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);

    let patched = app
        .call(
            Method::PATCH,
            &format!("{base}/prod"),
            Some(&admin),
            Some(json!({"replicas": 1})),
        )
        .await;
    assert_eq!(patched.status, StatusCode::ACCEPTED, "{}", patched.text);
    assert_eq!(
        (
            patched.body["controlPlane"]["id"].as_str(),
            patched.body["controlPlane"]["replicas"].as_i64(),
            patched.body["operation"]["controlPlaneId"].as_str()
        ),
        (Some(id.as_str()), Some(1), Some(id.as_str()))
    );
    // The kubeconfig and join tokens resolve the name too: not served yet (409), not unknown (404).
    let kubeconfig = app
        .call(
            Method::GET,
            &format!("{base}/prod/kubeconfig"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(kubeconfig.status, StatusCode::CONFLICT, "{}", kubeconfig.text);
    let tokens = app
        .call(
            Method::GET,
            &format!("{base}/prod/join-tokens"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(
        (tokens.status, tokens.body.clone()),
        (StatusCode::OK, json!({"items": []}))
    );

    let deleted = app
        .call(Method::DELETE, &format!("{base}/prod"), Some(&admin), None)
        .await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.text);
    assert_eq!(
        (
            deleted.body["operation"]["kind"].as_str(),
            deleted.body["operation"]["controlPlaneId"].as_str()
        ),
        (Some("delete"), Some(id.as_str()))
    );
    let audit: Vec<(String, String)> = sqlx::query_as(
        "select action, target_id from audit_log where tenant_id = $1 and target_kind = 'control-plane' and action <> 'control-plane.create' order by id",
    )
    .bind(tenant_id(&app, &slug).await)
    .fetch_all(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!(
        audit,
        vec![
            ("control-plane.update".to_string(), id.clone()),
            ("control-plane.delete".to_string(), id.clone())
        ]
    );
    // The other tenant's control plane of that name is untouched.
    let theirs = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{other}/control-planes/prod"),
            Some(&other_admin),
            None,
        )
        .await;
    assert_eq!(
        (theirs.body["phase"].as_str(), theirs.body["replicas"].as_i64()),
        (Some("Pending"), Some(2))
    );
}

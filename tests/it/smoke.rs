//! Smoke tests that prove the test environment is real: each would fail against a missing or fake part.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kine::LocalKine,
    kube::{KubeOptions, LocalKube},
};

use crate::support::{self, eventually};
use tenantplane::pki::Ca;

fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test]
async fn apiserver_reports_the_pinned_kubernetes_version() {
    let client = support::client().await;
    let info = client.apiserver_version().await.unwrap();
    let pinned = localenv::assets::kube_version().expect("KUBE_VERSION written by scripts/test-env");
    assert!(pinned.starts_with("v1.34."), "pinned version {pinned}");
    assert_eq!(info.git_version, pinned);
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "34"));
}

#[tokio::test]
async fn namespace_and_config_map_round_trip() {
    let client = support::client().await;
    let ns = support::namespace(&client, "smoke").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    api.create(
        &PostParams::default(),
        &config_map("round-trip", json!({"greeting": "hello", "n": "42"})),
    )
    .await
    .unwrap();
    let back = api.get("round-trip").await.unwrap();
    let data = back.data.unwrap();
    assert_eq!(data.get("greeting").map(String::as_str), Some("hello"));
    assert_eq!(data.get("n").map(String::as_str), Some("42"));
    assert_eq!(back.metadata.namespace.as_deref(), Some(ns.as_str()));
}

#[tokio::test]
async fn server_side_apply_records_the_field_manager_and_detects_conflicts() {
    let client = support::client().await;
    let ns = support::namespace(&client, "ssa").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"owner": "a"}});
    let applied = api
        .patch(
            "applied",
            &PatchParams::apply("tenantplane"),
            &Patch::Apply(&desired),
        )
        .await
        .unwrap();
    let managers: Vec<(String, String)> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.operation.unwrap_or_default()))
        .collect();
    assert_eq!(managers, vec![("tenantplane".to_string(), "Apply".to_string())]);

    let rival = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"owner": "b"}});
    let conflict = api
        .patch(
            "applied",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&rival),
        )
        .await
        .unwrap_err();
    match conflict {
        kube::Error::Api(status) => assert_eq!(status.code, 409, "{status:?}"),
        other => panic!("expected a 409 conflict, got {other:?}"),
    }
    assert_eq!(api.get("applied").await.unwrap().data.unwrap()["owner"], "a");
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependent() {
    let client = support::client().await;
    let ns = support::namespace(&client, "gc").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client, &ns);
    let owner = maps
        .create(&PostParams::default(), &config_map("owner", json!({})))
        .await
        .unwrap();
    let dependent: Secret = serde_json::from_value(json!({
        "metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.unwrap()
        }]},
        "stringData": {"k": "v"}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &dependent).await.unwrap();
    maps.delete("owner", &DeleteParams::background()).await.unwrap();
    eventually(
        "the garbage collector to delete the dependent Secret",
        Duration::from_secs(90),
        || {
            let secrets = secrets.clone();
            async move { matches!(secrets.get_opt("dependent").await, Ok(None)).then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn postgres_answers_queries() {
    let url = support::fresh_database("smoke").await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let version: String = sqlx::query_scalar("select version()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(version.starts_with("PostgreSQL "), "{version}");
    let sum: i32 = sqlx::query_scalar("select 40 + 2")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(sum, 42);
}

/// Starts a kube-apiserver (no controller-manager) on `etcd_servers` and round-trips a ConfigMap.
async fn apiserver_round_trip(etcd_servers: String, name: &str) -> LocalKube {
    let dir = localenv::scratch_dir("kine-kube").unwrap();
    let mut options = KubeOptions::new(etcd_servers);
    options.controllers = None;
    let kube = LocalKube::start(dir, options).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(kube.client().await.unwrap());
    api.create(
        &PostParams::default(),
        &config_map(name, json!({"backend": "kine"})),
    )
    .await
    .unwrap();
    assert_eq!(api.get(name).await.unwrap().data.unwrap()["backend"], "kine");
    kube
}

#[tokio::test]
async fn kine_on_postgres_serves_a_kube_apiserver() {
    let url = support::fresh_database("kine").await;
    let dsn = format!("{url}?sslmode=disable");
    let kine = LocalKine::start(localenv::scratch_dir("kine-pg").unwrap(), &dsn)
        .await
        .unwrap();
    let _kube = apiserver_round_trip(kine.url(), "on-postgres").await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let rows: i64 = sqlx::query_scalar(
        "select count(*) from kine where name = '/registry/configmaps/default/on-postgres'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(rows >= 1, "the ConfigMap has no row in PostgreSQL's kine table");
}

#[tokio::test]
async fn kine_on_mariadb_serves_a_kube_apiserver() {
    let mariadb = support::mariadb();
    let db = format!("kine_{}", uuid::Uuid::new_v4().simple());
    let kine = LocalKine::start(
        localenv::scratch_dir("kine-mysql").unwrap(),
        &mariadb.kine_dsn(&db),
    )
    .await
    .unwrap();
    let _kube = apiserver_round_trip(kine.url(), "on-mariadb").await;
    let mut conn = MySqlConnection::connect(&mariadb.url_for(&db)).await.unwrap();
    let rows: i64 = sqlx::query_scalar(
        "select count(*) from kine where name = '/registry/configmaps/default/on-mariadb'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(rows >= 1, "the ConfigMap has no row in MariaDB's kine table");
}

/// Message count of JetStream stream `stream`, read from the monitoring endpoint.
async fn stream_messages(monitor_url: &str, stream: &str) -> Option<u64> {
    localenv::install_crypto_provider();
    let jsz: serde_json::Value = reqwest::get(format!("{monitor_url}/jsz?streams=true"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    jsz["account_details"].as_array()?.iter().find_map(|account| {
        account["stream_detail"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == stream)
            .and_then(|s| s["state"]["messages"].as_u64())
    })
}

#[tokio::test]
async fn kine_on_nats_serves_a_kube_apiserver() {
    let nats = support::nats();
    let bucket = format!("kine{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let dsn = format!("{}?noEmbed&bucket={bucket}", nats.url());
    let kine = LocalKine::start(localenv::scratch_dir("kine-nats").unwrap(), &dsn)
        .await
        .unwrap();
    let kube = apiserver_round_trip(kine.url(), "on-nats").await;
    let stream = format!("KV_{bucket}");
    let before = stream_messages(&nats.monitor_url(), &stream)
        .await
        .expect("the kine bucket exists in JetStream");
    let api: Api<ConfigMap> = Api::default_namespaced(kube.client().await.unwrap());
    api.create(&PostParams::default(), &config_map("another", json!({})))
        .await
        .unwrap();
    let after = stream_messages(&nats.monitor_url(), &stream).await.unwrap();
    assert!(before > 0, "the bucket holds no keys");
    assert!(
        after > before,
        "creating a ConfigMap wrote nothing to JetStream ({before} -> {after})"
    );
}

#[tokio::test]
async fn tls_etcds_sharing_a_ca_enforce_client_certificate_auth() {
    let ca = Ca::new("shared-etcd-ca").unwrap();
    let dir = localenv::scratch_dir("etcd-tls").unwrap();
    let first = LocalEtcd::start(dir.join("a"), EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    let second = LocalEtcd::start(dir.join("b"), EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    for etcd in [&first, &second] {
        let root = etcd.http().unwrap();
        assert!(
            root.auth_enabled().await.unwrap(),
            "auth is not enabled on {}",
            etcd.url()
        );
        root.put(b"/probe/key", b"value").await.unwrap();
        assert_eq!(
            root.range_prefix(b"/probe/").await.unwrap(),
            vec![(b"/probe/key".to_vec(), b"value".to_vec())]
        );
        // Over gRPC, the certificate's CN is the user: root may read, a CN etcd does not know may not.
        let root_ctl = etcd.etcdctl(&ca.client("root", &[]).unwrap()).unwrap();
        assert_eq!(
            root_ctl
                .run(&["get", "/probe/key", "--print-value-only"])
                .unwrap(),
            "value\n"
        );
        let stranger = etcd.etcdctl(&ca.client("stranger", &[]).unwrap()).unwrap();
        let err = stranger.run(&["get", "/probe/key"]).unwrap_err();
        assert!(err.contains("Error: etcdserver: permission denied"), "{err}");
    }
    // A certificate from another CA does not get through TLS.
    let other_ca = Ca::new("other").unwrap();
    let foreign = first.etcdctl(&other_ca.client("root", &[]).unwrap()).unwrap();
    let err = foreign.run(&["get", "/probe/key"]).unwrap_err();
    assert!(err.contains("certificate") || err.contains("deadline"), "{err}");
}

#[tokio::test]
async fn kube_apiserver_runs_on_a_tls_etcd_with_auth() {
    let ca = Ca::new("etcd-ca").unwrap();
    let dir = localenv::scratch_dir("kube-on-tls").unwrap();
    let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    let tls = etcd.tls().unwrap();
    let mut options = KubeOptions::new(etcd.url());
    options.controllers = None;
    options.etcd_prefix = Some("/tenant-a".into());
    options.etcd_tls = Some((
        tls.ca_file.clone(),
        tls.client_cert_file.clone(),
        tls.client_key_file.clone(),
    ));
    let kube = LocalKube::start(dir.join("kube"), options).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(kube.client().await.unwrap());
    api.create(&PostParams::default(), &config_map("in-prefix", json!({})))
        .await
        .unwrap();
    let keys = etcd
        .http()
        .unwrap()
        .range_prefix(b"/tenant-a/configmaps/default/in-prefix")
        .await
        .unwrap();
    assert_eq!(
        keys.len(),
        1,
        "the ConfigMap is not under the --etcd-prefix in etcd"
    );
}

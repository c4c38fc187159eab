//! etcd primary with the events offloaded to a second etcd of the same CA.

use kube::Api;
use serde_json::json;
use tenantplane::k8s::crd::TenantControlPlane;

use super::{etcd_keys, etcds, namespace_and_event, namespaces, stack};

/// The control plane's etcd prefix (`status.storage.setup.schema`).
pub async fn schema(kube: &kube::Client, ns: &str, name: &str) -> String {
    let tcp = Api::<TenantControlPlane>::namespaced(kube.clone(), ns)
        .get(name)
        .await
        .unwrap();
    tcp.status
        .unwrap()
        .storage
        .unwrap()
        .setup
        .unwrap()
        .schema
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_with_events_override_serves_and_stores_events_only_in_the_override_etcd() {
    let stack = stack("e2e-etcd", 1).await;
    let (_ca, etcd) = etcds("e2e-etcd", 2).await;
    let ca_id = format!("ca-{}", stack.id);
    stack.pool("etcd").await;
    let first = stack.etcd_datastore("etcd", &etcd[0], &ca_id).await;
    let second = stack.etcd_datastore("etcd", &etcd[1], &ca_id).await;

    let created = stack
        .create(
            0,
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 2,
                   "datastore": {"pool": "etcd"}, "offload": "pool:etcd"}),
        )
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;

    // Placement put the primary on one etcd and the events on the other.
    let placement = &cp["placement"];
    let primary = placement["dataStore"].as_str().unwrap().to_string();
    let overrides = placement["overrides"].as_array().unwrap();
    assert_eq!(overrides.len(), 1, "{placement:#}");
    assert_eq!(overrides[0]["resource"], "/events");
    let override_ds = overrides[0]["dataStore"].as_str().unwrap().to_string();
    let mut names = [primary.clone(), override_ds.clone()];
    names.sort();
    let mut expected = [first.clone(), second.clone()];
    expected.sort();
    assert_eq!(names, expected);
    let (primary_etcd, override_etcd) = if primary == first {
        (&etcd[0], &etcd[1])
    } else {
        (&etcd[1], &etcd[0])
    };

    // The endpoint is the control plane's loopback address, served by the runner.
    let endpoint = cp["status"]["endpoint"].as_str().unwrap();
    assert!(
        endpoint.starts_with("127.") && endpoint.ends_with(":6443"),
        "{endpoint}"
    );

    // Two replicas on two addresses.
    let ns = &stack.tenants[0].namespace;
    let pods: std::collections::BTreeSet<String> = stack
        .runner
        .logs(ns, "prod")
        .iter()
        .filter_map(|p| {
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(p.parent()?.parent()?.join("pod.json")).ok()?).ok()?;
            meta["ip"].as_str().map(String::from)
        })
        .collect();
    assert_eq!(pods.len(), 2, "{pods:?}");

    // The admin kubeconfig from the API works from here.
    let tenant = stack.tenant_client(0, &id).await;
    let before = namespaces(&tenant).await;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(before.contains(ns), "{before:?}");
    }
    namespace_and_event(&tenant, "e2e-check").await;
    assert!(namespaces(&tenant).await.contains("e2e-check"));

    // Straight from etcd: the Event lives only in the override, the namespace only in the primary.
    let schema = schema(&stack.kube, ns, "prod").await;
    let event_key = format!("/{schema}/events/e2e-check/e2e-event");
    let ns_key = format!("/{schema}/namespaces/e2e-check");
    assert_eq!(
        etcd_keys(override_etcd, &event_key).await,
        vec![event_key.clone()]
    );
    assert_eq!(etcd_keys(primary_etcd, &event_key).await, Vec::<String>::new());
    assert_eq!(etcd_keys(primary_etcd, &ns_key).await, vec![ns_key.clone()]);
    assert_eq!(etcd_keys(override_etcd, &ns_key).await, Vec::<String>::new());
    // Nothing of the tenant outside its prefix in the override: only events.
    let in_override = etcd_keys(override_etcd, &format!("/{schema}/")).await;
    assert!(
        !in_override.is_empty()
            && in_override
                .iter()
                .all(|k| k.starts_with(&format!("/{schema}/events/"))),
        "{in_override:?}"
    );
    stack.stop().await;
}

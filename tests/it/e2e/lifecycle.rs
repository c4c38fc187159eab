//! Delete, upgrade, and an image the runner has no binary for; each one's operation finishes when the
//! work does.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{etcd::schema, etcd_keys, etcds, namespace_and_event, namespaces, stack};
use crate::support::{eventually, stage_names};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_one_tenant_cleans_its_etcd_space_and_the_other_tenant_keeps_serving_its_data() {
    let stack = stack("e2e-del", 2).await;
    let (_ca, etcd) = etcds("e2e-del", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let mut ids = Vec::new();
    for t in 0..2 {
        let created = stack
            .create(t, json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "etcd"}}))
            .await;
        ids.push(created["controlPlane"]["id"].as_str().unwrap().to_string());
    }
    let (a, _) = tokio::join!(
        stack.ready(0, &ids[0], "v1.34.4"),
        stack.ready(1, &ids[1], "v1.34.4")
    );
    let gone_endpoint = a["status"]["endpoint"].as_str().unwrap().to_string();
    let schemas = [
        schema(&stack.kube, &stack.tenants[0].namespace, "prod").await,
        schema(&stack.kube, &stack.tenants[1].namespace, "prod").await,
    ];
    let survivor = stack.tenant_client(1, &ids[1]).await;
    namespace_and_event(&survivor, "keep-me").await;
    assert!(!etcd_keys(&etcd[0], &format!("/{}/", schemas[0])).await.is_empty());

    let tenant = &stack.tenants[0];
    let r = stack
        .app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{}/control-planes/{}", tenant.slug, ids[0]),
            Some(&tenant.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    // The delete's operation is done when the data is: at that moment the record says Deleted and the
    // etcd space is empty (no waiting after it).
    let seen = stack
        .operation_until_done(0, r.body["operation"]["id"].as_str().unwrap())
        .await;
    let (op, _) = seen.last().unwrap();
    assert_eq!(
        (op["state"].as_str(), stage_names(op)),
        (Some("succeeded"), vec!["requested", "applied", "deleted"]),
        "{op:#}"
    );
    let r = stack
        .app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{}/control-planes/{}", tenant.slug, ids[0]),
            Some(&tenant.member),
            None,
        )
        .await;
    assert!(
        r.status == StatusCode::NOT_FOUND || r.body["phase"] == "Deleted",
        "{}",
        r.text
    );
    // Its etcd space is gone, its Deployment is gone and the runner stopped its processes.
    assert_eq!(
        etcd_keys(&etcd[0], &format!("/{}/", schemas[0])).await,
        Vec::<String>::new()
    );
    let deployments: Api<Deployment> = Api::namespaced(stack.kube.clone(), &tenant.namespace);
    eventually(
        "the Deployment is garbage collected",
        Duration::from_secs(60),
        || async { deployments.get_opt("prod").await.unwrap().is_none().then_some(()) },
    )
    .await;
    eventually(
        "nothing answers on the deleted endpoint",
        Duration::from_secs(30),
        || async {
            tokio::net::TcpStream::connect(gone_endpoint.as_str())
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;

    // The other tenant still serves, with its data, from the same etcd.
    assert!(namespaces(&survivor).await.contains("keep-me"));
    let ns_key = format!("/{}/namespaces/keep-me", schemas[1]);
    assert_eq!(etcd_keys(&etcd[0], &ns_key).await, vec![ns_key.clone()]);
    assert_eq!(stack.get(1, &ids[1]).await["phase"], "Ready");
    stack.stop().await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_patch_upgrade_restarts_the_pod_on_the_new_binary_and_reports_the_installed_version() {
    let stack = stack("e2e-up", 1).await;
    let (_ca, etcd) = etcds("e2e-up", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let created = stack
        .create(0, json!({"name": "prod", "kubernetesVersion": "v1.34.3", "replicas": 1, "datastore": {"pool": "etcd"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let seen = stack
        .operation_until_done(0, created["operation"]["id"].as_str().unwrap())
        .await;
    succeeded_exactly_when_ready(&seen, "v1.34.3");
    stack.ready(0, &id, "v1.34.3").await;
    let client = stack.tenant_client(0, &id).await;
    assert_eq!(
        super::connected(|| client.apiserver_version())
            .await
            .unwrap()
            .git_version,
        "v1.34.3"
    );
    namespace_and_event(&client, "before-upgrade").await;

    let tenant = &stack.tenants[0];
    let r = stack
        .app
        .call(
            Method::PATCH,
            &format!("/api/v1/tenants/{}/control-planes/{id}", tenant.slug),
            Some(&tenant.member),
            Some(json!({"kubernetesVersion": "v1.34.4"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    // The update's operation asks for the new generation: the control plane Ready on v1.34.3 does not
    // finish it; Ready on v1.34.4 does.
    let seen = stack
        .operation_until_done(0, r.body["operation"]["id"].as_str().unwrap())
        .await;
    succeeded_exactly_when_ready(&seen, "v1.34.4");
    assert_eq!(seen.last().unwrap().0["generation"], 2);
    let cp = stack.ready(0, &id, "v1.34.4").await;
    assert_eq!(cp["kubernetesVersion"], "v1.34.4");
    let client = stack.tenant_client(0, &id).await;
    assert_eq!(
        super::connected(|| client.apiserver_version())
            .await
            .unwrap()
            .git_version,
        "v1.34.4"
    );
    assert!(namespaces(&client).await.contains("before-upgrade"));
    // Two pods over time (the v1.34.3 one stopped after the v1.34.4 one was ready), one running now.
    let logs = stack.runner.logs(&tenant.namespace, "prod");
    let apiserver_logs = logs
        .iter()
        .filter(|p| p.ends_with("logs/kube-apiserver.log"))
        .count();
    assert_eq!(apiserver_logs, 2, "{logs:?}");
    let deployment = Api::<Deployment>::namespaced(stack.kube.clone(), &tenant.namespace)
        .get("prod")
        .await
        .unwrap();
    let status = deployment.status.unwrap();
    assert_eq!(
        (status.replicas, status.updated_replicas, status.ready_replicas),
        (Some(1), Some(1), Some(1))
    );
    stack.stop().await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_without_a_built_binary_is_refused_with_a_condition_naming_the_build_command() {
    let stack = stack("e2e-nobin", 1).await;
    let (_ca, etcd) = etcds("e2e-nobin", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let created = stack
        .create(0, json!({"name": "prod", "kubernetesVersion": "v1.34.1", "replicas": 1, "datastore": {"pool": "etcd"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let message = eventually(
        "a Ready=False condition naming the missing binary",
        Duration::from_secs(60),
        || async {
            let cp = stack.get(0, &id).await;
            cp["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| m.contains("ImageNotBuilt"))
                })
                .and_then(|c| c["message"].as_str().map(String::from))
        },
    )
    .await;
    assert!(
        message.contains(
            "ImageNotBuilt: image registry.k8s.io/kube-apiserver:v1.34.1: kube-apiserver v1.34.1 is not built (built: "
        ) && message.ends_with("); build it with `scripts/test-env build-kube v1.34.1`"),
        "{message}"
    );
    assert_eq!(stack.get(0, &id).await["phase"], "Provisioning");
    // No retry can make the pods: the create's operation fails with the runner's reason.
    let seen = stack
        .operation_until_done(0, created["operation"]["id"].as_str().unwrap())
        .await;
    let (op, cp) = seen.last().unwrap();
    assert_eq!(
        (op["state"].as_str(), op["reason"].as_str(), op["done"].as_bool()),
        (Some("failed"), Some("ImageNotBuilt"), Some(true)),
        "{op:#}"
    );
    let error = op["error"].as_str().unwrap();
    assert!(error.contains("kube-apiserver v1.34.1 is not built"), "{error}");
    assert!(!stage_names(op).contains(&"ready"), "{op:#}");
    assert_eq!(cp["phase"], "Provisioning");
    stack.stop().await;
}

/// A create's or update's long-polled answers: `running` (never done) through a growing prefix of the
/// stages, then `succeeded` at `ready` with the control plane Ready on `version` at that moment.
fn succeeded_exactly_when_ready(seen: &[(Value, Value)], version: &str) {
    const STAGES: [&str; 6] = [
        "placed",
        "applied",
        "datastoreReady",
        "certificates",
        "deployed",
        "ready",
    ];
    let (last, cp) = seen.last().unwrap();
    assert_eq!(
        (last["state"].as_str(), last["stage"].as_str(), stage_names(last)),
        (Some("succeeded"), Some("ready"), STAGES.to_vec()),
        "{last:#}"
    );
    assert_eq!(
        (cp["phase"].as_str(), cp["status"]["installedVersion"].as_str()),
        (Some("Ready"), Some(version)),
        "the operation succeeded before the control plane was Ready on {version}: {cp:#}"
    );
    let times: Vec<&str> = last["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["at"].as_str().unwrap())
        .collect();
    let parsed: Vec<chrono::DateTime<chrono::Utc>> = times.iter().map(|t| t.parse().unwrap()).collect();
    assert!(parsed.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(seen.len() >= 2, "the operation was never seen running: {seen:#?}");
    for (op, _) in &seen[..seen.len() - 1] {
        let names = stage_names(op);
        assert!(
            op["done"] == false && ["pending", "running"].contains(&op["state"].as_str().unwrap()),
            "{op:#}"
        );
        assert!(names.len() < STAGES.len() && STAGES.starts_with(&names), "{op:#}");
    }
}

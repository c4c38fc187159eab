//! Attacks on the sync worker's status-back through a decoy TenantControlPlane.
//!
//! A tenant who may create TCPs in some namespace copies a victim's labels (`tenantplane.io/tenant`,
//! `tenantplane.io/control-plane-id`, `app.kubernetes.io/managed-by`) onto TCPs of its own. The worker must
//! keep writing the victim's status from the victim's own TCP only (namespace from the template, the
//! row's name, the pinned UID), and the victim's kubeconfig download must stay the victim's.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{
    k8s::crd::TenantControlPlane,
    translate,
    worker::{Worker, WorkerMetrics, WorkerSettings, metrics::RejectLabels},
};

use crate::{api::spawn_app_with, support};

/// A `Ready` condition about generation 1.
fn ready(status: &str) -> Value {
    json!({"type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
           "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 1})
}

/// A status claiming `endpoint`, the admin kubeconfig Secret `secret`, and Ready (or not).
fn status(endpoint: &str, secret: &str, is_ready: bool) -> Value {
    json!({"status": {
        "conditions": [ready(if is_ready { "True" } else { "False" })],
        "controlPlaneEndpoint": endpoint,
        "kubeconfig": {"admin": {"secretName": secret}},
        "kubernetesResources": {"version": {"version": "v1.33.2", "status": if is_ready { "Ready" } else { "NotReady" }}}
    }})
}

/// A kubeconfig whose one cluster is `https://<who>:6443`.
fn kubeconfig_of(who: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- {{name: kubernetes, cluster: {{server: 'https://{who}:6443'}}}}\n"
    )
}

/// The server of a served kubeconfig's first cluster.
fn server_of(kubeconfig: &str) -> String {
    let doc: serde_yaml::Value = serde_yaml::from_str(kubeconfig).unwrap();
    doc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The admin kubeconfig Secret `name`, owned by the TCP `owner`.
async fn admin_secret(kube: &kube::Client, owner: &TenantControlPlane, name: &str, text: &str) {
    let namespace = owner.metadata.namespace.clone().unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane", "name": owner.metadata.name, "uid": owner.metadata.uid}]},
        "stringData": {"admin.conf": text}
    }))
    .unwrap();
    Api::<Secret>::namespaced(kube.clone(), &namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A decoy TCP `name` in `namespace` with `labels`; returns it as created.
async fn decoy(kube: &kube::Client, namespace: &str, name: &str, labels: &Value) -> TenantControlPlane {
    let tcp: TenantControlPlane = serde_json::from_value(json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": name, "labels": labels},
        "spec": {"controlPlane": {"service": {"serviceType": "ClusterIP"}},
                 "kubernetes": {"version": "v1.33.2", "kubelet": {}}}
    }))
    .unwrap();
    Api::<TenantControlPlane>::namespaced(kube.clone(), namespace)
        .create(&PostParams::default(), &tcp)
        .await
        .unwrap()
}

fn rejected(metrics: &WorkerMetrics, reason: &str) -> u64 {
    metrics
        .status_rejected
        .get_or_create(&RejectLabels {
            reason: reason.into(),
        })
        .get()
}

#[tokio::test]
async fn a_decoy_tcp_with_another_tenants_labels_changes_nothing_for_the_victim() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app_with(Some(kube.clone())).await;
    let metrics = WorkerMetrics::default();
    let worker = Arc::new(Worker::new(
        app.ctx.db.clone(),
        kube.clone(),
        WorkerSettings {
            poll_ms: 50,
            resync_seconds: 3600.0,
            ..WorkerSettings::default()
        },
        metrics.clone(),
    ));
    let task = tokio::spawn(worker.run());

    // The victim: a Ready control plane with its own kubeconfig.
    let victim = app.tenant("victim").await;
    let member = app.token(&victim, "tenant-member").await;
    let created = app.control_plane(&victim, &member, "prod").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let victim_ns = format!("tp-{victim}");
    let victim_api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &victim_ns);
    let own = support::eventually("the victim's TCP", Duration::from_secs(30), || async {
        victim_api.get_opt("prod").await.ok().flatten()
    })
    .await;
    admin_secret(&kube, &own, "prod-admin-kubeconfig", &kubeconfig_of("victim")).await;
    victim_api
        .patch_status(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(&status("10.0.0.1:6443", "prod-admin-kubeconfig", true)),
        )
        .await
        .unwrap();
    let path = format!("/api/v1/tenants/{victim}/control-planes/{id}");
    let before = support::eventually("the victim Ready", Duration::from_secs(60), || async {
        let r = app.call(Method::GET, &path, Some(&member), None).await;
        (r.body["phase"] == "Ready").then_some(r.body)
    })
    .await;
    let kubeconfig = app
        .call(Method::GET, &format!("{path}/kubeconfig"), Some(&member), None)
        .await;
    assert_eq!(kubeconfig.status, StatusCode::OK, "{}", kubeconfig.text);
    assert_eq!(server_of(&kubeconfig.text), "https://victim:6443");

    // The attacker's namespace, with decoys carrying the victim's labels: one with the victim's name,
    // one with another name, each with a status and a kubeconfig Secret of its own.
    let attacker_ns = support::namespace(&kube, "attacker").await;
    let labels = json!(own.metadata.labels);
    assert_eq!(labels[translate::LABEL_CONTROL_PLANE], id);
    let attacker_api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &attacker_ns);
    for name in ["prod", "thief"] {
        let tcp = decoy(&kube, &attacker_ns, name, &labels).await;
        let secret = format!("{name}-admin-kubeconfig");
        admin_secret(&kube, &tcp, &secret, &kubeconfig_of("attacker")).await;
        for is_ready in [false, true] {
            attacker_api
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&status("6.6.6.6:6443", &secret, is_ready)),
                )
                .await
                .unwrap();
        }
    }
    // Wait until the worker has handled the decoys' events: refused (for their namespace), or, were it
    // to trust them, written over the victim's status.
    support::eventually("decoy events handled", Duration::from_secs(60), || async {
        let r = app.call(Method::GET, &path, Some(&member), None).await;
        (rejected(&metrics, "namespace") >= 6 || r.body["status"] != before["status"]).then_some(())
    })
    .await;
    let during = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(
        during.body["status"], before["status"],
        "a decoy took over the victim's status"
    );
    // Each decoy event (its creation, two status patches) is counted (a watch restart may re-list them).
    assert!(rejected(&metrics, "namespace") >= 6);
    // A decoy can never sit in the victim's namespace under the victim's name (that is the victim's
    // TCP); under another name there it is refused for its name.
    decoy(&kube, &victim_ns, "prod-twin", &labels).await;
    support::eventually("twin refused", Duration::from_secs(60), || async {
        (rejected(&metrics, "name") >= 1).then_some(())
    })
    .await;

    let after = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(after.status, StatusCode::OK);
    assert_eq!(after.body["phase"], "Ready");
    assert_eq!(
        after.body["status"], before["status"],
        "the victim's status is its own TCP's"
    );
    assert_eq!(after.body["status"]["endpoint"], "10.0.0.1:6443");
    let kubeconfig = app
        .call(Method::GET, &format!("{path}/kubeconfig"), Some(&member), None)
        .await;
    assert_eq!(kubeconfig.status, StatusCode::OK, "{}", kubeconfig.text);
    assert_eq!(server_of(&kubeconfig.text), "https://victim:6443");
    assert!(metrics.status_updates.get() >= 1);
    task.abort();
    let _ = Api::<Namespace>::all(kube)
        .delete(&attacker_ns, &Default::default())
        .await;
}

//! Nodes joining a tenant cluster: the in-tenant phase's kubeadm objects on a real tenant served by the
//! runner, checked with real kubeadm v1.34.4 (`kubeadm join phase preflight`: discovery verifies the
//! JWS of cluster-info with the token and pins the CA).

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret},
    events::v1::Event,
};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tenantplane::k8s::crd::TenantControlPlane;

use super::{
    connected, etcds,
    kubeadm::{ca_cert_hash, kubeadm_preflight, new_token, token_secret},
    stack,
};
use crate::support::eventually;

const WAIT: Duration = Duration::from_secs(60);

/// The condition `type_` of a TenantControlPlane, as (status, reason, message).
fn condition(tcp: &TenantControlPlane, type_: &str) -> Option<(String, String, String)> {
    let c = tcp
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits for `NodeJoinReady` to have `status` and `reason`; returns the TenantControlPlane.
async fn node_join(
    api: &Api<TenantControlPlane>,
    name: &str,
    status: &str,
    reason: &str,
) -> TenantControlPlane {
    eventually(&format!("NodeJoinReady={status} ({reason})"), WAIT, || async {
        let tcp = api.get(name).await.ok()?;
        let (s, r, _) = condition(&tcp, "NodeJoinReady")?;
        (s == status && r == reason).then_some(tcp)
    })
    .await
}

/// A ConfigMap of the tenant cluster's `namespace`, once it satisfies `check`.
async fn config_map(
    tenant: &kube::Client,
    namespace: &str,
    name: &str,
    check: impl Fn(&ConfigMap) -> bool,
) -> ConfigMap {
    let api = Api::<ConfigMap>::namespaced(tenant.clone(), namespace);
    eventually(&format!("ConfigMap {namespace}/{name}"), WAIT, || async {
        connected(|| api.get_opt(name)).await.ok()?.filter(|cm| check(cm))
    })
    .await
}

/// Waits for a Normal Event `reason` on the TenantControlPlane whose note contains `needle`.
async fn restored_event(kube: &kube::Client, ns: &str, name: &str, reason: &str, needle: &str) -> String {
    let api: Api<Event> = Api::namespaced(kube.clone(), ns);
    eventually(&format!("a {reason} Event naming {needle}"), WAIT, || async {
        api.list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Normal"))
            .find_map(|e| e.note.filter(|n| n.contains(needle)))
    })
    .await
}

fn data<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubeadm_discovery_passes_with_a_signed_token_and_the_join_objects_are_kept_in_the_tenant() {
    let stack = stack("e2e-join", 1).await;
    let (_ca, etcd) = etcds("e2e-join", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let created = stack
        .create(0, json!({"name": "join", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "etcd"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    let endpoint = cp["status"]["endpoint"].as_str().unwrap().to_string();
    let ns = stack.tenants[0].namespace.clone();
    let tcps = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &ns);
    let tenant = stack.tenant_client(0, &id).await;

    // The in-tenant phase reports the objects and their checksums.
    let tcp = node_join(&tcps, "join", "True", "JoinObjectsPresent").await;
    let status = tcp.status.clone().unwrap();
    let kubeadmconfig = status.kubeadmconfig.unwrap();
    assert_eq!(kubeadmconfig.configmap_name.as_deref(), Some("kubeadm-config"));
    assert!(kubeadmconfig.checksum.unwrap().starts_with("sha256:"));
    assert!(
        status
            .kubeadm_phase
            .unwrap()
            .bootstrap_token
            .unwrap()
            .checksum
            .is_some()
    );

    // cluster-info holds the endpoint and the tenant CA.
    let ca_secret = Api::<Secret>::namespaced(stack.kube.clone(), &ns)
        .get("join-ca")
        .await
        .unwrap();
    let ca_pem = String::from_utf8(ca_secret.data.unwrap()["ca.crt"].0.clone()).unwrap();
    let info = config_map(&tenant, "kube-public", "cluster-info", |_| true).await;
    let kubeconfig: Value = serde_yaml::from_str(data(&info, "kubeconfig").unwrap()).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        json!(format!("https://{endpoint}"))
    );
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"],
        json!(base64::engine::general_purpose::STANDARD.encode(&ca_pem))
    );

    // A token signs cluster-info (the tenant's bootstrapsigner), and real kubeadm's discovery passes.
    let (token_id, token_secret_half) = new_token();
    let secrets = Api::<Secret>::namespaced(tenant.clone(), "kube-system");
    let (post, delete) = (PostParams::default(), DeleteParams::default());
    let token_object = token_secret(&token_id, &token_secret_half);
    connected(|| secrets.create(&post, &token_object)).await.unwrap();
    let jws = format!("jws-kubeconfig-{token_id}");
    config_map(&tenant, "kube-public", "cluster-info", |cm| {
        data(cm, &jws).is_some()
    })
    .await;
    let dir = tenantplane::runtime::scratch_dir("e2e-kubeadm").unwrap();
    let token = format!("{token_id}.{token_secret_half}");
    let hash = ca_cert_hash(&ca_pem);
    let (ok, out) = kubeadm_preflight(&dir, &endpoint, &token, &hash);
    assert!(ok, "kubeadm join phase preflight failed:\n{out}");
    assert!(
        out.contains("[preflight] Reading configuration from the \"kubeadm-config\" ConfigMap in namespace \"kube-system\""),
        "{out}"
    );
    node_join(&tcps, "join", "True", "JoinObjectsPresent").await;

    // The addons of the API's default (CoreDNS, kube-proxy) are installed, and reported as such; with no
    // node they do not run, and AddonsReady says so.
    let expected = (
        "False".to_string(),
        "AddonsNotAvailable".to_string(),
        "CoreDNS: 0/2 replicas available; kube-proxy: available on 0/0 nodes".to_string(),
    );
    let mut last = None;
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        let tcp = tcps.get("join").await.unwrap();
        let addons = tcp
            .status
            .as_ref()
            .and_then(|s| s.addons.clone())
            .unwrap_or_default();
        let installed =
            addons.core_dns.is_some_and(|a| a.enabled) && addons.kube_proxy.is_some_and(|a| a.enabled);
        last = Some((installed, condition(&tcp, "AddonsReady")));
        if last == Some((true, Some(expected.clone()))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        last,
        Some((true, Some(expected))),
        "addons installed, AddonsReady"
    );
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(tenant.clone(), "kube-system");
    let kube_dns = connected(|| services.get("kube-dns")).await.unwrap();
    assert_eq!(kube_dns.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.10"));
    let proxy = config_map(&tenant, "kube-system", "kube-proxy", |_| true).await;
    assert!(
        data(&proxy, "kubeconfig.conf")
            .unwrap()
            .contains(&format!("server: https://{endpoint}\n"))
    );
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(tenant.clone(), "kube-system");
    connected(|| deployments.delete("coredns", &delete))
        .await
        .unwrap();
    eventually("the CoreDNS Deployment back", WAIT, || async {
        connected(|| deployments.get_opt("coredns"))
            .await
            .ok()?
            .filter(|d| d.metadata.deletion_timestamp.is_none())
    })
    .await;
    let note = "Deployment kube-system/coredns in the tenant cluster was deleted; created again";
    restored_event(&stack.kube, &ns, "join", "TenantObjectRecreated", note).await;

    // A CA hash that is not the tenant's is refused.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (ok, out) = kubeadm_preflight(&dir, &endpoint, &token, &wrong);
    assert!(!ok && out.contains("are pinned"), "{out}");

    // A revoked token: its signature goes, and discovery fails.
    let token_name = format!("bootstrap-token-{token_id}");
    connected(|| secrets.delete(&token_name, &delete)).await.unwrap();
    config_map(&tenant, "kube-public", "cluster-info", |cm| {
        data(cm, &jws).is_none()
    })
    .await;
    let (ok, out) = kubeadm_preflight(&dir, &endpoint, &token, &hash);
    assert!(!ok, "kubeadm passed with a revoked token:\n{out}");
    assert!(out.contains(&token_id), "{out}");

    // Deleted or edited objects come back, with an Event.
    let public = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-public");
    connected(|| public.delete("cluster-info", &delete))
        .await
        .unwrap();
    config_map(&tenant, "kube-public", "cluster-info", |cm| {
        data(cm, "kubeconfig").is_some()
    })
    .await;
    let note = "ConfigMap kube-public/cluster-info in the tenant cluster was deleted; created again";
    restored_event(&stack.kube, &ns, "join", "TenantObjectRecreated", note).await;
    let system = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system");
    let (edit, merge) = (
        Patch::Merge(json!({"data": {"ClusterConfiguration": "edited"}})),
        PatchParams::default(),
    );
    connected(|| system.patch("kubeadm-config", &merge, &edit))
        .await
        .unwrap();
    config_map(&tenant, "kube-system", "kubeadm-config", |cm| {
        data(cm, "ClusterConfiguration").is_some_and(|c| c.contains("controlPlaneEndpoint"))
    })
    .await;
    let note = "ConfigMap kube-system/kubeadm-config in the tenant cluster was changed; its applied fields are restored";
    restored_event(&stack.kube, &ns, "join", "TenantObjectReverted", note).await;

    // The seed's kubelet patches reach kubelet-config; a broken one is a condition and changes nothing.
    let patches = json!([
        {"op": "add", "path": "/featureGates", "value": {"KubeletCrashLoopBackOffMax": false, "KubeletEnsureSecretPulledImages": false}},
        {"op": "replace", "path": "/cgroupDriver", "value": "systemd"},
    ]);
    set_kubelet_patches(&tcps, patches).await;
    let patched = config_map(&tenant, "kube-system", "kubelet-config", |cm| {
        data(cm, "kubelet").is_some_and(|k| k.contains("KubeletEnsureSecretPulledImages"))
    })
    .await;
    let config: Value = serde_yaml::from_str(data(&patched, "kubelet").unwrap()).unwrap();
    assert_eq!(
        config["featureGates"],
        json!({"KubeletCrashLoopBackOffMax": false, "KubeletEnsureSecretPulledImages": false})
    );
    assert_eq!(
        (config["cgroupDriver"].clone(), config["clusterDNS"].clone()),
        (json!("systemd"), json!(["10.96.0.10"]))
    );
    set_kubelet_patches(&tcps, json!([{"op": "remove", "path": "/noSuchField"}])).await;
    let tcp = node_join(&tcps, "join", "False", "KubeletConfigPatchInvalid").await;
    let (_, _, message) = condition(&tcp, "NodeJoinReady").unwrap();
    assert!(
        message.starts_with("spec.kubernetes.kubelet.configurationJSONPatches[0] (remove /noSuchField)"),
        "{message}"
    );
    let kept = config_map(&tenant, "kube-system", "kubelet-config", |_| true).await;
    assert_eq!(data(&kept, "kubelet"), data(&patched, "kubelet"));

    // An addon taken out of the spec is removed from the tenant, and reported as not installed.
    let patch = json!({"spec": {"addons": {"kubeProxy": null}}});
    tcps.patch("join", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let daemon_sets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(tenant.clone(), "kube-system");
    eventually("kube-proxy gone", WAIT, || async {
        connected(|| daemon_sets.get_opt("kube-proxy"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        connected(|| system.get_opt("kube-proxy"))
            .await
            .unwrap()
            .is_none()
    );
    eventually("kube-proxy reported as not installed", WAIT, || async {
        let tcp = tcps.get("join").await.ok()?;
        (!tcp.status?.addons?.kube_proxy?.enabled).then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    stack.stop().await;
}

/// Sets `spec.kubernetes.kubelet.configurationJSONPatches` as a user would (`kubectl patch`).
async fn set_kubelet_patches(tcps: &Api<TenantControlPlane>, patches: Value) {
    let patch = json!({"spec": {"kubernetes": {"kubelet": {"configurationJSONPatches": patches}}}});
    tcps.patch("join", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

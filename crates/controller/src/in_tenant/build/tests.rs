use serde_json::{Value, json};
use tenantplane_testkit::tcp;

use super::{
    kubelet::{PatchFailure, cluster_dns, configuration},
    status::{Found, NODE_JOIN_READY, Report, SigningToken, report},
    upload_config::{COMPONENT_CONFIG_HASH, KUBELET_CONFIG, cluster_configuration},
    *,
};
use crate::{Error, k8s::crd::TenantControlPlane};

const KUBEADM_KUBELET_CONFIG: &str = include_str!("testdata/kubeadm-v1.34.4-kubelet-config.yaml");
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn kubeadm_kubelet_config() -> Value {
    serde_yaml::from_str(KUBEADM_KUBELET_CONFIG).unwrap()
}

fn facts(tcp: &TenantControlPlane) -> Facts<'_> {
    Facts {
        tcp,
        endpoint: "192.0.2.10:6443",
        ca_cert: CA,
        version: "v1.34.4",
        key_algorithm: KeyAlgorithm::EcdsaP256,
        namespaces: &[],
    }
}

/// The seed's own manifest (Kamaji's `test-tenant-gold.yaml`), as a typed object.
fn seed() -> TenantControlPlane {
    serde_yaml::from_str(
        r#"
apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: k8s-133, namespace: default, labels: {tenant.clastix.io: k8s-133}}
spec:
  dataStore: etcd-default
  controlPlane: {deployment: {replicas: 2}, service: {serviceType: LoadBalancer}}
  kubernetes:
    version: "v1.34.4"
    kubelet:
      configurationJSONPatches:
        - op: add
          path: /featureGates
          value: {KubeletCrashLoopBackOffMax: false, KubeletEnsureSecretPulledImages: false}
        - op: replace
          path: /cgroupDriver
          value: systemd
  networkProfile: {port: 6443}
  addons: {coreDNS: {}, kubeProxy: {}, konnectivity: {server: {port: 8132}, agent: {mode: DaemonSet}}}
"#,
    )
    .unwrap()
}

fn object<'a>(objects: &'a [TenantObject], kind: Kind, name: &str) -> &'a TenantObject {
    objects
        .iter()
        .find(|o| o.key.kind == kind && o.key.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} {name}"))
}

#[test]
fn the_kubelet_configuration_of_a_default_tenant_is_what_kubeadm_v1_34_4_uploads() {
    let tcp = tcp("tenants", "cp").build();
    assert_eq!(configuration(&tcp).unwrap(), kubeadm_kubelet_config());
}

#[test]
fn the_seed_manifest_gets_kubeadms_kubelet_configuration_with_both_patches_applied() {
    let mut expected = kubeadm_kubelet_config();
    expected["featureGates"] =
        json!({"KubeletCrashLoopBackOffMax": false, "KubeletEnsureSecretPulledImages": false});
    expected["cgroupDriver"] = json!("systemd");
    assert_eq!(configuration(&seed()).unwrap(), expected);
    let (objects, failure) = upload_config::objects(&facts(&seed()));
    assert_eq!(failure, None);
    let config_map = object(&objects, Kind::ConfigMap, KUBELET_CONFIG);
    let uploaded: Value = serde_yaml::from_str(config_map.body["data"]["kubelet"].as_str().unwrap()).unwrap();
    assert_eq!(uploaded, expected);
    // Signed as kubeadm signs it: sha256 of the value.
    let yaml = config_map.body["data"]["kubelet"].as_str().unwrap();
    assert_eq!(
        config_map.body["metadata"]["annotations"][COMPONENT_CONFIG_HASH],
        json!(checksum([yaml]))
    );
}

#[test]
fn kubeadms_own_signature_of_its_kubelet_configuration_is_the_sha256_of_the_value() {
    // The hash real kubeadm v1.34.4 wrote beside the testdata file.
    assert_eq!(
        checksum([KUBEADM_KUBELET_CONFIG]),
        "sha256:26488e9fc7c5cb5fdda9996cda2e6651a9af5febce07ea02de11bd3ef3f49e9c"
    );
}

#[test]
fn a_patch_that_does_not_apply_names_its_index_op_and_path_and_keeps_kubelet_config_out() {
    let tcp = tcp("tenants", "cp")
        .spec(
            "kubernetes",
            json!({"version": "v1.34.4", "kubelet": {"configurationJSONPatches": [
                {"op": "add", "path": "/featureGates", "value": {"A": true}},
                {"op": "replace", "path": "/noSuchField", "value": 1},
            ]}}),
        )
        .build();
    let failure = PatchFailure {
        index: 1,
        op: "replace".into(),
        path: "/noSuchField".into(),
        why: "path is invalid".into(),
    };
    assert_eq!(configuration(&tcp), Err(failure.clone()));
    assert_eq!(
        failure.to_string(),
        "spec.kubernetes.kubelet.configurationJSONPatches[1] (replace /noSuchField) does not apply to the kubelet configuration: path is invalid"
    );
    let desired = desired(&facts(&tcp));
    assert_eq!(desired.kubelet_error, Some(failure));
    assert!(desired.objects().all(|o| o.key.name != KUBELET_CONFIG));
    let report = report(
        &tcp,
        &desired,
        Ok(&Found::default()),
        "2026-12-01T00:00:00Z".parse().unwrap(),
    );
    let condition = njr(&report);
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        (NODE_JOIN_READY, "False")
    );
    assert_eq!(condition.reason, "KubeletConfigPatchInvalid");
    assert!(
        condition
            .message
            .ends_with("; kube-system/kubelet-config keeps its last version")
    );
}

#[test]
fn a_failed_test_op_is_reported_as_not_matching() {
    let tcp = tcp("tenants", "cp")
        .spec(
            "kubernetes",
            json!({"version": "v1.34.4", "kubelet": {"configurationJSONPatches": [
                {"op": "test", "path": "/cgroupDriver", "value": "cgroupfs"},
            ]}}),
        )
        .build();
    assert_eq!(configuration(&tcp).unwrap_err().why, "value did not match");
}

#[test]
fn cluster_dns_is_the_tenth_service_address_unless_dns_service_ips_are_given() {
    assert_eq!(cluster_dns(&tcp("t", "a").build()), vec!["10.96.0.10"]);
    let v6 = tcp("t", "b")
        .spec("networkProfile", json!({"serviceCidrs": ["fd00:10:96::/112"]}))
        .build();
    assert_eq!(cluster_dns(&v6), vec!["fd00:10:96::a"]);
    let explicit = tcp("t", "c")
        .spec("networkProfile", json!({"dnsServiceIPs": ["10.96.0.53"]}))
        .build();
    assert_eq!(cluster_dns(&explicit), vec!["10.96.0.53"]);
    let cgroupfs = tcp("t", "d")
        .spec(
            "kubernetes",
            json!({"version": "v1.34.4", "kubelet": {"cgroupfs": "cgroupfs"}}),
        )
        .build();
    assert_eq!(
        configuration(&cgroupfs).unwrap()["cgroupDriver"],
        json!("cgroupfs")
    );
}

#[test]
fn cluster_info_holds_the_ca_and_the_endpoint_in_an_unnamed_cluster() {
    let objects = bootstrap_token::objects(&facts(&seed()));
    let cm = object(&objects, Kind::ConfigMap, "cluster-info");
    assert_eq!(cm.key.namespace, "kube-public");
    let kubeconfig: Value = serde_yaml::from_str(cm.body["data"]["kubeconfig"].as_str().unwrap()).unwrap();
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(CA);
    assert_eq!(
        kubeconfig["clusters"],
        json!([{"name": "", "cluster": {"certificate-authority-data": ca, "server": "https://192.0.2.10:6443"}}])
    );
    // Only the kubeconfig key is applied: the bootstrapsigner's signatures are not removed.
    assert_eq!(cm.body["data"].as_object().unwrap().len(), 1);
}

/// A binding as (kind, namespace, name, roleRef name, subjects as kind/name).
type BindingRow = (Kind, String, String, String, Vec<(String, String)>);

/// Every binding among `objects`, sorted.
fn bindings(objects: &[TenantObject]) -> Vec<BindingRow> {
    let mut out: Vec<_> = objects
        .iter()
        .filter(|o| matches!(o.key.kind, Kind::RoleBinding | Kind::ClusterRoleBinding))
        .map(|o| {
            let subjects = o.body["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["kind"].as_str().unwrap().into(),
                        s["name"].as_str().unwrap().into(),
                    )
                })
                .collect();
            let role = o.body["roleRef"]["name"].as_str().unwrap().to_string();
            (
                o.key.kind,
                o.key.namespace.clone(),
                o.key.name.clone(),
                role,
                subjects,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_bindings_are_kubeadms() {
    let desired = desired(&facts(&seed()));
    let all: Vec<TenantObject> = desired
        .upload_config
        .iter()
        .chain(&desired.bootstrap_token)
        .cloned()
        .collect();
    let g = |n: &str| ("Group".to_string(), n.to_string());
    // As real kubeadm v1.34.4 creates them (init phase upload-config all, bootstrap-token).
    let expected = vec![
        (
            Kind::RoleBinding,
            "kube-public".into(),
            "kubeadm:bootstrap-signer-clusterinfo".into(),
            "kubeadm:bootstrap-signer-clusterinfo".into(),
            vec![("User".into(), "system:anonymous".into())],
        ),
        (
            Kind::RoleBinding,
            "kube-system".into(),
            "kubeadm:kubelet-config".into(),
            "kubeadm:kubelet-config".into(),
            vec![g(BOOTSTRAPPERS), g(NODES)],
        ),
        (
            Kind::RoleBinding,
            "kube-system".into(),
            "kubeadm:nodes-kubeadm-config".into(),
            "kubeadm:nodes-kubeadm-config".into(),
            vec![g(BOOTSTRAPPERS), g(NODES)],
        ),
        (
            Kind::ClusterRoleBinding,
            "".into(),
            "kubeadm:get-nodes".into(),
            "kubeadm:get-nodes".into(),
            vec![g(BOOTSTRAPPERS)],
        ),
        (
            Kind::ClusterRoleBinding,
            "".into(),
            "kubeadm:kubelet-bootstrap".into(),
            "system:node-bootstrapper".into(),
            vec![g(BOOTSTRAPPERS)],
        ),
        (
            Kind::ClusterRoleBinding,
            "".into(),
            "kubeadm:node-autoapprove-bootstrap".into(),
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient".into(),
            vec![g(BOOTSTRAPPERS)],
        ),
        (
            Kind::ClusterRoleBinding,
            "".into(),
            "kubeadm:node-autoapprove-certificate-rotation".into(),
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient".into(),
            vec![g(NODES)],
        ),
    ];
    assert_eq!(bindings(&all), expected);
    let role = object(&all, Kind::Role, "kubeadm:kubelet-config");
    assert_eq!(
        role.body["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kubelet-config"], "verbs": ["get"]}])
    );
    for o in &all {
        assert_eq!(
            o.body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            json!("tenantplane"),
            "{}",
            o.key
        );
    }
}

#[test]
fn the_cluster_configuration_names_the_endpoint_version_networks_and_no_etcd() {
    let seed = seed();
    let config = cluster_configuration(&facts(&seed));
    assert_eq!(config["controlPlaneEndpoint"], json!("192.0.2.10:6443"));
    assert_eq!(config["kubernetesVersion"], json!("v1.34.4"));
    assert_eq!(config["clusterName"], json!("k8s-133"));
    assert_eq!(
        config["networking"],
        json!({"dnsDomain": "cluster.local", "podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/16"})
    );
    assert_eq!(config["encryptionAlgorithm"], json!("ECDSA-P256"));
    assert_eq!(config.get("etcd"), None);
    assert_eq!(
        (config["dns"].clone(), config["proxy"].clone()),
        (json!({}), json!({}))
    );
    let bare = tcp("t", "bare").build();
    let config = cluster_configuration(&facts(&bare));
    assert_eq!(
        (config["dns"].clone(), config["proxy"].clone()),
        (json!({"disabled": true}), json!({"disabled": true}))
    );
}

fn found(signed: &[&str], tokens: &[&str]) -> Found {
    Found {
        signed: signed.iter().map(|s| s.to_string()).collect(),
        tokens: tokens
            .iter()
            .map(|id| SigningToken { id: id.to_string() })
            .collect(),
        ..Found::default()
    }
}

#[test]
fn node_join_ready_needs_a_signature_for_every_signing_token_and_checksums_keep_their_time() {
    let seed = seed();
    let desired = desired(&facts(&seed));
    let t0 = "2026-12-01T00:00:00Z".parse().unwrap();
    let first = report(&seed, &desired, Ok(&found(&["abcdef"], &["abcdef"])), t0);
    assert_eq!(njr(&first).status, "True");
    assert_eq!(njr(&first).reason, "JoinObjectsPresent");
    let unsigned = report(
        &seed,
        &desired,
        Ok(&found(&["abcdef"], &["abcdef", "zzzzzz"])),
        t0,
    );
    assert_eq!(njr(&unsigned).status, "False");
    assert_eq!(njr(&unsigned).reason, "ClusterInfoNotSigned");
    assert!(njr(&unsigned).message.contains("zzzzzz"));
    // A later pass with the same objects keeps lastUpdate; a failed one keeps the checksums.
    let mut later = seed.clone();
    let status = later.status.get_or_insert_with(Default::default);
    status.kubeadmconfig = first.kubeadmconfig.clone();
    status.kubeadm_phase = first.kubeadm_phase.clone();
    status.conditions = first.conditions.clone();
    let t1 = "2026-12-01T01:00:00Z".parse().unwrap();
    let again = report(&later, &desired, Ok(&found(&[], &[])), t1);
    assert_eq!(again.kubeadmconfig, first.kubeadmconfig);
    assert_eq!(njr(&again).last_transition_time, njr(&first).last_transition_time);
    let err = Error::NotReady {
        reason: "TenantUnreachable",
        message: "connection refused".into(),
    };
    let failed: Report = report(&later, &desired, Err(&err), t1);
    assert_eq!(failed.kubeadm_phase, first.kubeadm_phase);
    assert_eq!(
        (njr(&failed).status.as_str(), njr(&failed).reason.as_str()),
        ("False", "TenantUnreachable")
    );
}

#[test]
fn coredns_is_kubeadms_with_kube_dns_at_the_tenth_address_and_the_image_of_the_spec() {
    let seed = seed();
    let desired = desired(&facts(&seed));
    let objects = desired.core_dns.clone().unwrap();
    let service = object(&objects, Kind::Service, "kube-dns");
    assert_eq!(service.body["spec"]["clusterIP"], json!("10.96.0.10"));
    assert_eq!(service.body["metadata"]["labels"]["k8s-app"], json!("kube-dns"));
    assert_eq!(service.body["metadata"]["labels"][PHASE_LABEL], json!("coredns"));
    let deployment = object(&objects, Kind::Deployment, "coredns");
    assert_eq!(
        deployment.body["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("registry.k8s.io/coredns/coredns:v1.12.1")
    );
    let corefile = object(&objects, Kind::ConfigMap, "coredns").body["data"]["Corefile"].clone();
    assert!(
        corefile
            .as_str()
            .unwrap()
            .contains("kubernetes cluster.local in-addr.arpa ip6.arpa {")
    );
    let binding = object(&objects, Kind::ClusterRoleBinding, "system:coredns");
    assert_eq!(
        binding.body["subjects"],
        json!([{"kind": "ServiceAccount", "namespace": "kube-system", "name": "coredns"}])
    );
    let mirrored = tcp("t", "m")
        .spec(
            "addons",
            json!({"coreDNS": {"imageRepository": "mirror.example/dns", "imageTag": "v1.12.0"}}),
        )
        .build();
    let objects = super::desired(&facts(&mirrored)).core_dns.unwrap();
    assert_eq!(
        object(&objects, Kind::Deployment, "coredns").body["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("mirror.example/dns/coredns:v1.12.0")
    );
}

#[test]
fn kube_proxy_points_at_the_endpoint_runs_the_tenants_version_and_nodes_may_read_its_config() {
    let seed = seed();
    let objects = desired(&facts(&seed)).kube_proxy.unwrap();
    let config_map = object(&objects, Kind::ConfigMap, "kube-proxy");
    let kubeconfig: Value =
        serde_yaml::from_str(config_map.body["data"]["kubeconfig.conf"].as_str().unwrap()).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        json!("https://192.0.2.10:6443")
    );
    let config: Value =
        serde_yaml::from_str(config_map.body["data"]["config.conf"].as_str().unwrap()).unwrap();
    assert_eq!(config["clusterCIDR"], json!("10.244.0.0/16"));
    let daemon_set = object(&objects, Kind::DaemonSet, "kube-proxy");
    assert_eq!(
        daemon_set.body["spec"]["template"]["spec"]["containers"][0]["image"],
        json!("registry.k8s.io/kube-proxy:v1.34.4")
    );
    let bindings = bindings(&objects);
    assert_eq!(
        bindings
            .iter()
            .map(|b| (b.2.as_str(), b.3.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("kube-proxy", "kube-proxy"),
            ("kubeadm:node-proxier", "system:node-proxier")
        ]
    );
}

#[test]
fn addons_are_reported_as_installed_only_when_requested_and_ready_only_when_available() {
    let seed = seed();
    let desired = desired(&facts(&seed));
    let t0 = "2026-12-01T00:00:00Z".parse().unwrap();
    let mut found = found(&[], &[]);
    let r = report(&seed, &desired, Ok(&found), t0);
    let addons = r.addons.unwrap();
    assert!(addons.core_dns.unwrap().enabled && addons.kube_proxy.unwrap().enabled);
    let ready = r.conditions.iter().find(|c| c.type_ == "AddonsReady").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "AddonsNotAvailable")
    );
    assert_eq!(
        ready.message,
        "CoreDNS: 0/0 replicas available; kube-proxy: available on 0/0 nodes; Konnectivity: 0/0 agents available"
    );
    found.core_dns = Some(status::Rollout {
        available: 2,
        desired: 2,
    });
    found.kube_proxy = Some(status::Rollout {
        available: 3,
        desired: 3,
    });
    let r = report(&seed, &desired, Ok(&found), t0);
    let ready = r.conditions.iter().find(|c| c.type_ == "AddonsReady").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.message.as_str()),
        (
            "False",
            "CoreDNS: 2/2 replicas available; kube-proxy: available on 3/3 nodes; Konnectivity: 0/0 agents available"
        )
    );
    found.konnectivity = Some(status::Rollout {
        available: 3,
        desired: 3,
    });
    let r = report(&seed, &desired, Ok(&found), t0);
    assert!(r.addons.as_ref().unwrap().konnectivity.as_ref().unwrap().enabled);
    let ready = r.conditions.iter().find(|c| c.type_ == "AddonsReady").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "AddonsAvailable")
    );
    let bare = tcp("t", "bare").build();
    let r = report(&bare, &super::desired(&facts(&bare)), Ok(&found), t0);
    let addons = r.addons.unwrap();
    assert!(!addons.core_dns.unwrap().enabled && !addons.kube_proxy.unwrap().enabled);
    assert!(!addons.konnectivity.unwrap().enabled);
    let ready = r.conditions.iter().find(|c| c.type_ == "AddonsReady").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "NoAddons")
    );
}

#[test]
fn the_last_kubelet_config_is_kept_while_the_patches_do_not_apply() {
    let broken = tcp("t", "b")
        .spec("kubernetes", json!({"version": "v1.34.4", "kubelet": {"configurationJSONPatches": [{"op": "remove", "path": "/x"}]}}))
        .build();
    let kubelet_config = ObjectKey {
        kind: Kind::ConfigMap,
        namespace: "kube-system".into(),
        name: "kubelet-config".into(),
    };
    assert!(desired(&facts(&broken)).keeps(&kubelet_config));
    assert!(!desired(&facts(&seed())).keeps(&kubelet_config));
}

/// The report's `NodeJoinReady` condition.
fn njr(report: &Report) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    report
        .conditions
        .iter()
        .find(|c| c.type_ == NODE_JOIN_READY)
        .unwrap()
}

#[test]
fn a_written_report_reads_back_as_current_so_an_unchanged_pass_writes_nothing() {
    let seed = seed();
    let desired = desired(&facts(&seed));
    let first = report(
        &seed,
        &desired,
        Ok(&found(&[], &[])),
        "2026-12-01T00:00:00Z".parse().unwrap(),
    );
    let mut later = seed.clone();
    let status = later.status.get_or_insert_with(Default::default);
    status.kubeadmconfig = first.kubeadmconfig.clone();
    status.kubeadm_phase = first.kubeadm_phase.clone();
    status.addons = first.addons.clone();
    // The TenantControlPlane reconcile's own conditions sit beside them.
    status.conditions = first.conditions.clone();
    status.conditions.insert(0, njr(&first).clone());
    status.conditions[0].type_ = "Ready".into();
    assert_eq!(status::current(&later), first);
    let again = report(
        &later,
        &desired,
        Ok(&found(&[], &[])),
        "2026-12-01T01:00:00Z".parse().unwrap(),
    );
    assert_eq!(again, first);
}

#[test]
fn konnectivity_agents_dial_the_endpoint_host_with_a_token_for_the_servers_audience() {
    let seed = seed();
    let desired = desired(&facts(&seed));
    let objects = desired.konnectivity.clone().unwrap();
    let keys: Vec<(Kind, &str, &str)> = objects
        .iter()
        .map(|o| (o.key.kind, o.key.namespace.as_str(), o.key.name.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            (Kind::ServiceAccount, "kube-system", "konnectivity-agent"),
            (Kind::ClusterRoleBinding, "", "system:konnectivity-server"),
            (Kind::DaemonSet, "kube-system", "konnectivity-agent"),
        ]
    );
    let crb = &object(&objects, Kind::ClusterRoleBinding, "system:konnectivity-server").body;
    assert_eq!(crb["roleRef"]["name"], "system:auth-delegator");
    assert_eq!(
        crb["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:konnectivity-server"}])
    );
    let ds = &object(&objects, Kind::DaemonSet, "konnectivity-agent").body;
    assert_eq!(ds["metadata"]["labels"][PHASE_LABEL], "konnectivity");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "konnectivity-agent");
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "registry.k8s.io/kas-network-proxy/proxy-agent:v0.34.0"
    );
    assert_eq!(
        container["args"],
        json!([
            "--admin-server-port=8133",
            "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            "--health-server-port=8134",
            "--proxy-server-host=192.0.2.10",
            "--proxy-server-port=8132",
            "--service-account-token-path=/var/run/secrets/tokens/konnectivity-agent-token",
        ])
    );
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"],
        json!({"path": "konnectivity-agent-token", "audience": "system:konnectivity-server", "expirationSeconds": 3600})
    );

    // Mode Deployment: a Deployment of the given replicas, with the user's extra flags after ours.
    let mut tcp = seed.clone();
    tcp.spec.addons.as_mut().unwrap().konnectivity = Some(
        serde_json::from_value(json!({
            "server": {"port": 9132},
            "agent": {"mode": "Deployment", "replicas": 2, "version": "v0.33.1", "extraArgs": ["--v=2", "--proxy-server-port=1"]},
        }))
        .unwrap(),
    );
    let objects = super::desired(&Facts {
        endpoint: "[fd00::7]:6443",
        ..facts(&tcp)
    })
    .konnectivity
    .unwrap();
    let deployment = &object(&objects, Kind::Deployment, "konnectivity-agent").body;
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.k8s.io/kas-network-proxy/proxy-agent:v0.33.1"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--proxy-server-host=fd00::7"), "{args:?}");
    assert!(args.contains(&"--proxy-server-port=9132"), "{args:?}");
    assert_eq!(args.last(), Some(&"--v=2"));
}

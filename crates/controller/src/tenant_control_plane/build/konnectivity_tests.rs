use super::*;
use crate::WorkloadSettings;

const NOW: i64 = 1_800_000_000;

/// `tenants/cp` on etcd at v1.34.4 with `spec.addons.konnectivity` set to `konnectivity`.
fn with_konnectivity(konnectivity: serde_json::Value) -> TenantControlPlane {
    tenantplane_testkit::tcp("tenants", "cp")
        .datastore("ds")
        .version("v1.34.4")
        .uid("0b7a3c1e-0000-4000-8000-000000000001")
        .spec("networkProfile", json!({"address": "127.130.0.7", "port": 6443}))
        .spec("addons", json!({"konnectivity": konnectivity}))
        .build()
}

fn etcd() -> StorageView {
    StorageView {
        driver: Driver::Etcd,
        schema: "tenant1".into(),
        endpoints: vec!["etcd-a:2379".into()],
        overrides: vec![],
        config_checksum: "cfg".into(),
        certificate: Some(("crt".into(), true)),
    }
}

fn text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

#[test]
fn the_server_runs_beside_the_apiserver_with_its_socket_certificates_and_port() {
    let t = with_konnectivity(json!({
        "server": {"port": 8132, "extraArgs": ["--v=3", "--agent-port=9999", "--admin-bind-address=0.0.0.0"]},
    }));
    let settings = WorkloadSettings::default();
    let pki = pki(&t, &BTreeMap::new(), None, &settings, NOW).unwrap();
    let built = deployment(&t, &etcd(), &pki, "v1.34.4", &settings).unwrap();
    assert_eq!(
        built.konnectivity_args.unwrap().dropped,
        ["--agent-port=9999", "--admin-bind-address=0.0.0.0"]
    );
    let pod = built.deployment.spec.unwrap().template.spec.unwrap();

    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "konnectivity-server"
        ]
    );
    let server = &pod.containers[3];
    assert_eq!(
        server.image.as_deref(),
        Some("registry.k8s.io/kas-network-proxy/proxy-server:v0.34.0")
    );
    assert_eq!(
        server.command.as_deref(),
        Some(&["/proxy-server".to_string()][..])
    );
    assert_eq!(
        server.args.clone().unwrap(),
        [
            "--admin-bind-address=127.0.0.1",
            "--admin-port=8133",
            "--agent-namespace=kube-system",
            "--agent-port=8132",
            "--agent-service-account=konnectivity-agent",
            "--authentication-audience=system:konnectivity-server",
            "--cluster-cert=/etc/kubernetes/pki/apiserver.crt",
            "--cluster-key=/etc/kubernetes/pki/apiserver.key",
            "--delete-existing-uds-file=true",
            "--health-port=8134",
            "--kubeconfig=/etc/kubernetes/konnectivity/konnectivity-server.conf",
            "--mode=grpc",
            "--server-count=2",
            "--server-port=0",
            "--uds-name=/run/konnectivity/konnectivity-server.socket",
            "--v=3",
        ]
    );
    let apiserver = &pod.containers[0];
    let args = apiserver.args.clone().unwrap();
    assert!(
        args.contains(
            &"--egress-selector-config-file=/etc/kubernetes/konnectivity/egress-selector-configuration.yaml"
                .to_string()
        ),
        "{args:?}"
    );
    assert!(
        args.contains(&"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname".to_string()),
        "{args:?}"
    );
    let mounts: Vec<(&str, &str)> = apiserver
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        [
            ("etc-kubernetes-pki", "/etc/kubernetes/pki"),
            ("konnectivity-uds", "/run/konnectivity"),
            ("konnectivity-config", "/etc/kubernetes/konnectivity"),
        ]
    );
    let volumes: Vec<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
    assert!(
        volumes.ends_with(&["konnectivity-uds", "konnectivity-config"]),
        "{volumes:?}"
    );

    let ports: Vec<(Option<String>, i32)> = service(&t)
        .unwrap()
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.name, p.port))
        .collect();
    assert_eq!(
        ports,
        [
            (Some("kube-apiserver".into()), 6443),
            (Some("konnectivity-server".into()), 8132),
        ]
    );
}

#[test]
fn the_server_has_its_own_client_certificate_and_a_kubeconfig_with_the_egress_selector() {
    let t = with_konnectivity(json!({"server": {"port": 8132}}));
    let settings = WorkloadSettings::default();
    let names = pki_secret_names(&t);
    assert_eq!(
        &names[9..],
        ["cp-konnectivity-certificate", "cp-konnectivity-kubeconfig"]
    );
    let first = pki(&t, &BTreeMap::new(), None, &settings, NOW).unwrap();
    assert_eq!(first.secrets.len(), 11);
    let kubeconfig = first.get("cp-konnectivity-kubeconfig").unwrap();
    let conf: serde_yaml::Value = serde_yaml::from_str(&text(kubeconfig, KUBECONFIG_KEY)).unwrap();
    assert_eq!(
        conf["users"][0]["name"].as_str(),
        Some("system:konnectivity-server")
    );
    assert_eq!(
        conf["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://127.0.0.1:6443")
    );
    let egress: serde_yaml::Value = serde_yaml::from_str(&text(kubeconfig, EGRESS_KEY)).unwrap();
    assert_eq!(egress["kind"].as_str(), Some("EgressSelectorConfiguration"));
    assert_eq!(egress["egressSelections"][0]["name"].as_str(), Some("cluster"));
    assert_eq!(
        egress["egressSelections"][0]["connection"]["transport"]["uds"]["udsName"].as_str(),
        Some(UDS_NAME)
    );
    let certificate = first.get("cp-konnectivity-certificate").unwrap();
    let der = pem_der(&text(certificate, "tls.crt"));
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(
        cert.subject().to_string(),
        "CN=system:konnectivity-server",
        "no group: only the auth-delegator binding in the tenant grants it anything"
    );

    // Kept on the next pass; without the addon, not built at all.
    let existing: BTreeMap<String, Secret> = first
        .secrets
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap(), s.clone()))
        .collect();
    let again = pki(&t, &existing, None, &settings, NOW + 60).unwrap();
    assert!(again.generated.is_empty(), "{:?}", again.generated);
    let plain = tenantplane_testkit::tcp("tenants", "cp")
        .datastore("ds")
        .version("v1.34.4")
        .build();
    assert_eq!(pki_secret_names(&plain).len(), 9);
    let args = apiserver_args(&plain, &etcd()).args;
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--egress-selector-config-file")),
        "{args:?}"
    );
    assert!(args.contains(&"--kubelet-preferred-address-types=Hostname,InternalIP,ExternalIP".to_string()));
}

#[test]
fn versions_follow_the_tenant_unless_the_spec_names_one() {
    let spec: crate::k8s::crd::KonnectivitySpec =
        serde_json::from_value(json!({"server": {"image": "my.reg/konn/proxy-server"}})).unwrap();
    assert_eq!(server_image(&spec, "v1.33.2"), "my.reg/konn/proxy-server:v0.33.0");
    let spec: crate::k8s::crd::KonnectivitySpec =
        serde_json::from_value(json!({"server": {"version": "v0.34.1"}})).unwrap();
    assert_eq!(
        server_image(&spec, "v1.34.4"),
        "registry.k8s.io/kas-network-proxy/proxy-server:v0.34.1"
    );
    assert_eq!(spec.server.port, 8132);
}

fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).unwrap()
}

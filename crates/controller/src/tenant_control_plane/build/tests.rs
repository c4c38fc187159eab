use super::{args::*, network::*, pki::*, *};
use tenantplane_testkit::TcpFixture;

use crate::DEFAULT_KINE_IMAGE;

const DAY: i64 = 24 * 3600;

const NOW: i64 = 1_800_000_000;

const UID: &str = "0b7a3c1e-0000-4000-8000-000000000001";

fn tcp(yaml: &str) -> TenantControlPlane {
    let mut tcp: TenantControlPlane = serde_yaml::from_str(yaml).unwrap();
    tcp.metadata.uid = Some(UID.into());
    tcp
}

/// The TenantControlPlane most tests start from: `tenants/cp` on DataStore `ds`, v1.34.1, ClusterIP.
fn base() -> TcpFixture {
    tenantplane_testkit::tcp("tenants", "cp")
        .datastore("ds")
        .version("v1.34.1")
        .uid(UID)
}

/// [`base`] with `spec.controlPlane` set to `control_plane`.
fn base_with(control_plane: serde_json::Value) -> TenantControlPlane {
    base().spec("controlPlane", control_plane).build()
}

fn etcd(overrides: &[(&str, &[&str])]) -> StorageView {
    StorageView {
        driver: Driver::Etcd,
        schema: "tenant1".into(),
        endpoints: vec!["etcd-a:2379".into(), "etcd-b:2379".into()],
        overrides: overrides
            .iter()
            .map(|(r, eps)| (r.to_string(), eps.iter().map(|e| e.to_string()).collect()))
            .collect(),
        config_checksum: "cfg".into(),
        certificate: Some(("crt".into(), true)),
    }
}

fn kine(driver: Driver, tls: bool) -> StorageView {
    StorageView {
        driver,
        schema: "tenant1".into(),
        endpoints: vec!["db:5432".into()],
        overrides: vec![],
        config_checksum: "cfg".into(),
        certificate: tls.then(|| ("crt".into(), true)),
    }
}

/// Expected managed+default apiserver args for [`base`], with the storage-specific ones spliced in sorted.
fn expected(storage: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--allow-privileged=true",
        "--authorization-mode=Node,RBAC",
        "--client-ca-file=/etc/kubernetes/pki/ca.crt",
        &format!(
            "--enable-admission-plugins={}",
            DEFAULT_ADMISSION_PLUGINS.join(",")
        ),
        "--enable-bootstrap-token-auth=true",
        "--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt",
        "--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key",
        "--kubelet-preferred-address-types=Hostname,InternalIP,ExternalIP",
        "--proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt",
        "--proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        "--secure-port=6443",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file=/etc/kubernetes/pki/sa.pub",
        "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
        "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(storage.iter().map(|s| s.to_string()));
    v.sort_by(|a, b| flag_name(a).cmp(flag_name(b)));
    v
}

const ETCD_FLAGS: &[&str] = &[
    "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
    "--etcd-certfile=/etc/kubernetes/pki/etcd/server.crt",
    "--etcd-compaction-interval=0",
    "--etcd-keyfile=/etc/kubernetes/pki/etcd/server.key",
    "--etcd-prefix=/tenant1",
    "--etcd-servers=https://etcd-a:2379,https://etcd-b:2379",
];

#[test]
fn etcd_args_are_exact() {
    let args = apiserver_args(&base().build(), &etcd(&[]));
    assert_eq!(args.args, expected(ETCD_FLAGS));
    assert!(args.dropped.is_empty());
}

#[test]
fn etcd_with_one_override() {
    let args = apiserver_args(
        &base().build(),
        &etcd(&[("/events", &["etcd-0", "etcd-1", "etcd-2"])]),
    );
    let mut flags = ETCD_FLAGS.to_vec();
    flags.push("--etcd-servers-overrides=/events#https://etcd-0;https://etcd-1;https://etcd-2");
    assert_eq!(args.args, expected(&flags));
}

#[test]
fn etcd_with_two_overrides_keeps_spec_order() {
    let args = apiserver_args(
        &base().build(),
        &etcd(&[
            ("/pods", &["etcd-3", "etcd-4", "etcd-5"]),
            ("/events", &["etcd-0", "etcd-1", "etcd-2"]),
        ]),
    );
    let mut flags = ETCD_FLAGS.to_vec();
    flags.push(
        "--etcd-servers-overrides=/pods#https://etcd-3;https://etcd-4;https://etcd-5,/events#https://etcd-0;https://etcd-1;https://etcd-2",
    );
    assert_eq!(args.args, expected(&flags));
}

#[test]
fn kine_drivers_use_the_socket_and_a_sidecar() {
    for (driver, endpoint) in [
        (
            Driver::PostgreSQL,
            "postgres://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)/$(DB_SCHEMA)",
        ),
        (
            Driver::MySQL,
            "mysql://$(DB_USER):$(DB_PASSWORD)@tcp($(DB_CONNECTION_STRING))/$(DB_SCHEMA)",
        ),
        (
            Driver::Nats,
            "nats://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)?bucket=$(DB_SCHEMA)&noEmbed",
        ),
    ] {
        let t = base().build();
        let storage = kine(driver, true);
        assert_eq!(
            apiserver_args(&t, &storage).args,
            expected(&["--etcd-servers=unix:///uds/kine"]),
            "{driver:?}"
        );
        let mut expected_kine = vec![
            "--ca-file=/certs/ca.crt".to_string(),
            "--cert-file=/certs/server.crt".into(),
            "--key-file=/certs/server.key".into(),
            "--listen-address=unix:///uds/kine".into(),
        ];
        if driver != Driver::Nats {
            // SQL only: the connection cap sorts after the certificate.
            expected_kine.insert(2, "--datastore-max-open-connections=64".into());
        }
        assert_eq!(kine_args(&t, &storage), expected_kine, "{driver:?}");
        let pki = pki(&t, &BTreeMap::new(), None, &WorkloadSettings::default(), NOW).unwrap();
        let built = deployment(&t, &storage, &pki, "v1.34.1", &WorkloadSettings::default()).unwrap();
        let pod = built.deployment.spec.unwrap().template.spec.unwrap();
        let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kine"
            ]
        );
        let kine_c = &pod.containers[3];
        assert_eq!(kine_c.image.as_deref(), Some(DEFAULT_KINE_IMAGE));
        assert_eq!(
            kine_c.env_from.as_ref().unwrap()[0]
                .secret_ref
                .as_ref()
                .unwrap()
                .name,
            "cp-datastore-config"
        );
        // The endpoint (with the password's reference) is in the environment, never in the arguments.
        let env: Vec<_> = kine_c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            env,
            [
                ("GODEBUG", Some("x509ignoreCN=0")),
                ("KINE_ENDPOINT", Some(endpoint))
            ],
            "{driver:?}"
        );
        let init = pod.init_containers.unwrap();
        assert_eq!(init[0].name, "chmod");
        assert!(init[0].args.as_ref().unwrap()[1].contains("chmod -R 600"));
        let uds = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "kine-uds")
            .unwrap();
        assert_eq!(uds.empty_dir.unwrap().medium.as_deref(), Some("Memory"));
    }
}

#[test]
fn kine_without_tls_has_no_cert_flags_and_user_cannot_override_endpoint_nor_connection_cap() {
    let mut t2 = base().build();
    t2.spec.control_plane.deployment = Some(
        serde_json::from_value(serde_json::json!({
            "extraArgs": {"kine": ["--endpoint=evil", "--debug", "--datastore-max-open-connections=0"]}
        }))
        .unwrap(),
    );
    let args = kine_args(&t2, &kine(Driver::MySQL, false));
    assert_eq!(
        args,
        vec![
            "--datastore-max-open-connections=64".to_string(),
            "--debug=true".into(),
            "--listen-address=unix:///uds/kine".into(),
        ]
    );
}

#[test]
fn user_extra_args_lose_to_managed_flags_and_are_reported() {
    let t = base_with(serde_json::json!({
        "service": {"serviceType": "ClusterIP"},
        "deployment": {"extraArgs": {"apiServer": [
            "--secure-port=1234",
            "--etcd-servers-overrides=/events#https://x",
            "--authorization-mode=AlwaysAllow",
            "--v=4",
            "--v=5",
        ]}},
    }));
    let args = apiserver_args(&t, &etcd(&[]));
    let mut base: Vec<String> = expected(ETCD_FLAGS)
        .into_iter()
        .filter(|a| flag_name(a) != "authorization-mode")
        .collect();
    base.extend(["--authorization-mode=AlwaysAllow", "--v=4", "--v=5"].map(String::from));
    assert_eq!(args.args, base);
    assert_eq!(
        args.dropped,
        vec!["--secure-port=1234", "--etcd-servers-overrides=/events#https://x"]
    );
}

#[test]
fn deployment_images_replicas_strategy_and_owner() {
    let t = base_with(serde_json::json!({
        "service": {"serviceType": "ClusterIP"},
        "deployment": {"replicas": 3, "registrySettings": {"registry": "my.reg", "tagSuffix": "-fips"}},
    }));
    let pki = pki(&t, &BTreeMap::new(), None, &WorkloadSettings::default(), NOW).unwrap();
    let built = deployment(&t, &etcd(&[]), &pki, "v1.34.1", &WorkloadSettings::default()).unwrap();
    let d = built.deployment;
    assert_eq!(d.metadata.name.as_deref(), Some("cp"));
    assert_eq!(
        d.metadata.owner_references.as_ref().unwrap()[0].kind,
        "TenantControlPlane"
    );
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let strategy = spec.strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let pod = spec.template.spec.unwrap();
    let images: Vec<_> = pod.containers.iter().map(|c| c.image.clone().unwrap()).collect();
    assert_eq!(
        images,
        [
            "my.reg/kube-apiserver:v1.34.1-fips",
            "my.reg/kube-controller-manager:v1.34.1-fips",
            "my.reg/kube-scheduler:v1.34.1-fips"
        ]
    );
    assert!(pod.init_containers.unwrap_or_default().is_empty());
    let annotations = spec.template.metadata.unwrap().annotations.unwrap();
    assert_eq!(
        annotations[POD_CHECKSUM_ANNOTATION],
        pod_checksum(&pki, &etcd(&[]))
    );
}

#[test]
fn pki_is_reused_until_rotation_threshold_or_annotation() {
    let t = base().build();
    let settings = WorkloadSettings::default();
    let first = pki(&t, &BTreeMap::new(), None, &settings, NOW).unwrap();
    assert_eq!(first.generated.len(), 9);
    assert_eq!(first.secrets.len(), 9);
    let existing: BTreeMap<String, Secret> = first
        .secrets
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap(), s.clone()))
        .collect();
    let again = pki(&t, &existing, None, &settings, NOW + DAY).unwrap();
    assert!(again.generated.is_empty(), "{:?}", again.generated);
    assert_eq!(pod_checksum(&first, &etcd(&[])), pod_checksum(&again, &etcd(&[])));

    // A cluster IP becomes known: only the apiserver certificate changes.
    let with_ip = pki(&t, &existing, Some("10.0.0.7"), &settings, NOW + DAY).unwrap();
    assert_eq!(with_ip.generated, vec!["cp-api-server-certificate"]);

    // Leaves expire within the threshold after ~335 days: every leaf and kubeconfig, not the CAs or SA.
    let late = pki(&t, &existing, None, &settings, NOW + 340 * DAY).unwrap();
    assert_eq!(late.generated.len(), 6, "{:?}", late.generated);

    // The rotate annotation on the CA regenerates the CA and everything it signs.
    let mut rotated = existing.clone();
    rotated
        .get_mut("cp-ca")
        .unwrap()
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ROTATE_ANNOTATION.into(), String::new());
    let r = pki(&t, &rotated, None, &settings, NOW).unwrap();
    assert_eq!(
        r.generated,
        vec![
            "cp-ca",
            "cp-api-server-certificate",
            "cp-api-server-kubelet-client-certificate",
            "cp-admin-kubeconfig",
            "cp-controller-manager-kubeconfig",
            "cp-scheduler-kubeconfig"
        ]
    );

    // The rotation is answered with its time on the rotated CA, and happens once: built again from
    // its own output, nothing is regenerated.
    let ca = r.get("cp-ca").unwrap();
    assert_eq!(
        ca.annotations().get(ROTATE_ANNOTATION).map(String::as_str),
        Some("2027-01-15T08:00:00Z")
    );
    assert!(!rotation_requested(ca));
    let answered: BTreeMap<String, Secret> = r.secrets.iter().map(|s| (s.name_any(), s.clone())).collect();
    let after = pki(&t, &answered, None, &settings, NOW + DAY).unwrap();
    assert!(after.generated.is_empty(), "{:?}", after.generated);
    assert_eq!(
        after.get("cp-ca").unwrap().annotations().get(ROTATE_ANNOTATION),
        ca.annotations().get(ROTATE_ANNOTATION)
    );

    // A tampered Secret is regenerated.
    let mut tampered = existing;
    tampered
        .get_mut("cp-sa-certificate")
        .unwrap()
        .data
        .as_mut()
        .unwrap()
        .insert("sa.key".into(), ByteString(b"junk".to_vec()));
    let t2 = pki(&t, &tampered, None, &settings, NOW).unwrap();
    assert_eq!(t2.generated, vec!["cp-sa-certificate"]);
}

#[test]
fn apiserver_certificate_sans() {
    let t = base()
        .spec(
            "networkProfile",
            serde_json::json!({"address": "cp.example.com", "advertiseAddress": "192.0.2.10",
                "certSANs": ["extra.example.com", "198.51.100.1"], "serviceCidrs": ["10.20.0.0/16"]}),
        )
        .build();
    let (dns, ips) = apiserver_sans(&t, Some("10.20.5.5"));
    for name in [
        "cp",
        "cp.tenants",
        "cp.tenants.svc",
        "cp.tenants.svc.cluster.local",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "cp.example.com",
        "extra.example.com",
    ] {
        assert!(dns.contains(&name.to_string()), "{name}");
    }
    let ips: Vec<String> = ips.iter().map(|i| i.to_string()).collect();
    for ip in [
        "192.0.2.10",
        "198.51.100.1",
        "10.20.0.1",
        "10.20.5.5",
        "127.0.0.1",
    ] {
        assert!(ips.contains(&ip.to_string()), "{ip}");
    }
    let pki = pki(
        &t,
        &BTreeMap::new(),
        Some("10.20.5.5"),
        &WorkloadSettings::default(),
        NOW,
    )
    .unwrap();
    let cert = pki.get("cp-api-server-certificate").unwrap();
    let pem = text(cert, "apiserver.crt").unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let x509 = pem.parse_x509().unwrap();
    let san = x509.subject_alternative_name().unwrap().unwrap();
    assert_eq!(san.value.general_names.len(), dns.len() + ips.len());
    let admin = pki.get("cp-admin-kubeconfig").unwrap();
    let conf = text(admin, "admin.conf").unwrap();
    assert!(conf.contains("server: https://cp.example.com:6443"), "{conf}");
}

#[test]
fn service_types() {
    let svc = service(&base_with(
        serde_json::json!({"service": {"serviceType": "NodePort"}}),
    ))
    .unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.ports.as_ref().unwrap()[0].node_port, Some(6443));
    assert_eq!(spec.selector.unwrap()[TCP_NAME_LABEL], "cp");
}

#[test]
fn versions_refuse_downgrade_and_skip() {
    assert_eq!(version_to_run("v1.34.1", None), ("v1.34.1".into(), None));
    assert_eq!(version_to_run("v1.35.0", Some("v1.34.1")).1, None);
    assert_eq!(version_to_run("v1.34.2", Some("v1.34.1")).1, None);
    let (run, why) = version_to_run("v1.33.0", Some("v1.34.1"));
    assert_eq!(run, "v1.34.1");
    assert_eq!(why.unwrap().0, "VersionDowngradeRefused");
    let (run, why) = version_to_run("v1.36.0", Some("v1.34.1"));
    assert_eq!(run, "v1.34.1");
    assert_eq!(why.unwrap().0, "VersionSkipRefused");
}

#[test]
fn version_state_order() {
    let mut d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"generation": 2},
        "spec": {"replicas": 2, "selector": {}, "template": {}},
        "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2},
    }))
    .unwrap();
    assert_eq!(
        version_state(&d, "v1", None),
        (KubernetesVersionState::Ready, true)
    );
    d.status.as_mut().unwrap().ready_replicas = Some(1);
    assert_eq!(
        version_state(&d, "v1", None).0,
        KubernetesVersionState::Provisioning
    );
    assert_eq!(
        version_state(&d, "v2", Some("v1")).0,
        KubernetesVersionState::Upgrading
    );
    assert_eq!(
        version_state(&d, "v1", Some("v1")).0,
        KubernetesVersionState::NotReady
    );
    d.spec.as_mut().unwrap().replicas = Some(0);
    assert_eq!(
        version_state(&d, "v1", Some("v1")).0,
        KubernetesVersionState::Sleeping
    );
}

#[test]
fn rsa_2048_is_selectable_for_every_generated_key() {
    use x509_parser::{pem::parse_x509_pem, public_key::PublicKey};
    let settings = WorkloadSettings {
        key_algorithm: KeyAlgorithm::Rsa2048,
        ..Default::default()
    };
    let t = base().build();
    let pki = pki(&t, &BTreeMap::new(), Some("10.96.0.10"), &settings, NOW).unwrap();
    let data = |secret: &str, key: &str| -> String {
        let s = pki
            .secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(secret))
            .unwrap_or_else(|| panic!("{secret}"));
        String::from_utf8(s.data.as_ref().unwrap()[key].0.clone()).unwrap()
    };
    for (secret, key) in [
        ("cp-ca", "ca.crt"),
        ("cp-api-server-certificate", "apiserver.crt"),
        (
            "cp-api-server-kubelet-client-certificate",
            "apiserver-kubelet-client.crt",
        ),
        ("cp-front-proxy-ca-certificate", "front-proxy-ca.crt"),
        ("cp-front-proxy-client-certificate", "front-proxy-client.crt"),
    ] {
        let pem = data(secret, key);
        let (_, pem) = parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let spki = cert.public_key();
        match spki.parsed().unwrap() {
            PublicKey::RSA(rsa) => assert_eq!((secret, rsa.key_size()), (secret, 2048)),
            other => panic!("{secret}: {other:?}"),
        }
        // sha256WithRSAEncryption
        assert_eq!(
            cert.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.113549.1.1.11",
            "{secret}"
        );
    }
    use rsa::pkcs8::DecodePrivateKey as _;
    let sa = rsa::PrivateKey::from_pkcs8_pem(&data("cp-sa-certificate", "sa.key")).unwrap();
    assert_eq!(rsa::traits::PublicKeyParts::size(&sa), 256);

    // The default stays ECDSA P-256.
    let ec = super::pki(&t, &BTreeMap::new(), None, &WorkloadSettings::default(), NOW).unwrap();
    let pem = ec
        .secrets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("cp-ca"))
        .unwrap();
    let pem = String::from_utf8(pem.data.as_ref().unwrap()["ca.crt"].0.clone()).unwrap();
    let (_, pem) = parse_x509_pem(pem.as_bytes()).unwrap();
    assert!(matches!(
        pem.parse_x509().unwrap().public_key().parsed().unwrap(),
        PublicKey::EC(_)
    ));
}

// ------------------------------------------------------------------------------ pinned serialization

/// A TenantControlPlane setting every field the Deployment and the Service read.
const FULL: &str = r#"
apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: full, namespace: tenants}
spec:
  dataStore: ds
  controlPlane:
    deployment:
      replicas: 3
      registrySettings: {registry: reg.example, tagSuffix: -x, apiServerImage: my-apiserver}
      resources:
        apiServer: {requests: {cpu: 100m}, limits: {memory: 1Gi}}
        controllerManager: {requests: {cpu: 10m}}
        scheduler: {limits: {cpu: 20m}}
        kine: {requests: {memory: 64Mi}}
      extraArgs:
        apiServer: [--v=2, --secure-port=1]
        controllerManager: [--v=3]
        scheduler: [--v=4]
        kine: [--debug, --endpoint=x]
      nodeSelector: {zone: a}
      tolerations: [{key: k, operator: Exists, effect: NoSchedule}]
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
      strategy: {type: Recreate}
      additionalMetadata: {labels: {team: x}, annotations: {note: y}}
      podAdditionalMetadata: {labels: {pod: l}, annotations: {pod: a}}
      serviceAccountName: sa
    service:
      serviceType: LoadBalancer
      additionalMetadata: {labels: {svc: l}, annotations: {svc: a}}
  kubernetes:
    version: v1.34.1
    kubelet: {preferredAddressTypes: [InternalIP]}
    admissionControllers: [NamespaceLifecycle]
  networkProfile:
    port: 7443
    address: 10.0.0.5
    certSANs: [x.example]
    serviceCidrs: [10.100.0.0/16]
    podCidrs: [10.200.0.0/16]
    clusterDomain: example.local
    loadBalancerClass: lb
    loadBalancerSourceRanges: [1.2.3.0/24]
"#;

/// Every pinned object, by name: Deployments for etcd (with an override), kine with and without TLS,
/// and a TenantControlPlane with every option; Services of each type.
fn pinned_objects() -> BTreeMap<String, serde_json::Value> {
    // No PKI Secrets: the pod checksum is then a function of the storage checksums alone.
    let pki = Pki {
        secrets: Vec::new(),
        generated: Vec::new(),
    };
    let settings = WorkloadSettings::default();
    let deployments = [
        (
            "deployment-etcd",
            base().build(),
            etcd(&[("/events", &["etcd-0"])]),
        ),
        (
            "deployment-postgres-tls",
            base().build(),
            kine(Driver::PostgreSQL, true),
        ),
        ("deployment-nats", base().build(), kine(Driver::Nats, false)),
        ("deployment-full-etcd", tcp(FULL), etcd(&[])),
        ("deployment-full-mysql-tls", tcp(FULL), kine(Driver::MySQL, true)),
    ];
    let mut out = BTreeMap::new();
    for (name, t, storage) in deployments {
        let built = deployment(&t, &storage, &pki, "v1.34.1", &settings).unwrap();
        out.insert(name.to_string(), serde_json::to_value(&built.deployment).unwrap());
    }
    let services = [
        ("service-clusterip", base().build()),
        (
            "service-nodeport",
            base_with(serde_json::json!({"service": {"serviceType": "NodePort"}})),
        ),
        (
            "service-loadbalancer-bare",
            base_with(serde_json::json!({"service": {"serviceType": "LoadBalancer"}})),
        ),
        ("service-full", tcp(FULL)),
    ];
    for (name, t) in services {
        out.insert(
            name.to_string(),
            serde_json::to_value(service(&t).unwrap()).unwrap(),
        );
    }
    out
}

/// The Deployments and Services serialize exactly as pinned in `testdata/pinned_workload.json`.
#[test]
fn deployments_and_services_serialize_as_pinned() {
    let pinned: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(include_str!("testdata/pinned_workload.json")).unwrap();
    let actual = pinned_objects();
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        pinned.keys().collect::<Vec<_>>()
    );
    for (name, value) in &actual {
        assert_eq!(
            value,
            &pinned[name],
            "{name} differs from the pinned JSON:\n{}",
            serde_json::to_string_pretty(value).unwrap()
        );
    }
}

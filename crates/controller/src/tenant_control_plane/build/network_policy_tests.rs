use super::*;
use crate::WorkloadSettings;

const UID: &str = "0b7a3c1e-0000-4000-8000-000000000001";

/// `tenants/cp` on `ds`, with `addons` as given.
fn tcp(addons: serde_json::Value) -> tenantplane_testkit::TcpFixture {
    tenantplane_testkit::tcp("tenants", "cp")
        .datastore("ds")
        .uid(UID)
        .spec("addons", addons)
}

fn inputs(datastores: &[(&str, &[&str])]) -> EgressInputs {
    EgressInputs {
        datastores: datastores
            .iter()
            .map(|(n, e)| (n.to_string(), e.iter().map(ToString::to_string).collect()))
            .collect(),
        services: BTreeMap::new(),
    }
}

fn service(spec: serde_json::Value) -> Option<Service> {
    Some(serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": spec})).unwrap())
}

/// The policy as JSON, for exact comparisons.
fn policy(built: &BuiltEgress) -> serde_json::Value {
    serde_json::to_value(&built.policy).unwrap()
}

fn dns() -> serde_json::Value {
    json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    })
}

fn ip(cidr: &str, port: u16) -> serde_json::Value {
    json!({"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"protocol": "TCP", "port": port}]})
}

fn any(port: u16) -> serde_json::Value {
    json!({"ports": [{"protocol": "TCP", "port": port}]})
}

fn kubelets() -> serde_json::Value {
    any(10250)
}

#[test]
fn an_etcd_primary_with_an_override_allows_dns_each_endpoint_and_kubelets_without_konnectivity() {
    let t = tcp(json!({})).events_on(&["events"]).build();
    let built = egress_policy(
        &t,
        &inputs(&[
            ("ds", &["10.0.0.1:2379", "10.0.0.2:2379", "[fd00::5]:2379"]),
            ("events", &["10.0.1.1:2381"]),
        ]),
        &WorkloadSettings::default(),
    )
    .unwrap();
    assert_eq!(
        policy(&built),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": "cp-egress",
                "namespace": "tenants",
                "labels": {"kamaji.clastix.io/name": "cp", "app.kubernetes.io/managed-by": "tenantplane"},
                "ownerReferences": [{
                    "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane", "name": "cp",
                    "uid": UID, "controller": true,
                }],
            },
            "spec": {
                "podSelector": {"matchLabels": {"kamaji.clastix.io/name": "cp"}},
                "policyTypes": ["Egress"],
                "egress": [
                    dns(),
                    ip("10.0.0.1/32", 2379),
                    ip("10.0.0.2/32", 2379),
                    ip("fd00::5/128", 2379),
                    ip("10.0.1.1/32", 2381),
                    kubelets(),
                ],
            },
        })
    );
    assert_eq!(
        built.message,
        "egress limited to DNS (kube-system/k8s-app=kube-dns), DataStores ds, events (4 endpoints), \
         kubelets on TCP 10250 at any address (no Konnectivity)"
    );
}

#[test]
fn with_konnectivity_nodes_get_no_rule_and_the_same_endpoint_twice_is_one_rule() {
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let built = egress_policy(
        &t,
        &inputs(&[("ds", &["10.0.0.1:2379", "10.0.0.1:2379"])]),
        &WorkloadSettings::default(),
    )
    .unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([dns(), ip("10.0.0.1/32", 2379)])
    );
    assert_eq!(
        built.message,
        "egress limited to DNS (kube-system/k8s-app=kube-dns), DataStores ds (2 endpoints)"
    );
}

#[test]
fn a_kine_postgresql_datastore_by_ip_is_its_ip_and_port() {
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let built = egress_policy(
        &t,
        &inputs(&[("pg", &["192.0.2.10:5432"])]),
        &WorkloadSettings::default(),
    )
    .unwrap();
    assert_eq!(
        policy(&built)["spec"],
        json!({
            "podSelector": {"matchLabels": {"kamaji.clastix.io/name": "cp"}},
            "policyTypes": ["Egress"],
            "egress": [dns(), ip("192.0.2.10/32", 5432)],
        })
    );
}

#[test]
fn a_kine_mysql_datastore_behind_an_in_cluster_service_is_its_pods_on_the_target_port() {
    let t = tcp(json!({})).build();
    let mut given = inputs(&[("mysql", &["mysql.db.svc.cluster.local:3306"])]);
    given.services.insert(
        ("db".into(), "mysql".into()),
        service(json!({
            "clusterIP": "10.96.4.4",
            "selector": {"app": "mysql"},
            "ports": [{"port": 3306, "targetPort": "mysql"}],
        })),
    );
    let built = egress_policy(&t, &given, &WorkloadSettings::default()).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([
            dns(),
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "db"}},
                    "podSelector": {"matchLabels": {"app": "mysql"}},
                }],
                "ports": [{"protocol": "TCP", "port": "mysql"}],
            },
            kubelets(),
        ])
    );
    assert!(
        !built.message.contains("open at any address"),
        "{}",
        built.message
    );
}

#[test]
fn a_host_name_outside_the_cluster_is_its_port_at_any_address_and_the_message_says_so() {
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let mut given = inputs(&[
        ("pg", &["pg.example.com:5432"]),
        // A Service without a selector (hand-made endpoints) cannot be named by its pods either.
        ("etcd", &["etcd.infra.svc:2379", "etcd-0.etcd.infra.svc:2379"]),
    ]);
    given.services.insert(
        ("infra".into(), "etcd".into()),
        service(json!({"clusterIP": "None"})),
    );
    let built = egress_policy(&t, &given, &WorkloadSettings::default()).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([dns(), any(5432), any(2379)])
    );
    assert_eq!(
        built.message,
        "egress limited to DNS (kube-system/k8s-app=kube-dns), DataStores pg, etcd (3 endpoints); \
         open at any address (a NetworkPolicy cannot name hosts): pg.example.com:5432, \
         etcd.infra.svc:2379, etcd-0.etcd.infra.svc:2379"
    );
}

#[test]
fn an_ipv4_mapped_endpoint_is_its_ipv4_address() {
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let built = egress_policy(
        &t,
        &inputs(&[("ds", &["[::ffff:10.0.0.9]:2379"])]),
        &WorkloadSettings::default(),
    )
    .unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([dns(), ip("10.0.0.9/32", 2379)])
    );
}

#[test]
fn a_headless_service_is_its_pods_on_the_endpoints_own_port() {
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let mut given = inputs(&[("etcd", &["etcd-0.etcd.infra.svc.cluster.local:2379"])]);
    given.services.insert(
        ("infra".into(), "etcd".into()),
        service(json!({"clusterIP": "None", "selector": {"app": "etcd"}})),
    );
    let built = egress_policy(&t, &given, &WorkloadSettings::default()).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"][1],
        json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "infra"}},
                "podSelector": {"matchLabels": {"app": "etcd"}},
            }],
            "ports": [{"protocol": "TCP", "port": 2379}],
        })
    );
}

#[test]
fn the_credential_issuer_is_allowed_and_only_the_tenants_own_providers_open_public_https() {
    let issuer = "https://127.0.0.1:8443/credentials";
    let provider = |url: &str| {
        json!({
            "issuer": {"url": url, "audiences": ["a"]},
            "claimMappings": {"username": {"claim": "sub", "prefix": "x:"}},
        })
    };
    let settings = WorkloadSettings {
        credential_issuer_url: Some(issuer.into()),
        ..Default::default()
    };
    let ours = tcp(json!({"konnectivity": {"server": {"port": 8132}}}))
        .spec("authentication", json!({"jwt": [provider(issuer)]}))
        .build();
    let built = egress_policy(&ours, &inputs(&[("ds", &["10.0.0.1:2379"])]), &settings).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([dns(), ip("10.0.0.1/32", 2379), ip("127.0.0.1/32", 8443)])
    );

    let theirs = tcp(json!({"konnectivity": {"server": {"port": 8132}}}))
        .spec(
            "authentication",
            json!({"jwt": [provider(issuer), provider("https://login.example.com")]}),
        )
        .build();
    let built = egress_policy(&theirs, &inputs(&[("ds", &["10.0.0.1:2379"])]), &settings).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([
            dns(),
            ip("10.0.0.1/32", 2379),
            ip("127.0.0.1/32", 8443),
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                        "172.16.0.0/12", "192.168.0.0/16",
                    ]}},
                    {"ipBlock": {"cidr": "::/0", "except": [
                        "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "fc00::/7", "fe80::/10",
                    ]}},
                ],
                "ports": [{"protocol": "TCP", "port": 443}],
            },
        ])
    );
    assert_eq!(
        built.message,
        "egress limited to DNS (kube-system/k8s-app=kube-dns), DataStores ds (1 endpoint), \
         the credential issuer (127.0.0.1:8443), TCP 443 at public addresses (the tenant's own identity providers)"
    );
}

#[test]
fn the_issuer_endpoint_setting_names_the_serve_service_whose_pods_are_allowed() {
    let settings = WorkloadSettings {
        credential_issuer_url: Some("https://tenantplane.example.com/credentials".into()),
        credential_issuer_endpoint: Some("tp-serve.tenantplane-system.svc:8443".into()),
        ..Default::default()
    };
    let t = tcp(json!({"konnectivity": {"server": {"port": 8132}}})).build();
    let mut given = inputs(&[]);
    assert_eq!(
        egress_services(&given.datastores, &settings),
        BTreeSet::from([("tenantplane-system".to_string(), "tp-serve".to_string())])
    );
    given.services.insert(
        ("tenantplane-system".into(), "tp-serve".into()),
        service(json!({
            "selector": {"app.kubernetes.io/component": "serve"},
            "ports": [{"port": 80, "targetPort": "http"}, {"port": 8443, "targetPort": "https"}],
        })),
    );
    let built = egress_policy(&t, &given, &settings).unwrap();
    assert_eq!(
        policy(&built)["spec"]["egress"],
        json!([
            dns(),
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tenantplane-system"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/component": "serve"}},
                }],
                "ports": [{"protocol": "TCP", "port": "https"}],
            },
        ])
    );
}

#[test]
fn endpoints_and_urls_parse_into_hosts_and_ports() {
    let ip = |s: &str| EndpointHost::Ip(s.parse().unwrap());
    let svc = |ns: &str, name: &str| EndpointHost::Service(ns.into(), name.into());
    assert_eq!(parse_endpoint("10.1.2.3:2379"), Some((ip("10.1.2.3"), 2379)));
    assert_eq!(parse_endpoint("[::1]:2379"), Some((ip("::1"), 2379)));
    assert_eq!(
        parse_endpoint("etcd.kamaji-system.svc:2379"),
        Some((svc("kamaji-system", "etcd"), 2379))
    );
    assert_eq!(
        parse_endpoint("etcd-1.etcd.kamaji-system.svc.cluster.local.:2379"),
        Some((svc("kamaji-system", "etcd"), 2379))
    );
    assert_eq!(
        parse_endpoint("DB.Example.com:5432"),
        Some((EndpointHost::External("db.example.com".into()), 5432))
    );
    // `svc` too deep is no Service name.
    assert_eq!(
        parse_endpoint("a.b.c.d.svc:1"),
        Some((EndpointHost::External("a.b.c.d.svc".into()), 1))
    );
    assert_eq!(parse_endpoint("no-port"), None);
    assert_eq!(parse_endpoint("host:99999"), None);
    assert_eq!(parse_endpoint("::1:2379"), None);

    assert_eq!(
        url_endpoint("https://127.0.0.1:8443/credentials").as_deref(),
        Some("127.0.0.1:8443")
    );
    assert_eq!(
        url_endpoint("https://tp.example.com/credentials").as_deref(),
        Some("tp.example.com:443")
    );
    assert_eq!(
        url_endpoint("https://[fd00::1]/c").as_deref(),
        Some("[fd00::1]:443")
    );
    assert_eq!(
        url_endpoint("https://[fd00::1]:9443").as_deref(),
        Some("[fd00::1]:9443")
    );
    assert_eq!(url_endpoint("http://tp.example.com/c"), None);
}

#[test]
fn a_failed_egress_step_is_egress_restricted_false_and_ready_false_naming_it() {
    use k8s_openapi::jiff::Timestamp;
    let t = tcp(json!({})).build();
    let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let conditions = crate::build::Conditions::new(&[], Some(1), now);
    let err = Error::Invalid {
        reason: "EgressEndpointInvalid",
        message: "DataStore ds: endpoint \"x\" is not host:port".into(),
    }
    .in_phase(crate::Phase::Egress);
    let owned = workload_status(
        &t,
        &[],
        conditions,
        Owned::default(),
        Err(&err),
        StorageRecord::default(),
    );
    let find = |type_: &str| {
        owned
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
            .clone()
    };
    let egress = find("EgressRestricted");
    assert_eq!(
        (
            egress.status.as_str(),
            egress.reason.as_str(),
            egress.message.as_str()
        ),
        (
            "False",
            "EgressEndpointInvalid",
            "DataStore ds: endpoint \"x\" is not host:port"
        )
    );
    let ready = find("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.message.as_str()),
        (
            "False",
            "the egress phase failed: DataStore ds: endpoint \"x\" is not host:port"
        )
    );
    // An endpoint the CRD would refuse fails the build with that error.
    let bad = egress_policy(&t, &inputs(&[("ds", &["x"])]), &WorkloadSettings::default()).unwrap_err();
    assert_eq!(bad.reason(), "EgressEndpointInvalid");
    assert_eq!(bad.to_string(), "DataStore ds: endpoint \"x\" is not host:port");
}

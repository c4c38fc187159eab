//! Fixture tests: each shape's expected object is a YAML file in `fixtures/`.
//! `TENANTPLANE_BLESS=1 cargo test --lib translate` rewrites them from the code (review the diff).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::*;

fn row() -> ControlPlaneRow {
    let at = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    ControlPlaneRow {
        id: Uuid::parse_str("0193a3c0-0000-7000-8000-0000000000c1").unwrap(),
        tenant_id: Uuid::parse_str("0193a3c0-0000-7000-8000-0000000000a1").unwrap(),
        name: "prod".into(),
        kubernetes_version: "v1.33.2".into(),
        replicas: 2,
        service_type: "ClusterIP".into(),
        port: 6443,
        size_class: "small".into(),
        datastore_pool: None,
        datastore_labels: serde_json::json!({}),
        datastore_name: Some("etcd-default".into()),
        offload: "none".into(),
        addons: serde_json::json!({"coreDNS": true, "kubeProxy": true, "konnectivity": false}),
        labels: serde_json::json!({"team": "payments"}),
        phase: "Pending".into(),
        status: serde_json::json!({}),
        generation: 1,
        deleted_at: None,
        created_at: at,
        updated_at: at,
    }
}

fn check(fixture: &str, tcp: &TenantControlPlane) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/translate/fixtures")
        .join(fixture);
    let actual = serde_yaml::to_string(tcp).unwrap();
    if std::env::var_os("TENANTPLANE_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected: serde_yaml::Value = serde_yaml::from_str(&expected).unwrap();
    let actual: serde_yaml::Value = serde_yaml::from_str(&actual).unwrap();
    assert_eq!(
        actual,
        expected,
        "{fixture} differs; got:\n{}",
        serde_yaml::to_string(tcp).unwrap()
    );
    // What the API server stores after defaulting equals what we applied: serde applies the same
    // defaults as the CRD schema, so a round trip must not change the spec.
    let round: TenantControlPlaneSpec =
        serde_json::from_value(serde_json::to_value(&tcp.spec).unwrap()).unwrap();
    assert_eq!(
        serde_json::to_value(&round).unwrap(),
        serde_json::to_value(&tcp.spec).unwrap(),
        "{fixture}: a field the CRD defaults is not set explicitly"
    );
}

#[test]
fn without_a_placement_row_the_explicit_datastore_is_the_primary() {
    let row = row();
    let tcp = translate(
        &row,
        &Placement::fallback(&row),
        "acme",
        DEFAULT_NAMESPACE_TEMPLATE,
    );
    check("no_placement.yaml", &tcp);
}

#[test]
fn without_any_datastore_the_field_is_left_to_the_controller() {
    let row = ControlPlaneRow {
        datastore_name: None,
        ..row()
    };
    let tcp = translate(
        &row,
        &Placement::fallback(&row),
        "acme",
        DEFAULT_NAMESPACE_TEMPLATE,
    );
    assert_eq!(tcp.spec.data_store, None);
    assert!(!serde_json::to_string(&tcp.spec).unwrap().contains("dataStore\""));
}

#[test]
fn overrides_are_rendered_events_first_then_leases() {
    let row = ControlPlaneRow {
        offload: "auto".into(),
        ..row()
    };
    let placement = Placement {
        data_store: Some("etcd-a".into()),
        overrides: vec![
            ("coordination.k8s.io/leases".into(), "etcd-leases".into()),
            ("/events".into(), "etcd-events".into()),
        ],
    };
    let tcp = translate(&row, &placement, "acme", DEFAULT_NAMESPACE_TEMPLATE);
    check("with_overrides.yaml", &tcp);
    let resources: Vec<_> = tcp
        .spec
        .data_store_overrides
        .unwrap()
        .into_iter()
        .map(|o| o.resource)
        .collect();
    assert_eq!(resources, ["/events", "coordination.k8s.io/leases"]);
}

#[test]
fn zero_replicas_is_rendered_not_defaulted() {
    let row = ControlPlaneRow {
        replicas: 0,
        generation: 3,
        ..row()
    };
    let tcp = translate(
        &row,
        &Placement::fallback(&row),
        "acme",
        DEFAULT_NAMESPACE_TEMPLATE,
    );
    check("replicas_zero.yaml", &tcp);
}

#[test]
fn large_load_balancer_with_konnectivity_and_without_coredns() {
    let row = ControlPlaneRow {
        size_class: "large".into(),
        service_type: "LoadBalancer".into(),
        port: 443,
        addons: serde_json::json!({"coreDNS": false, "kubeProxy": true, "konnectivity": true}),
        ..row()
    };
    let tcp = translate(&row, &Placement::fallback(&row), "acme", "kamaji-{tenant}-cps");
    check("large.yaml", &tcp);
    assert_eq!(tcp.metadata.namespace.as_deref(), Some("kamaji-acme-cps"));
}

#[test]
fn size_classes_grow() {
    let cpu = |c: &str| api_server_resources(c).requests.unwrap()["cpu"].0.clone();
    assert_eq!([cpu("small"), cpu("medium"), cpu("large")], ["250m", "500m", "1"]);
    assert_eq!(cpu("unknown"), "250m");
}

#[test]
fn loopback_mode_gives_each_control_plane_a_stable_address_outside_127_0() {
    let r = row();
    let loopback = Rendering {
        address: TenantAddress::Loopback,
        issuer: None,
    };
    let tcp = translate_with(
        &r,
        &Placement::fallback(&r),
        "acme",
        DEFAULT_NAMESPACE_TEMPLATE,
        &loopback,
    );
    let address = tcp
        .spec
        .network_profile
        .as_ref()
        .and_then(|n| n.address.clone())
        .unwrap();
    assert_eq!(address, loopback_address(r.id).to_string());
    let ip = loopback_address(r.id);
    assert!(ip.is_loopback() && ip.octets()[1] >= 128 && ip.octets()[3] >= 1 && ip.octets()[3] <= 254);
    assert_eq!(loopback_address(r.id), ip);
    let plain = translate(&r, &Placement::fallback(&r), "acme", DEFAULT_NAMESPACE_TEMPLATE);
    assert_eq!(plain.spec.network_profile.and_then(|n| n.address), None);
}

#[test]
fn with_an_issuer_the_tcp_trusts_it_first_for_its_own_audience_and_tenant() {
    let r = row();
    let rendering = Rendering {
        address: TenantAddress::None,
        issuer: Some(ClusterIssuer {
            url: "https://tp.example/credentials".into(),
            certificate_authority: None,
        }),
    };
    let tcp = translate_with(
        &r,
        &Placement::fallback(&r),
        "acme",
        DEFAULT_NAMESPACE_TEMPLATE,
        &rendering,
    );
    let auth = tcp.spec.authentication.expect("spec.authentication");
    assert_eq!(auth.jwt.len(), 1);
    assert_eq!(auth.jwt[0].issuer.url, "https://tp.example/credentials");
    assert_eq!(auth.jwt[0].issuer.audiences, vec![audience(r.id)]);
    assert_eq!(
        auth.jwt[0].claim_validation_rules[0].required_value.as_deref(),
        Some(r.tenant_id.to_string().as_str())
    );
    let plain = translate(&r, &Placement::fallback(&r), "acme", DEFAULT_NAMESPACE_TEMPLATE);
    assert_eq!(plain.spec.authentication, None);
}

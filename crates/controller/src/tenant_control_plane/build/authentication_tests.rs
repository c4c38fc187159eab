use k8s_openapi::api::core::v1::PodSpec;

use super::conditions::{AUTHENTICATION_CONFIGURED, EXTRA_ARGS_APPLIED, READY};
use super::*;
use crate::{Phase, WorkloadSettings, build::Conditions};

const NOW: i64 = 1_800_000_000;
const FLAG: &str = "--authentication-config=/etc/kubernetes/authentication/authentication-config.yaml";
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// Tenantplane's own issuer, as the sync worker writes it.
fn own_issuer(url: &str) -> serde_json::Value {
    json!({
        "issuer": {"url": url, "audiences": ["tenantplane:cp:42"], "certificateAuthority": CA},
        "claimValidationRules": [{"claim": "tid", "requiredValue": "7d1e"}],
        "claimMappings": {
            "username": {"claim": "sub", "prefix": "tenantplane:"},
            "groups": {"expression": "claims.role == 'admin' ? ['tenantplane:admins'] : ['tenantplane:viewers']"},
            "uid": {"claim": "jti"},
        },
    })
}

/// `tenants/cp` on etcd at v1.34.4, with `spec.authentication` when given and `extraArgs.apiServer`.
fn with_authentication(authentication: Option<serde_json::Value>, api_server: &[&str]) -> TenantControlPlane {
    let mut fixture = tenantplane_testkit::tcp("tenants", "cp")
        .datastore("ds")
        .version("v1.34.4")
        .uid("0b7a3c1e-0000-4000-8000-000000000001")
        .spec(
            "controlPlane",
            json!({"service": {"serviceType": "ClusterIP"}, "deployment": {"extraArgs": {"apiServer": api_server}}}),
        );
    if let Some(a) = authentication {
        fixture = fixture.spec("authentication", a);
    }
    fixture.build()
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

fn built(tcp: &TenantControlPlane, pki: &Pki) -> BuiltDeployment {
    deployment(tcp, &etcd(), pki, "v1.34.4", &WorkloadSettings::default()).unwrap()
}

fn pod(built: &BuiltDeployment) -> PodSpec {
    built.deployment.spec.clone().unwrap().template.spec.unwrap()
}

fn yaml(tcp: &TenantControlPlane) -> String {
    let built = authentication_config(tcp).unwrap().unwrap();
    built.config_map.data.unwrap()[AUTHENTICATION_KEY].clone()
}

#[test]
fn the_configuration_is_the_apiservers_file_with_the_authenticators_as_written() {
    let t = with_authentication(Some(json!({"jwt": [own_issuer("https://127.0.0.1:8443")]})), &[]);
    let built = authentication_config(&t).unwrap().unwrap();
    let cm = &built.config_map;
    assert_eq!(cm.metadata.name.as_deref(), Some("cp-authentication-config"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("tenants"));
    assert_eq!(
        cm.metadata.labels.clone().unwrap(),
        BTreeMap::from([
            (
                "app.kubernetes.io/managed-by".to_string(),
                "tenantplane".to_string()
            ),
            ("kamaji.clastix.io/name".to_string(), "cp".to_string()),
        ])
    );
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TenantControlPlane", Some(true))
    );
    assert_eq!(
        yaml(&t),
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://127.0.0.1:8443
    audiences:
    - tenantplane:cp:42
    certificateAuthority: |
      -----BEGIN CERTIFICATE-----
      MIIB
      -----END CERTIFICATE-----
  claimValidationRules:
  - claim: tid
    requiredValue: 7d1e
  claimMappings:
    username:
      claim: sub
      prefix: 'tenantplane:'
    groups:
      expression: 'claims.role == ''admin'' ? [''tenantplane:admins''] : [''tenantplane:viewers'']'
    uid:
      claim: jti
"#
    );
    assert_eq!((built.authenticators, built.conflicts.len()), (1, 0));

    // An empty list still gives a file (and the flag): the worker may not have written its issuer yet.
    let empty = with_authentication(Some(json!({})), &[]);
    assert_eq!(
        yaml(&empty),
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: []\n"
    );
    assert!(apiserver_args(&empty, &etcd()).args.contains(&FLAG.to_string()));
    // Without `spec.authentication`: nothing.
    assert_eq!(
        authentication_config(&with_authentication(None, &[])).unwrap(),
        None
    );
}

#[test]
fn the_flag_the_volume_and_the_mount_come_with_authentication_only() {
    let on = with_authentication(Some(json!({"jwt": [own_issuer("https://127.0.0.1:8443")]})), &[]);
    let off = with_authentication(None, &[]);
    let pki = pki(&on, &BTreeMap::new(), None, &WorkloadSettings::default(), NOW).unwrap();

    let pod_on = pod(&built(&on, &pki));
    let apiserver = &pod_on.containers[0];
    assert!(apiserver.args.as_ref().unwrap().contains(&FLAG.to_string()));
    let mount = apiserver
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "authentication-config")
        .unwrap();
    assert_eq!(
        (
            mount.mount_path.as_str(),
            mount.sub_path.as_deref(),
            mount.read_only
        ),
        ("/etc/kubernetes/authentication", None, Some(true))
    );
    let volume = pod_on
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "authentication-config")
        .unwrap();
    assert_eq!(
        volume.config_map.as_ref().unwrap().name,
        "cp-authentication-config"
    );
    // Only kube-apiserver mounts it.
    assert!(pod_on.containers[1..].iter().all(|c| {
        c.volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != "authentication-config")
    }));

    let pod_off = pod(&built(&off, &pki));
    assert!(
        !pod_off.containers[0]
            .args
            .iter()
            .flatten()
            .any(|a| flag_name(a) == "authentication-config")
    );
    assert!(
        pod_off
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != "authentication-config")
    );
    assert!(
        pod_off.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != "authentication-config")
    );
}

#[test]
fn changing_the_authenticators_does_not_change_the_pod_template() {
    let one = with_authentication(Some(json!({"jwt": [own_issuer("https://127.0.0.1:8443")]})), &[]);
    let two = with_authentication(
        Some(json!({"jwt": [own_issuer("https://127.0.0.1:9443"), own_issuer("https://idp.example.com")]})),
        &[],
    );
    let pki = pki(&one, &BTreeMap::new(), None, &WorkloadSettings::default(), NOW).unwrap();
    let (a, b) = (built(&one, &pki), built(&two, &pki));
    assert_ne!(yaml(&one), yaml(&two));
    let template = |d: &BuiltDeployment| d.deployment.spec.clone().unwrap().template;
    assert_eq!(template(&a), template(&b));
    let checksum = |d: &BuiltDeployment| {
        template(d).metadata.unwrap().annotations.unwrap()[POD_CHECKSUM_ANNOTATION].clone()
    };
    assert_eq!(checksum(&a), checksum(&b));
    assert_eq!(
        crate::cache::desired_hash(&a.deployment),
        crate::cache::desired_hash(&b.deployment)
    );
}

#[test]
fn an_authenticator_with_the_service_account_issuer_is_left_out_and_reported() {
    let sa = "https://kubernetes.default.svc.cluster.local";
    let t = with_authentication(
        Some(json!({"jwt": [own_issuer(sa), own_issuer("https://127.0.0.1:8443")]})),
        &[],
    );
    let built = authentication_config(&t).unwrap().unwrap();
    assert_eq!(built.authenticators, 1);
    assert_eq!(built.conflicts, [sa]);
    let file: serde_json::Value = serde_yaml::from_str(&yaml(&t)).unwrap();
    assert_eq!(file["jwt"].as_array().unwrap().len(), 1);
    assert_eq!(file["jwt"][0]["issuer"]["url"], "https://127.0.0.1:8443");

    let mut c = Conditions::new(&[], Some(1), Timestamp::now());
    let warning = authentication_condition(&mut c, &t, &built);
    let condition = c.get(AUTHENTICATION_CONFIGURED).unwrap().clone();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "ServiceAccountIssuerConflict")
    );
    assert_eq!(
        condition.message,
        format!(
            "1 JWT authenticator(s) rendered into ConfigMap cp-authentication-config (kube-apiserver --authentication-config); left out the JWT authenticator(s) whose issuer URL equals the service-account issuer (kube-apiserver refuses that): {sa}"
        )
    );
    assert!(!condition.message.contains("BEGIN CERTIFICATE"));
    assert_eq!(
        warning,
        Some(("ServiceAccountIssuerConflict", condition.message.clone()))
    );

    // Once the TenantControlPlane holds that condition, no second Event.
    let mut held = t.clone();
    held.status = Some(crate::k8s::crd::TenantControlPlaneStatus {
        conditions: vec![condition.clone()],
        ..Default::default()
    });
    let mut c = Conditions::new(&[], Some(1), Timestamp::now());
    assert_eq!(authentication_condition(&mut c, &held, &built), None);

    // The user's issuer override is the one compared.
    let custom = with_authentication(
        Some(json!({"jwt": [own_issuer(sa), own_issuer("https://127.0.0.1:8443")]})),
        &["--service-account-issuer=https://127.0.0.1:8443"],
    );
    assert_eq!(service_account_issuers(&custom), ["https://127.0.0.1:8443"]);
    let built = authentication_config(&custom).unwrap().unwrap();
    assert_eq!(built.conflicts, ["https://127.0.0.1:8443"]);
    let file: serde_json::Value = serde_yaml::from_str(&yaml(&custom)).unwrap();
    assert_eq!(file["jwt"][0]["issuer"]["url"], sa);
}

#[test]
fn oidc_flags_are_dropped_with_authentication_and_named_without_their_values() {
    let user = [
        "--oidc-issuer-url=https://accounts.example.com",
        "--oidc-client-id=kubernetes",
        "--v=2",
    ];
    let on = with_authentication(
        Some(json!({"jwt": [own_issuer("https://127.0.0.1:8443")]})),
        &user,
    );
    let args = apiserver_args(&on, &etcd());
    assert!(args.args.iter().all(|a| !flag_name(a).starts_with("oidc-")));
    assert!(args.args.contains(&"--v=2".to_string()));
    assert!(args.dropped.is_empty());
    let built = authentication_config(&on).unwrap().unwrap();
    assert_eq!(built.oidc_dropped, ["--oidc-issuer-url", "--oidc-client-id"]);

    let mut c = Conditions::new(&[], Some(1), Timestamp::now());
    authentication_condition(&mut c, &on, &built);
    extra_args_condition(&mut c, &args, None, &built.oidc_dropped);
    let auth = c.get(AUTHENTICATION_CONFIGURED).unwrap();
    assert_eq!(
        (auth.status.as_str(), auth.reason.as_str()),
        ("False", "OidcFlagsDropped")
    );
    assert!(
        auth.message.ends_with(
            "dropped extraArgs.apiServer --oidc-issuer-url, --oidc-client-id (kube-apiserver refuses --oidc-* flags with --authentication-config)"
        ),
        "{}",
        auth.message
    );
    assert!(!auth.message.contains("accounts.example.com"));
    let extra = c.get(EXTRA_ARGS_APPLIED).unwrap();
    assert_eq!(
        (extra.status.as_str(), extra.reason.as_str()),
        ("False", "OidcFlagsDropped")
    );

    // Without authentication they pass through, and nothing is reported.
    let off = with_authentication(None, &user);
    let args = apiserver_args(&off, &etcd());
    assert!(args.args.contains(&user[0].to_string()));
    assert!(oidc_flag_names(&off).is_empty());
}

#[test]
fn a_clean_configuration_is_rendered_and_the_condition_goes_with_the_spec() {
    let on = with_authentication(Some(json!({"jwt": [own_issuer("https://127.0.0.1:8443")]})), &[]);
    let built = authentication_config(&on).unwrap().unwrap();
    let now: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
    let mut c = Conditions::new(&[], Some(1), now);
    assert_eq!(authentication_condition(&mut c, &on, &built), None);
    let condition = c.get(AUTHENTICATION_CONFIGURED).unwrap().clone();
    assert_eq!(
        (
            condition.status.as_str(),
            condition.reason.as_str(),
            condition.message.as_str()
        ),
        (
            "True",
            "Rendered",
            "1 JWT authenticator(s) rendered into ConfigMap cp-authentication-config (kube-apiserver --authentication-config)"
        )
    );
    let status = workload_status(&on, &[], c, Owned::default(), Ok(()), StorageRecord::default());
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == AUTHENTICATION_CONFIGURED)
    );
    assert!(
        mine(&status.conditions)
            .iter()
            .any(|c| c.type_ == AUTHENTICATION_CONFIGURED)
    );

    // `spec.authentication` removed: the earlier condition is not kept.
    let off = with_authentication(None, &[]);
    let previous = vec![condition];
    let status = workload_status(
        &off,
        &previous,
        Conditions::new(&previous, Some(2), now),
        Owned::default(),
        Ok(()),
        StorageRecord::default(),
    );
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != AUTHENTICATION_CONFIGURED)
    );
}

#[test]
fn a_failed_configmap_apply_is_reported_in_the_condition() {
    let on = with_authentication(Some(json!({})), &[]);
    let err = Error::NotReady {
        reason: "KubernetesApiError",
        message: "connection refused".into(),
    }
    .in_phase(Phase::Authentication);
    let now: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
    let status = workload_status(
        &on,
        &[],
        Conditions::new(&[], Some(1), now),
        Owned::default(),
        Err(&err),
        StorageRecord::default(),
    );
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == AUTHENTICATION_CONFIGURED)
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "KubernetesApiError")
    );
    let ready = status.conditions.iter().find(|c| c.type_ == READY).unwrap();
    assert_eq!(
        ready.message,
        "the authentication phase failed: connection refused"
    );
}

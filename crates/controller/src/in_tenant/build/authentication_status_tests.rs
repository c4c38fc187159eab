use serde_json::json;
use tenantplane_testkit::tcp;

use super::{
    authentication_status::{
        FAILED_MESSAGE, PENDING_MESSAGE, Reloads, Rendered, parse, rendered, report, status,
    },
    checksum, desired,
    status::{self as phase_status, Found},
    *,
};
use crate::{
    Error,
    k8s::crd::{AuthenticationStatus, AuthenticatorState, JwtAuthenticatorStatus, TenantControlPlane},
    tenant_control_plane::build::authentication_config,
};

const LOADED_FILE: &str = include_str!("testdata/kube-apiserver-v1.34.4-authentication-config.yaml");
const STARTED: &str = include_str!("testdata/kube-apiserver-v1.34.4-metrics-started.txt");
const RELOADED: &str = include_str!("testdata/kube-apiserver-v1.34.4-metrics-reloaded.txt");
const REFUSED: &str = include_str!("testdata/kube-apiserver-v1.34.4-metrics-refused.txt");
const LOADED_HASH: &str = "sha256:9d91d0a983ffdd517a25cd3bc72ab565551a74a336baf47f8ca8399177cbcf45";

fn issuer(url: &str) -> serde_json::Value {
    json!({
        "issuer": {"url": url, "audiences": ["tenantplane:cp:1"]},
        "claimMappings": {"username": {"claim": "sub", "prefix": "tenantplane:"}},
    })
}

/// A TenantControlPlane with `spec.authentication` of these issuers (and `status.authentication`).
fn with_issuers(urls: &[&str], previous: Option<&AuthenticationStatus>) -> TenantControlPlane {
    let jwt: Vec<_> = urls.iter().map(|u| issuer(u)).collect();
    let mut tcp = tcp("tenants", "cp")
        .metadata("uid", json!("0b5c3a4e-6a43-4a57-9d0f-4bd4f1b6f1a1"))
        .spec("authentication", json!({ "jwt": jwt }))
        .build();
    if let Some(previous) = previous {
        tcp.status.get_or_insert_with(Default::default).authentication = Some(previous.clone());
    }
    tcp
}

fn entry(url: &str, state: AuthenticatorState) -> JwtAuthenticatorStatus {
    let message = match state {
        AuthenticatorState::Active => None,
        AuthenticatorState::Pending => Some(PENDING_MESSAGE.to_string()),
        AuthenticatorState::Failed => Some(FAILED_MESSAGE.to_string()),
    };
    JwtAuthenticatorStatus {
        issuer_url: url.into(),
        state,
        message,
    }
}

fn two() -> Rendered {
    Rendered {
        hash: "sha256:new".into(),
        issuers: vec!["https://a.example".into(), "https://b.example".into()],
    }
}

fn reloads(loaded: &str, success: Option<f64>, failure: Option<f64>) -> Reloads {
    Reloads {
        loaded_hash: Some(loaded.into()),
        last_success: success,
        last_failure: failure,
    }
}

#[test]
fn the_loaded_hash_is_sha256_colon_the_hex_of_the_files_bytes_as_a_real_apiserver_reports_it() {
    let reloaded = parse(RELOADED);
    assert_eq!(reloaded.loaded_hash.as_deref(), Some(LOADED_HASH));
    assert_eq!(checksum([LOADED_FILE]), LOADED_HASH);
}

#[test]
fn the_real_metrics_tell_a_start_a_reload_after_a_refusal_and_a_refusal_apart() {
    let started = parse(STARTED);
    assert_eq!(
        started,
        Reloads {
            loaded_hash: Some(
                "sha256:25a183a47c33564e5a2e2e9f05688cbc750366c413681164e53cca087ad26f8d".into()
            ),
            last_success: None,
            last_failure: None,
        }
    );
    assert!(!started.newest_failed());

    let reloaded = parse(RELOADED);
    assert_eq!(reloaded.last_success, Some(1.796_317_055_267_737_6e9));
    assert_eq!(reloaded.last_failure, Some(1.796_317_045_262_439_7e9));
    assert!(!reloaded.newest_failed());

    let refused = parse(REFUSED);
    assert_eq!(refused.loaded_hash.as_deref(), Some(LOADED_HASH));
    assert_eq!(refused.last_success, reloaded.last_success);
    assert_eq!(refused.last_failure, Some(1.796_317_282_565_621_6e9));
    assert!(refused.newest_failed());
}

#[test]
fn the_newest_reload_failed_when_a_failure_is_newer_than_the_last_success_or_nothing_succeeded() {
    let at = |success, failure| Reloads {
        last_success: success,
        last_failure: failure,
        ..Reloads::default()
    };
    assert!(!at(None, None).newest_failed());
    assert!(!at(Some(10.0), None).newest_failed());
    assert!(!at(Some(10.0), Some(9.0)).newest_failed());
    assert!(at(Some(10.0), Some(11.0)).newest_failed());
    assert!(at(None, Some(1.0)).newest_failed());
}

#[test]
fn the_parser_reads_labels_in_any_order_with_escapes_and_skips_everything_else() {
    let text = concat!(
        "# HELP apiserver_authentication_config_controller_last_config_info x\n",
        "apiserver_authentication_config_controller_last_config_info{hash=\"sha256:old\",apiserver_id_hash=\"sha256:1\"} 0\n",
        "apiserver_authentication_config_controller_last_config_info{hash=\"sha256:new\",apiserver_id_hash=\"a\\\"b\\\\c\"} 1\n",
        "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds{status=\"failure\", apiserver_id_hash=\"x\"} 12 1700000000000\n",
        "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds{status=\"success\"} 1.1e+01\n",
        "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds{status=\"other\"} 99\n",
        "apiserver_authentication_config_controller_last_config_info{hash=\"unterminated} 1\n",
        "apiserver_authentication_config_controller_automatic_reloads_total{status=\"failure\"} 3\n",
        "garbage\n",
        "up 1\n",
    );
    assert_eq!(parse(text), reloads("sha256:new", Some(11.0), Some(12.0)));
    assert_eq!(parse(""), Reloads::default());
}

#[test]
fn the_rendered_hash_is_of_the_exact_bytes_of_the_configmap_and_leaves_out_service_account_issuers() {
    let three = with_issuers(
        &[
            "https://a.example",
            "https://kubernetes.default.svc.cluster.local",
            "https://b.example",
        ],
        None,
    );
    let built = authentication_config(&three).unwrap().unwrap();
    let file = &built.config_map.data.as_ref().unwrap()["authentication-config.yaml"];
    let ring = ring::digest::digest(&ring::digest::SHA256, file.as_bytes());
    let hex: String = ring.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        rendered(&three).unwrap(),
        Some(Rendered {
            hash: format!("sha256:{hex}"),
            issuers: vec!["https://a.example".into(), "https://b.example".into()],
        })
    );
    assert_eq!(rendered(&tcp("tenants", "cp").build()).unwrap(), None);
    // With no authenticator at all the file still exists (and has a hash).
    let empty = tcp("tenants", "cp").spec("authentication", json!({})).build();
    assert_eq!(rendered(&empty).unwrap().unwrap().issuers, Vec::<String>::new());
}

#[test]
fn a_loaded_file_makes_every_authenticator_active() {
    let previous = AuthenticationStatus {
        config_hash: Some("sha256:new".into()),
        loaded_hash: Some("sha256:old".into()),
        jwt: vec![entry("https://b.example", AuthenticatorState::Failed)],
    };
    // Even after a refused reload: the loaded hash is the rendered one.
    let got = status(
        &two(),
        &reloads("sha256:new", Some(1.0), Some(2.0)),
        Some(&previous),
    );
    assert_eq!(
        got,
        AuthenticationStatus {
            config_hash: Some("sha256:new".into()),
            loaded_hash: Some("sha256:new".into()),
            jwt: vec![
                entry("https://a.example", AuthenticatorState::Active),
                entry("https://b.example", AuthenticatorState::Active),
            ],
        }
    );
}

#[test]
fn before_the_load_an_active_authenticator_stays_active_and_a_new_one_is_pending_or_failed() {
    let previous = AuthenticationStatus {
        config_hash: Some("sha256:old".into()),
        loaded_hash: Some("sha256:old".into()),
        jwt: vec![entry("https://a.example", AuthenticatorState::Active)],
    };
    let pending = status(
        &two(),
        &reloads("sha256:old", Some(5.0), Some(4.0)),
        Some(&previous),
    );
    assert_eq!(
        pending,
        AuthenticationStatus {
            config_hash: Some("sha256:new".into()),
            loaded_hash: Some("sha256:old".into()),
            jwt: vec![
                entry("https://a.example", AuthenticatorState::Active),
                entry("https://b.example", AuthenticatorState::Pending),
            ],
        }
    );
    let failed = status(
        &two(),
        &reloads("sha256:old", Some(5.0), Some(6.0)),
        Some(&previous),
    );
    assert_eq!(
        failed.jwt,
        vec![
            entry("https://a.example", AuthenticatorState::Active),
            entry("https://b.example", AuthenticatorState::Failed),
        ]
    );
    // Without a previous status, and with nothing loaded (the pod still starts without the flag).
    let fresh = status(&two(), &Reloads::default(), None);
    assert_eq!(fresh.loaded_hash, None);
    assert_eq!(
        fresh.jwt,
        vec![
            entry("https://a.example", AuthenticatorState::Pending),
            entry("https://b.example", AuthenticatorState::Pending),
        ]
    );
    // A previously failed (not active) authenticator is pending again until the next attempt.
    let after_failure = AuthenticationStatus {
        jwt: vec![entry("https://b.example", AuthenticatorState::Failed)],
        ..previous
    };
    let retried = status(
        &two(),
        &reloads("sha256:old", Some(7.0), Some(6.0)),
        Some(&after_failure),
    );
    assert_eq!(
        retried.jwt,
        vec![
            entry("https://a.example", AuthenticatorState::Pending),
            entry("https://b.example", AuthenticatorState::Pending),
        ]
    );
}

#[test]
fn unread_metrics_keep_the_previous_status_and_no_spec_means_no_status() {
    let previous = AuthenticationStatus {
        config_hash: Some("sha256:old".into()),
        loaded_hash: Some("sha256:old".into()),
        jwt: vec![entry("https://a.example", AuthenticatorState::Active)],
    };
    let tcp = with_issuers(&["https://a.example", "https://b.example"], Some(&previous));
    assert_eq!(report(&tcp, None), Some(previous.clone()));
    let hash = rendered(&tcp).unwrap().unwrap().hash;
    let metrics = format!(
        "apiserver_authentication_config_controller_last_config_info{{apiserver_id_hash=\"sha256:1\",hash=\"{hash}\"}} 1\n"
    );
    let got = report(&tcp, Some(&metrics)).unwrap();
    assert_eq!(got.config_hash.as_deref(), Some(hash.as_str()));
    assert_eq!(got.loaded_hash.as_deref(), Some(hash.as_str()));
    assert!(got.jwt.iter().all(|j| j.state == AuthenticatorState::Active));

    let mut without = tcp.clone();
    without.spec.authentication = None;
    assert_eq!(report(&without, Some(&metrics)), None);
    assert_eq!(report(&without, None), None);
}

#[test]
fn the_phase_report_carries_the_authentication_status_reads_back_unchanged_and_drops_it_with_the_spec() {
    let tcp = with_issuers(&["https://a.example"], None);
    let desired = desired(&Facts {
        tcp: &tcp,
        endpoint: "192.0.2.10:6443",
        ca_cert: "",
        version: "v1.34.4",
        key_algorithm: KeyAlgorithm::EcdsaP256,
        namespaces: &[],
    });
    let found = Found {
        authentication_metrics: Some(REFUSED.into()),
        ..Found::default()
    };
    let now = "2026-12-01T00:00:00Z".parse().unwrap();
    let first = phase_status::report(&tcp, &desired, Ok(&found), now);
    let written = first.authentication.clone().unwrap();
    // The refused file is not the rendered one, so the new authenticator failed.
    assert_eq!(written.loaded_hash.as_deref(), Some(LOADED_HASH));
    assert_eq!(
        written.jwt,
        vec![entry("https://a.example", AuthenticatorState::Failed)]
    );
    assert_eq!(
        serde_json::to_value(&first).unwrap()["authentication"]["jwt"][0]["state"],
        "Failed"
    );

    let mut later = tcp.clone();
    let status = later.status.get_or_insert_with(Default::default);
    status.kubeadmconfig = first.kubeadmconfig.clone();
    status.kubeadm_phase = first.kubeadm_phase.clone();
    status.addons = first.addons.clone();
    status.conditions = first.conditions.clone();
    status.authentication = Some(written.clone());
    assert_eq!(phase_status::current(&later), first);
    // A failed pass keeps it; so does a pass whose metrics could not be read.
    let err = Error::MissingObjectKey("x");
    let failed = phase_status::report(&later, &desired, Err(&err), now);
    assert_eq!(failed.authentication, Some(written.clone()));
    let unread = phase_status::report(&later, &desired, Ok(&Found::default()), now);
    assert_eq!(unread.authentication, Some(written));

    later.spec.authentication = None;
    let gone = phase_status::report(&later, &desired, Err(&err), now);
    assert_eq!(gone.authentication, None);
    assert!(
        serde_json::to_value(&gone)
            .unwrap()
            .get("authentication")
            .is_none()
    );
}

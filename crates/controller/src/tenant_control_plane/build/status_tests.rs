use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};

use super::*;

const NOW: &str = "2026-03-01T00:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn tcp() -> TenantControlPlane {
    let mut tcp: TenantControlPlane = serde_yaml::from_str(
        r#"
apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: cp, namespace: tenants, generation: 4}
spec:
  dataStore: ds
  controlPlane:
    service: {serviceType: ClusterIP}
  kubernetes: {version: v1.34.1, kubelet: {}}
"#,
    )
    .unwrap();
    tcp.metadata.uid = Some("0b7a3c1e-0000-4000-8000-000000000001".into());
    tcp
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
    conditions.iter().find(|c| c.type_ == type_).unwrap()
}

fn deployment(replicas: i32, status: DeploymentStatus) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("cp".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
            replicas: Some(replicas),
            ..Default::default()
        }),
        status: Some(status),
    }
}

#[test]
fn pki_conditions_name_what_was_generated_and_keep_the_message_of_the_run_that_did() {
    let mut t = tcp();
    let pki = Pki {
        secrets: Vec::new(),
        generated: vec!["cp-ca".into(), "cp-admin-kubeconfig".into()],
    };
    let mut c = Conditions::new(&[], Some(4), now());
    pki_conditions(&mut c, &t, &pki);
    let set = c.into_vec();
    assert_eq!(
        condition(&set, CERTIFICATES_READY).message,
        "6 certificate Secrets are valid (generated cp-ca)"
    );
    assert_eq!(
        condition(&set, KUBECONFIGS_READY).message,
        "admin, controller-manager and scheduler kubeconfigs are valid (generated cp-admin-kubeconfig)"
    );
    // A later run that generated nothing keeps those messages.
    t.status = Some(crate::k8s::crd::TenantControlPlaneStatus {
        conditions: set.clone(),
        ..Default::default()
    });
    let nothing = Pki {
        secrets: Vec::new(),
        generated: Vec::new(),
    };
    let mut c = Conditions::new(&set, Some(4), now());
    pki_conditions(&mut c, &t, &nothing);
    let again = c.into_vec();
    assert_eq!(
        condition(&again, CERTIFICATES_READY).message,
        "6 certificate Secrets are valid (generated cp-ca)"
    );
    // Without an earlier True condition: "reused".
    t.status = None;
    let mut c = Conditions::new(&[], Some(4), now());
    pki_conditions(&mut c, &t, &nothing);
    assert_eq!(
        condition(&c.into_vec(), CERTIFICATES_READY).message,
        "6 certificate Secrets are valid (reused)"
    );
}

#[test]
fn version_and_extra_args_conditions() {
    let mut c = Conditions::new(&[], Some(4), now());
    version_condition(&mut c, "v1.34.1", None);
    extra_args_condition(
        &mut c,
        &Args {
            args: Vec::new(),
            dropped: vec!["--secure-port=1".into(), "--v=2".into()],
        },
        None,
        &[],
    );
    let set = c.into_vec();
    let version = condition(&set, VERSION_ACCEPTED);
    assert_eq!(
        (
            version.status.as_str(),
            version.reason.as_str(),
            version.message.as_str()
        ),
        ("True", "VersionAccepted", "v1.34.1 is the desired version")
    );
    let args = condition(&set, EXTRA_ARGS_APPLIED);
    assert_eq!(
        (args.status.as_str(), args.reason.as_str(), args.message.as_str()),
        (
            "False",
            "ManagedFlagsWin",
            "extraArgs.apiServer flags dropped because Tenantplane manages them: --secure-port=1 --v=2"
        )
    );
    let mut c = Conditions::new(&[], Some(4), now());
    let konnectivity = Args {
        args: Vec::new(),
        dropped: vec!["--agent-port=1".into()],
    };
    extra_args_condition(
        &mut c,
        &Args {
            args: Vec::new(),
            dropped: Vec::new(),
        },
        Some(&konnectivity),
        &[],
    );
    let set = c.into_vec();
    assert_eq!(
        condition(&set, EXTRA_ARGS_APPLIED).message,
        "addons.konnectivity.server.extraArgs flags dropped because Tenantplane manages them: --agent-port=1"
    );
    let (running, refused) = version_to_run("v1.33.0", Some("v1.34.1"));
    let mut c = Conditions::new(&[], Some(4), now());
    version_condition(&mut c, &running, refused.as_ref());
    let set = c.into_vec();
    let version = condition(&set, VERSION_ACCEPTED);
    assert_eq!(
        (version.status.as_str(), version.reason.as_str()),
        ("False", "VersionDowngradeRefused")
    );
}

#[test]
fn rollout_conditions_say_sleeping_or_count_replicas_and_name_a_replica_failure() {
    let mut c = Conditions::new(&[], Some(4), now());
    rollout_conditions(
        &mut c,
        &deployment(0, Default::default()),
        0,
        KubernetesVersionState::Sleeping,
    );
    let set = c.into_vec();
    assert_eq!(
        condition(&set, READY).message,
        "the control plane is scaled to zero"
    );
    assert_eq!(condition(&set, DEPLOYMENT_AVAILABLE).reason, "Sleeping");

    let status = DeploymentStatus {
        ready_replicas: Some(1),
        updated_replicas: Some(2),
        conditions: Some(vec![DeploymentCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some("FailedCreate".into()),
            message: Some("no binary".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let mut c = Conditions::new(&[], Some(4), now());
    rollout_conditions(
        &mut c,
        &deployment(2, status),
        2,
        KubernetesVersionState::Provisioning,
    );
    let set = c.into_vec();
    let message = "Deployment cp: 1/2 ready, 2/2 updated, 0/2 available; FailedCreate: no binary";
    assert_eq!(condition(&set, DEPLOYMENT_AVAILABLE).message, message);
    let ready = condition(&set, READY);
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        ("False", "Provisioning", message)
    );
}

#[test]
fn available_conditions_follow_readyz() {
    let d = deployment(2, Default::default());
    let ready = |readyz| {
        let mut c = Conditions::new(&[], Some(4), now());
        available_conditions(&mut c, &d, 2, "v1.34.1", "10.0.0.1:6443", readyz);
        let set = c.into_vec();
        assert_eq!(
            condition(&set, DEPLOYMENT_AVAILABLE).message,
            "Deployment cp has 2 updated, ready replicas"
        );
        let r = condition(&set, READY).clone();
        (r.status, r.reason, r.message)
    };
    assert_eq!(
        ready(Readyz::Ok),
        (
            "True".into(),
            "Ready".into(),
            "v1.34.1 serves at 10.0.0.1:6443: /readyz answered ok".into()
        )
    );
    assert_eq!(ready(Readyz::Unreachable).0, "True");
    assert_eq!(
        ready(Readyz::NotReady(500)),
        (
            "False".into(),
            "ApiNotReady".into(),
            "v1.34.1 is rolled out at 10.0.0.1:6443 but its /readyz answered HTTP 500".into()
        )
    );
}

#[test]
fn a_failed_workload_step_names_its_phase_and_keeps_what_it_did_not_reach() {
    let t = tcp();
    let mut earlier = Conditions::new(&[], Some(3), now());
    earlier.set(DEPLOYMENT_AVAILABLE, Some(true), "RolloutComplete", "old");
    let previous = earlier.into_vec();
    let err = Error::NotReady {
        reason: "SecretCreatedConcurrently",
        message: "a PKI Secret appeared".into(),
    }
    .in_phase(Phase::Certificates);
    let conditions = Conditions::new(&previous, Some(4), now());
    let owned = workload_status(
        &t,
        &previous,
        conditions,
        Owned::default(),
        Err(&err),
        StorageRecord::default(),
    );
    let certs = condition(&owned.conditions, CERTIFICATES_READY);
    assert_eq!(
        (
            certs.status.as_str(),
            certs.reason.as_str(),
            certs.message.as_str()
        ),
        ("False", "SecretCreatedConcurrently", "a PKI Secret appeared")
    );
    assert_eq!(
        condition(&owned.conditions, READY).message,
        "the certificates phase failed: a PKI Secret appeared"
    );
    assert_eq!(condition(&owned.conditions, DEPLOYMENT_AVAILABLE).message, "old");
    assert_eq!(owned.observed_generation, None);

    let ok = workload_status(
        &t,
        &previous,
        Conditions::new(&previous, Some(4), now()),
        Owned::default(),
        Ok(()),
        StorageRecord::default(),
    );
    assert_eq!(ok.observed_generation, Some(4));
}

#[test]
fn a_failed_datastore_phase_sets_its_condition_and_ready() {
    let t = tcp();
    let err = Error::NotExclusive {
        data_store: "nats".into(),
        holder: "ns/other".into(),
    }
    .in_phase(Phase::Datastore);
    let mut c = Conditions::new(&[], Some(4), now());
    datastore_failure_conditions(&mut c, &err);
    let record = StorageRecord {
        storage: None,
        conditions: c.into_vec(),
    };
    assert_eq!(
        condition(&record.conditions, DATASTORE_READY).message,
        "the NATS DataStore serves another TenantControlPlane"
    );
    assert_eq!(
        condition(&record.conditions, DATASTORE_EXCLUSIVE).reason,
        "DataStoreNotExclusive"
    );
    let owned = datastore_failure_status(&t, &err, record, now());
    let ready = condition(&owned.conditions, READY);
    assert_eq!(ready.reason, "DataStoreNotExclusive");
    assert!(
        ready
            .message
            .starts_with("the datastore phase failed: NATS DataStore nats already serves"),
        "{}",
        ready.message
    );
}

#[test]
fn overrides_condition_lists_them_in_spec_order() {
    let o = |r: &str, ds: &str| DataStoreOverride {
        resource: r.into(),
        data_store: ds.into(),
    };
    let mut c = Conditions::new(&[], Some(4), now());
    overrides_condition(&mut c, &[]);
    assert!(c.get(OVERRIDES_APPLIED).is_none());
    overrides_condition(&mut c, &[o("/events", "a"), o("/leases", "b")]);
    assert_eq!(
        c.get(OVERRIDES_APPLIED).unwrap().message,
        "2 override(s) provisioned: /events→a, /leases→b"
    );
}

#[test]
fn stalled_is_true_only_for_what_no_retry_can_fix() {
    let t = tcp();
    let stalled_after = |result: Result<(), &Error>| {
        let owned = workload_status(
            &t,
            &[],
            Conditions::new(&[], Some(4), now()),
            Owned::default(),
            result,
            StorageRecord::default(),
        );
        let c = condition(&owned.conditions, STALLED);
        (c.status.clone(), c.reason.clone(), c.observed_generation)
    };
    let permanent = Error::Invalid {
        reason: "InvalidSpec",
        message: "the port is taken".into(),
    }
    .in_phase(Phase::Deployment);
    assert_eq!(
        stalled_after(Err(&permanent)),
        ("True".into(), "InvalidSpec".into(), Some(4))
    );
    let transient = Error::NotReady {
        reason: "DataStoreNotReady",
        message: "not checked yet".into(),
    }
    .in_phase(Phase::Certificates);
    assert_eq!(
        stalled_after(Err(&transient)),
        ("False".into(), "Retrying".into(), Some(4))
    );
    assert_eq!(
        stalled_after(Ok(())),
        ("False".into(), "Progressing".into(), Some(4))
    );
}

#[test]
fn a_rollout_is_stalled_by_pods_that_cannot_be_made_or_its_progress_deadline_not_by_a_failed_create() {
    let failure = |type_: &str, status: &str, reason: &str| DeploymentStatus {
        conditions: Some(vec![DeploymentCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(format!("{reason} says so")),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let stalled = |status: DeploymentStatus| {
        let mut c = Conditions::new(&[], Some(4), now());
        rollout_conditions(
            &mut c,
            &deployment(1, status),
            1,
            KubernetesVersionState::Provisioning,
        );
        c.get(STALLED).map(|s| (s.reason.clone(), s.message.clone()))
    };
    for reason in ["ImageNotBuilt", "UnsupportedPodTemplate"] {
        assert_eq!(
            stalled(failure("ReplicaFailure", "True", reason)),
            Some((reason.to_string(), format!("{reason} says so")))
        );
    }
    assert_eq!(
        stalled(failure("Progressing", "False", "ProgressDeadlineExceeded")),
        Some((
            "ProgressDeadlineExceeded".into(),
            "ProgressDeadlineExceeded says so".into()
        ))
    );
    // A quota or admission refusal may pass; the rollout is only in progress.
    assert_eq!(stalled(failure("ReplicaFailure", "True", "FailedCreate")), None);
    assert_eq!(stalled(failure("Progressing", "True", "ReplicaSetUpdated")), None);
}

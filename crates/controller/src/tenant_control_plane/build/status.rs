//! A TenantControlPlane's status and conditions, computed from what the pipeline's steps returned;
//! the I/O steps only write what these functions computed.

use std::collections::BTreeMap as Map;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;
use crate::{
    Phase,
    build::Conditions,
    k8s::crd::{
        CertificatesStatus, KubeconfigsStatus, KubernetesResourcesStatus, KubernetesVersionStatus,
        SecretStatus,
    },
};

/// Condition types the workload phase owns.
pub mod conditions {
    /// Every certificate Secret is present and valid.
    pub const CERTIFICATES_READY: &str = "CertificatesReady";
    /// Every kubeconfig Secret is present and valid.
    pub const KUBECONFIGS_READY: &str = "KubeconfigsReady";
    /// The Deployment has rolled out completely.
    pub const DEPLOYMENT_AVAILABLE: &str = "DeploymentAvailable";
    /// `spec.kubernetes.version` is running (False: refused, the installed version keeps running).
    pub const VERSION_ACCEPTED: &str = "KubernetesVersionAccepted";
    /// Every user `extraArgs.apiServer` flag made it to the container.
    pub const EXTRA_ARGS_APPLIED: &str = "ExtraArgsApplied";
    /// `spec.authentication` is rendered into kube-apiserver's `--authentication-config` as written
    /// (absent without `spec.authentication`).
    pub const AUTHENTICATION_CONFIGURED: &str = "AuthenticationConfigured";
    /// The NetworkPolicy `<tcp>-egress` limits where the control-plane pods may connect to.
    pub const EGRESS_RESTRICTED: &str = "EgressRestricted";
    /// The control plane serves.
    pub const READY: &str = "Ready";
    /// kstatus' `Stalled`: True when no retry can succeed until something changes (a permanent error, pods
    /// that cannot be made, a rollout past its progress deadline); False otherwise.
    pub const STALLED: &str = "Stalled";
    /// All of the above.
    pub const OWNED: [&str; 9] = [
        CERTIFICATES_READY,
        KUBECONFIGS_READY,
        DEPLOYMENT_AVAILABLE,
        VERSION_ACCEPTED,
        EXTRA_ARGS_APPLIED,
        AUTHENTICATION_CONFIGURED,
        EGRESS_RESTRICTED,
        READY,
        STALLED,
    ];
}

use conditions::*;
use tcp_conditions::{DATASTORE_EXCLUSIVE, DATASTORE_READY, OVERRIDES_APPLIED};

/// Condition types the datastore phase sets.
const DATASTORE_OWNED: [&str; 3] = [DATASTORE_READY, OVERRIDES_APPLIED, DATASTORE_EXCLUSIVE];

/// The status fields the controller writes: the datastore phase's record and the workload phase's
/// fields.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Owned {
    /// `status.storage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageStatus>,
    /// `status.observedGeneration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `status.controlPlaneEndpoint`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<String>,
    /// `status.kubeconfig`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigsStatus>,
    /// `status.certificates`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates: Option<CertificatesStatus>,
    /// `status.kubernetesResources`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_resources: Option<KubernetesResourcesStatus>,
    /// The conditions the controller owns.
    pub conditions: Vec<Condition>,
}

/// The conditions the controller writes: the workload phase's and the datastore phase's, by type.
pub fn mine(conditions: &[Condition]) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions
        .iter()
        .filter(|c| OWNED.contains(&c.type_.as_str()) || DATASTORE_OWNED.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// What the controller's fields hold now.
pub fn current(tcp: &TenantControlPlane) -> Owned {
    let status = tcp.status.clone().unwrap_or_default();
    Owned {
        storage: status.storage,
        observed_generation: status.observed_generation,
        control_plane_endpoint: status.control_plane_endpoint,
        kubeconfig: status.kubeconfig,
        certificates: status.certificates,
        kubernetes_resources: status.kubernetes_resources,
        conditions: mine(&status.conditions),
    }
}

/// The datastore phase's record in place of the last one: its `storage`, and its conditions instead
/// of every earlier datastore-phase condition (one it did not set this run is gone).
pub fn with_storage(mut owned: Owned, record: StorageRecord) -> Owned {
    owned.storage = record.storage;
    owned
        .conditions
        .retain(|c| !DATASTORE_OWNED.contains(&c.type_.as_str()));
    owned.conditions.extend(record.conditions);
    owned
}

/// The conditions of a failed datastore phase: the failing one (`OverridesApplied`,
/// `DataStoreExclusive`, else `DataStoreReady`) False with the error.
pub fn datastore_failure_conditions(conditions: &mut Conditions<'_>, err: &Error) {
    let type_ = match err.cause() {
        Error::Overrides { .. } => OVERRIDES_APPLIED,
        Error::NotExclusive { .. } => DATASTORE_EXCLUSIVE,
        _ => DATASTORE_READY,
    };
    conditions.set(type_, Some(false), err.reason(), err.to_string());
    if type_ == DATASTORE_EXCLUSIVE {
        conditions.set(
            DATASTORE_READY,
            Some(false),
            err.reason(),
            "the NATS DataStore serves another TenantControlPlane",
        );
    }
}

/// The status after a failed datastore phase: its record, `Ready=False` with the reason, every other
/// field as it was.
pub fn datastore_failure_status(
    tcp: &TenantControlPlane,
    err: &Error,
    record: StorageRecord,
    now: Timestamp,
) -> Owned {
    let mut owned = current(tcp);
    let previous = owned.conditions.clone();
    let mut conditions = Conditions::new(&previous, tcp.metadata.generation, now);
    let dropped = |type_: &str| {
        type_ == READY
            || type_ == STALLED
            || (type_ == AUTHENTICATION_CONFIGURED && authentication(tcp).is_none())
    };
    for c in previous.iter().filter(|c| OWNED.contains(&c.type_.as_str())) {
        if !dropped(&c.type_) {
            conditions.set(
                &c.type_,
                match c.status.as_str() {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => None,
                },
                &c.reason,
                c.message.clone(),
            );
        }
    }
    conditions.set(
        READY,
        Some(false),
        err.reason(),
        format!("the datastore phase failed: {err}"),
    );
    stalled_after(&mut conditions, Some(err), Phase::Datastore);
    owned.conditions = conditions.into_vec();
    with_storage(owned, record)
}

/// The status a workload phase leaves: on failure the failing step's condition and `Ready` False;
/// the conditions this run did not reach as they were; `observedGeneration` only on success; the
/// datastore phase's record.
pub fn workload_status(
    tcp: &TenantControlPlane,
    previous: &[Condition],
    mut conditions: Conditions<'_>,
    mut owned: Owned,
    result: Result<(), &Error>,
    record: StorageRecord,
) -> Owned {
    if let Err(err) = result {
        let phase = err.phase().unwrap_or(Phase::Service);
        let type_ = match phase {
            Phase::Certificates => Some(CERTIFICATES_READY),
            Phase::Authentication => Some(AUTHENTICATION_CONFIGURED),
            Phase::Egress => Some(EGRESS_RESTRICTED),
            Phase::Deployment => Some(DEPLOYMENT_AVAILABLE),
            _ => None,
        };
        if let Some(type_) = type_ {
            conditions.set(type_, Some(false), err.reason(), err.to_string());
        }
        conditions.set(
            READY,
            Some(false),
            err.reason(),
            format!("the {phase} phase failed: {err}"),
        );
    }
    stalled_after(
        &mut conditions,
        result.err(),
        result.err().and_then(Error::phase).unwrap_or(Phase::Service),
    );
    // Keep the conditions this run did not reach.
    let mut merged: Map<String, Condition> = previous
        .iter()
        .filter(|c| OWNED.contains(&c.type_.as_str()))
        .map(|c| (c.type_.clone(), c.clone()))
        .collect();
    for c in conditions.into_vec() {
        merged.insert(c.type_.clone(), c);
    }
    // Without `spec.authentication` there is nothing to report.
    if authentication(tcp).is_none() {
        merged.remove(AUTHENTICATION_CONFIGURED);
    }
    owned.conditions = merged.into_values().collect();
    if result.is_ok() {
        owned.observed_generation = tcp.metadata.generation;
    }
    with_storage(owned, record)
}

/// `Stalled` after a run, unless a step set it (a rollout that cannot go on): True for a permanent error,
/// False for a transient one (retried with backoff) or none.
fn stalled_after(conditions: &mut Conditions<'_>, err: Option<&Error>, phase: Phase) {
    if conditions.get(STALLED).is_some() {
        return;
    }
    match err {
        Some(err) if !err.is_transient() => conditions.set(
            STALLED,
            Some(true),
            err.reason(),
            format!("the {phase} phase cannot succeed until something changes: {err}"),
        ),
        Some(err) => conditions.set(
            STALLED,
            Some(false),
            "Retrying",
            format!("{} is retried with backoff", err.reason()),
        ),
        None => conditions.set(STALLED, Some(false), "Progressing", "no permanent failure"),
    }
}

/// Why a Deployment's rollout cannot go on by itself: a pod template the pods cannot be made from
/// (the pod-less runner's `ImageNotBuilt` and `UnsupportedPodTemplate`), or a rollout past its
/// progress deadline. `(reason, message)`.
pub fn rollout_stall(applied: &Deployment) -> Option<(String, String)> {
    const PERMANENT: [&str; 2] = ["ImageNotBuilt", "UnsupportedPodTemplate"];
    let conditions = applied.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let reason = c.reason.as_deref().unwrap_or_default();
        let stalled = (c.type_ == "ReplicaFailure" && c.status == "True" && PERMANENT.contains(&reason))
            || (c.type_ == "Progressing" && c.status == "False" && reason == "ProgressDeadlineExceeded");
        stalled.then(|| (reason.to_string(), c.message.clone().unwrap_or_default()))
    })
}

/// `CertificatesReady` and `KubeconfigsReady` after the PKI step: which Secrets were generated, or
/// the message of the run that generated them when this one generated none ("reused" alone is no
/// news, and would cost a status write).
pub fn pki_conditions(conditions: &mut Conditions<'_>, tcp: &TenantControlPlane, pki: &Pki) {
    let generated = |names: &[String]| {
        let g: Vec<&String> = pki.generated.iter().filter(|n| names.contains(n)).collect();
        if g.is_empty() {
            "reused".to_string()
        } else {
            format!(
                "generated {}",
                g.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )
        }
    };
    let cert_names: Vec<String> = pki_secret_names(tcp).into_iter().take(6).collect();
    let kubeconfig_names: Vec<String> = pki_secret_names(tcp).into_iter().skip(6).collect();
    let steady = |type_: &str, names: &[String], fresh: String| {
        let nothing_new = !pki.generated.iter().any(|n| names.contains(n));
        tcp.status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == type_ && c.status == "True")
            })
            .filter(|_| nothing_new)
            .map(|c| c.message.clone())
            .unwrap_or(fresh)
    };
    conditions.set(
        CERTIFICATES_READY,
        Some(true),
        "CertificatesReady",
        steady(
            CERTIFICATES_READY,
            &cert_names,
            format!("6 certificate Secrets are valid ({})", generated(&cert_names)),
        ),
    );
    conditions.set(
        KUBECONFIGS_READY,
        Some(true),
        "KubeconfigsReady",
        steady(
            KUBECONFIGS_READY,
            &kubeconfig_names,
            format!(
                "admin, controller-manager and scheduler kubeconfigs are valid ({})",
                generated(&kubeconfig_names)
            ),
        ),
    );
}

/// `status.kubeconfig` and `status.certificates` from the PKI Secrets.
pub fn pki_status(owned: &mut Owned, tcp: &TenantControlPlane, pki: &Pki, now: Timestamp) {
    let previous_kc = owned.kubeconfig.clone().unwrap_or_default();
    let status_of = |name: String, previous: Option<&SecretStatus>| {
        pki.get(&name).map(|s| secret_status(s, previous, now))
    };
    owned.kubeconfig = Some(KubeconfigsStatus {
        admin: status_of(admin_kubeconfig_name(tcp), previous_kc.admin.as_ref()),
        controller_manager: status_of(
            controller_manager_kubeconfig_name(tcp),
            previous_kc.controller_manager.as_ref(),
        ),
        scheduler: status_of(scheduler_kubeconfig_name(tcp), previous_kc.scheduler.as_ref()),
    });
    let previous_certs = owned.certificates.clone().unwrap_or_default();
    owned.certificates = Some(CertificatesStatus {
        ca: status_of(ca_secret_name(tcp), previous_certs.ca.as_ref()),
        api_server: status_of(apiserver_secret_name(tcp), previous_certs.api_server.as_ref()),
        api_server_kubelet_client: status_of(
            kubelet_client_secret_name(tcp),
            previous_certs.api_server_kubelet_client.as_ref(),
        ),
        front_proxy_ca: status_of(
            front_proxy_ca_secret_name(tcp),
            previous_certs.front_proxy_ca.as_ref(),
        ),
        front_proxy_client: status_of(
            front_proxy_client_secret_name(tcp),
            previous_certs.front_proxy_client.as_ref(),
        ),
        sa: status_of(sa_secret_name(tcp), previous_certs.sa.as_ref()),
    });
}

/// `KubernetesVersionAccepted`: False with the refusal, else True for the version that runs.
pub fn version_condition(
    conditions: &mut Conditions<'_>,
    running: &str,
    refused: Option<&(&'static str, String)>,
) {
    match refused {
        Some((reason, message)) => conditions.set(VERSION_ACCEPTED, Some(false), reason, message.clone()),
        None => conditions.set(
            VERSION_ACCEPTED,
            Some(true),
            "VersionAccepted",
            format!("{running} is the desired version"),
        ),
    }
}

/// `ExtraArgsApplied`: False naming the user flags that lost to managed ones, and the `--oidc-*` flags
/// (by name) that structured authentication dropped.
pub fn extra_args_condition(
    conditions: &mut Conditions<'_>,
    apiserver_args: &Args,
    konnectivity_args: Option<&Args>,
    oidc_dropped: &[String],
) {
    let mut dropped = Vec::new();
    if !apiserver_args.dropped.is_empty() {
        dropped.push(format!(
            "extraArgs.apiServer flags dropped because Tenantplane manages them: {}",
            apiserver_args.dropped.join(" ")
        ));
    }
    if !oidc_dropped.is_empty() {
        dropped.push(format!(
            "extraArgs.apiServer flags dropped because spec.authentication sets --authentication-config: {}",
            oidc_dropped.join(" ")
        ));
    }
    if let Some(args) = konnectivity_args.filter(|a| !a.dropped.is_empty()) {
        dropped.push(format!(
            "addons.konnectivity.server.extraArgs flags dropped because Tenantplane manages them: {}",
            args.dropped.join(" ")
        ));
    }
    if dropped.is_empty() {
        conditions.set(
            EXTRA_ARGS_APPLIED,
            Some(true),
            "ExtraArgsApplied",
            "every extraArgs.apiServer flag is applied",
        );
    } else {
        let only_oidc =
            apiserver_args.dropped.is_empty() && konnectivity_args.is_none_or(|a| a.dropped.is_empty());
        let reason = if only_oidc {
            OIDC_FLAGS_DROPPED
        } else {
            "ManagedFlagsWin"
        };
        conditions.set(EXTRA_ARGS_APPLIED, Some(false), reason, dropped.join("; "));
    }
}

/// `AuthenticationConfigured` False: an authenticator was left out (its issuer is a service-account issuer).
pub const SERVICE_ACCOUNT_ISSUER_CONFLICT: &str = "ServiceAccountIssuerConflict";
/// `AuthenticationConfigured` False: the user's `--oidc-*` flags were dropped.
pub const OIDC_FLAGS_DROPPED: &str = "OidcFlagsDropped";

/// `AuthenticationConfigured` for what [`authentication_config`] built: True (`Rendered`) with the
/// number of authenticators, else False naming the issuers left out (`ServiceAccountIssuerConflict`)
/// and the dropped `--oidc-*` flags (`OidcFlagsDropped`). Returns `(reason, message)` of a False
/// condition the TenantControlPlane does not hold yet, for a Warning Event.
pub fn authentication_condition(
    conditions: &mut Conditions<'_>,
    tcp: &TenantControlPlane,
    built: &BuiltAuthentication,
) -> Option<(&'static str, String)> {
    let name = built.config_map.name_any();
    let rendered = format!(
        "{} JWT authenticator(s) rendered into ConfigMap {name} (kube-apiserver --authentication-config)",
        built.authenticators
    );
    let mut problems = Vec::new();
    if !built.conflicts.is_empty() {
        problems.push(format!(
            "left out the JWT authenticator(s) whose issuer URL equals the service-account issuer (kube-apiserver refuses that): {}",
            built.conflicts.join(", ")
        ));
    }
    if !built.oidc_dropped.is_empty() {
        problems.push(format!(
            "dropped extraArgs.apiServer {} (kube-apiserver refuses --oidc-* flags with --authentication-config)",
            built.oidc_dropped.join(", ")
        ));
    }
    let reason = match (built.conflicts.is_empty(), built.oidc_dropped.is_empty()) {
        (true, true) => {
            conditions.set(AUTHENTICATION_CONFIGURED, Some(true), "Rendered", rendered);
            return None;
        }
        (false, _) => SERVICE_ACCOUNT_ISSUER_CONFLICT,
        (true, false) => OIDC_FLAGS_DROPPED,
    };
    let message = format!("{rendered}; {}", problems.join("; "));
    let known = tcp.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == AUTHENTICATION_CONFIGURED
                && c.status == "False"
                && c.reason == reason
                && c.message == message
        })
    });
    conditions.set(AUTHENTICATION_CONFIGURED, Some(false), reason, message.clone());
    (!known).then_some((reason, message))
}

/// `status.kubernetesResources` from the applied Deployment; the summary's `lastUpdate` moves only
/// when something else in it changed.
pub fn kubernetes_resources(
    previous: &KubernetesResourcesStatus,
    applied: &Deployment,
    running: &str,
    state: KubernetesVersionState,
    now: Timestamp,
) -> KubernetesResourcesStatus {
    let installed = previous.version.as_ref().and_then(|v| v.version.clone());
    let version = KubernetesVersionStatus {
        version: if matches!(
            state,
            KubernetesVersionState::Ready | KubernetesVersionState::Sleeping
        ) {
            Some(running.to_string())
        } else {
            installed
        },
        status: Some(state),
    };
    let mut summary = deployment_summary(applied, &now.to_string());
    if let Some(prev) = &previous.deployment {
        let same = DeploymentStatusSummary {
            last_update: prev.last_update.clone(),
            ..summary.clone()
        };
        if &same == prev {
            summary = same;
        }
    }
    KubernetesResourcesStatus {
        version: Some(version),
        deployment: Some(summary),
    }
}

/// What the tenant's `/readyz` answered the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readyz {
    /// HTTP 2xx.
    Ok,
    /// No answer (no route from the controller, TLS, timeout).
    Unreachable,
    /// Another HTTP status.
    NotReady(u16),
}

/// `DeploymentAvailable` and `Ready` of a rolled-out Deployment, from its `/readyz`.
pub fn available_conditions(
    conditions: &mut Conditions<'_>,
    applied: &Deployment,
    replicas: i32,
    running: &str,
    endpoint: &str,
    readyz: Readyz,
) {
    conditions.set(
        DEPLOYMENT_AVAILABLE,
        Some(true),
        "RolloutComplete",
        format!(
            "Deployment {} has {replicas} updated, ready replicas",
            applied.name_any()
        ),
    );
    match readyz {
        Readyz::Ok => conditions.set(
            READY,
            Some(true),
            "Ready",
            format!("{running} serves at {endpoint}: /readyz answered ok"),
        ),
        Readyz::Unreachable => conditions.set(
            READY,
            Some(true),
            "Ready",
            format!(
                "{running} is rolled out at {endpoint}; its /readyz is unreachable from the controller, so readiness rests on the pods' /readyz probes"
            ),
        ),
        Readyz::NotReady(code) => conditions.set(
            READY,
            Some(false),
            "ApiNotReady",
            format!("{running} is rolled out at {endpoint} but its /readyz answered HTTP {code}"),
        ),
    }
}

/// `DeploymentAvailable` and `Ready` of a Deployment that is not rolled out: asleep (zero replicas),
/// or the counts and why pods cannot be created.
pub fn rollout_conditions(
    conditions: &mut Conditions<'_>,
    applied: &Deployment,
    replicas: i32,
    state: KubernetesVersionState,
) {
    if replicas == 0 {
        conditions.set(
            DEPLOYMENT_AVAILABLE,
            Some(false),
            "Sleeping",
            "spec.controlPlane.deployment.replicas is 0",
        );
        conditions.set(
            READY,
            Some(false),
            "Sleeping",
            "the control plane is scaled to zero",
        );
        return;
    }
    let s = applied.status.clone().unwrap_or_default();
    let mut message = format!(
        "Deployment {}: {}/{replicas} ready, {}/{replicas} updated, {}/{replicas} available",
        applied.name_any(),
        s.ready_replicas.unwrap_or(0),
        s.updated_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    );
    // Why pods cannot be created (e.g. the runner has no binary for an image) belongs in the condition.
    if let Some(failure) = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
    {
        message.push_str(&format!(
            "; {}: {}",
            failure.reason.as_deref().unwrap_or("ReplicaFailure"),
            failure.message.as_deref().unwrap_or_default()
        ));
    }
    conditions.set(
        DEPLOYMENT_AVAILABLE,
        Some(false),
        "RolloutInProgress",
        message.clone(),
    );
    conditions.set(READY, Some(false), &format!("{state:?}"), message);
    if let Some((reason, message)) = rollout_stall(applied) {
        conditions.set(STALLED, Some(true), &reason, message);
    }
}

fn now_rfc3339(now: Timestamp) -> String {
    now.to_string()
}

/// A `SecretStatus` for an applied Secret; `lastUpdate` moves only when the checksum changes, so an
/// unchanged reconcile writes an identical status (and triggers no watch event).
pub fn secret_status(secret: &Secret, previous: Option<&SecretStatus>, now: Timestamp) -> SecretStatus {
    let checksum = secret.annotations().get(CHECKSUM_ANNOTATION).cloned();
    let last_update = match previous {
        Some(p) if p.checksum == checksum && p.last_update.is_some() => p.last_update.clone(),
        _ => Some(now_rfc3339(now)),
    };
    SecretStatus {
        secret_name: secret.metadata.name.clone(),
        checksum,
        last_update,
    }
}

/// A `SetupStatus`; `lastUpdate` moves only when something else changed.
pub fn setup_status(
    space: &TenantSpace,
    checksum: Option<String>,
    previous: Option<&SetupStatus>,
    now: Timestamp,
) -> SetupStatus {
    let mut setup = SetupStatus {
        schema: Some(space.schema().to_string()),
        user: Some(space.user().to_string()),
        last_update: None,
        checksum,
    };
    setup.last_update = match previous {
        Some(p) if p.schema == setup.schema && p.user == setup.user && p.checksum == setup.checksum => {
            p.last_update.clone().or_else(|| Some(now_rfc3339(now)))
        }
        _ => Some(now_rfc3339(now)),
    };
    setup
}

/// Storage status with everything recorded so far; the datastore phase fills it step by step.
pub fn initial_storage(tcp: &TenantControlPlane) -> StorageStatus {
    tcp.status
        .as_ref()
        .and_then(|s| s.storage.clone())
        .unwrap_or_default()
}

/// `DataStoreReady` (and, for NATS, `DataStoreExclusive`) once the primary is provisioned.
pub fn primary_conditions(
    conditions: &mut Conditions<'_>,
    primary: &str,
    driver: Driver,
    space: &TenantSpace,
) {
    conditions.set(
        DATASTORE_READY,
        Some(true),
        "DataStoreReady",
        format!(
            "schema {} and user {} are provisioned on DataStore {primary}",
            space.schema(),
            space.user()
        ),
    );
    if driver == Driver::Nats {
        conditions.set(
            DATASTORE_EXCLUSIVE,
            Some(true),
            "DataStoreExclusive",
            format!("NATS DataStore {primary} serves this TenantControlPlane only"),
        );
    }
}

/// `OverridesApplied` once every override is provisioned (none when the spec has none).
pub fn overrides_condition(conditions: &mut Conditions<'_>, spec_overrides: &[DataStoreOverride]) {
    if spec_overrides.is_empty() {
        return;
    }
    conditions.set(
        OVERRIDES_APPLIED,
        Some(true),
        "OverridesApplied",
        format!(
            "{} override(s) provisioned: {}",
            spec_overrides.len(),
            spec_overrides
                .iter()
                .map(|o| format!("{}→{}", o.resource, o.data_store))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
}

/// `status.storage` for the provisioned primary: driver, DataStore, setup and the Secrets.
pub fn record_primary(
    storage: &mut StorageStatus,
    (data_store, driver): (&str, Driver),
    space: &TenantSpace,
    config: &Secret,
    certificate: Option<&Secret>,
    now: Timestamp,
) {
    let checksum = config.annotations().get(CHECKSUM_ANNOTATION).cloned();
    storage.driver = Some(driver.to_string());
    storage.data_store_name = Some(data_store.to_string());
    storage.setup = Some(setup_status(space, checksum, storage.setup.as_ref(), now));
    storage.config = Some(secret_status(config, storage.config.as_ref(), now));
    storage.certificate = certificate.map(|c| secret_status(c, storage.certificate.as_ref(), now));
}

/// `status.storage.overrides` with the entry of `resource`, provisioned on `data_store`, replaced.
pub fn record_override(
    storage: &mut StorageStatus,
    resource: &str,
    data_store: &str,
    space: &TenantSpace,
    now: Timestamp,
) {
    let previous = storage.overrides.iter().find(|r| r.resource == resource);
    let entry = OverrideStorageStatus {
        resource: resource.to_string(),
        data_store_name: Some(data_store.to_string()),
        setup: Some(setup_status(
            space,
            None,
            previous.and_then(|p| p.setup.as_ref()),
            now,
        )),
    };
    storage.overrides.retain(|r| r.resource != resource);
    storage.overrides.push(entry);
}

/// `status.storage.overrides` in spec order.
pub fn sort_overrides(storage: &mut StorageStatus, spec_overrides: &[DataStoreOverride]) {
    storage
        .overrides
        .sort_by_key(|r| spec_overrides.iter().position(|s| s.resource == r.resource));
}

/// What the Deployment needs of the datastore phase's outcome.
pub fn storage_view(outcome: &StorageOutcome) -> StorageView {
    let checksum = |s: &Secret| {
        s.annotations()
            .get(CHECKSUM_ANNOTATION)
            .cloned()
            .unwrap_or_default()
    };
    StorageView {
        driver: outcome.driver,
        schema: outcome.schema.clone(),
        endpoints: outcome.endpoints.clone(),
        overrides: outcome.overrides.clone(),
        config_checksum: checksum(&outcome.config),
        certificate: outcome.certificate.as_ref().map(|c| {
            (
                checksum(c),
                c.data.as_ref().is_some_and(|d| d.contains_key("server.key")),
            )
        }),
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;

//! The TenantControlPlane **workload phase**, after the datastore phase: the Service, the PKI and
//! kubeconfig Secrets and the Deployment (built by [`build`](super::build)), then the status (by
//! [`status`](super::status)): `CertificatesReady`, `KubeconfigsReady`, `DeploymentAvailable`,
//! `KubernetesVersionAccepted`, `ExtraArgsApplied`, `Ready`.

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use kube::ResourceExt as _;
use serde::Serialize;

use super::{
    StorageOutcome, StorageRecord,
    build::{self, StorageView},
    status::{Owned, conditions::*, current, key, with_storage, write},
};
use crate::{
    controller::{
        Context, Error, apply,
        build::{CHECKSUM_ANNOTATION, Conditions, untampered},
        cache::{self, Lookup},
        fetch,
    },
    k8s::crd::{
        CertificatesStatus, DeploymentStatusSummary, KubeconfigsStatus, KubernetesResourcesStatus,
        KubernetesVersionState, KubernetesVersionStatus, SecretStatus, TenantControlPlane,
    },
};

/// Runs the phase and records its status, also on failure.
pub async fn workload_phase(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &StorageOutcome,
    record: StorageRecord,
) -> Result<(), Error> {
    let now = Timestamp::now();
    let previous = tcp
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut conditions = Conditions::new(&previous, tcp.metadata.generation, now);
    let mut owned = current(tcp);
    let mut phase = "service";
    let result = run(tcp, ctx, storage, &mut conditions, &mut owned, &mut phase, now).await;
    if let Err(err) = &result {
        ctx.metrics.phase_failed(phase, err.reason());
        let type_ = match phase {
            "certificates" => Some(CERTIFICATES_READY),
            "deployment" => Some(DEPLOYMENT_AVAILABLE),
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
    // Keep the conditions this run did not reach.
    let set: Vec<Condition> = conditions.into_vec();
    let mut merged: BTreeMap<String, Condition> = previous
        .iter()
        .filter(|c| OWNED.contains(&c.type_.as_str()))
        .map(|c| (c.type_.clone(), c.clone()))
        .collect();
    for c in set {
        merged.insert(c.type_.clone(), c);
    }
    owned.conditions = merged.into_values().collect();
    if result.is_ok() {
        owned.observed_generation = tcp.metadata.generation;
    }
    let owned = with_storage(owned, record);
    let started = Instant::now();
    let written = write(ctx, tcp, owned.clone()).await;
    ctx.metrics.phase("status", started.elapsed().as_secs_f64());
    if let Some(state) = owned
        .kubernetes_resources
        .as_ref()
        .and_then(|k| k.version.as_ref())
        .and_then(|v| v.status)
    {
        ctx.metrics.set_status(&key(tcp), Some(&format!("{state:?}")));
    }
    result.and(written)
}

#[allow(clippy::too_many_arguments)]
async fn run(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &StorageOutcome,
    conditions: &mut Conditions<'_>,
    owned: &mut Owned,
    phase: &mut &'static str,
    now: Timestamp,
) -> Result<(), Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let settings = &ctx.settings.workload;

    // Service first: its cluster IP goes into the apiserver certificate.
    *phase = "service";
    let started = Instant::now();
    let desired_service = build::service(tcp)?;
    let cached = ctx.caches.service(&namespace, &desired_service.name_any()).await;
    let service = apply_unless_current(ctx, "Service", &key(tcp), &desired_service, cached, |s| {
        s.metadata.resource_version.clone()
    })
    .await?;
    ctx.metrics.phase("service", started.elapsed().as_secs_f64());
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .filter(|ip| ip != "None" && !ip.is_empty());
    owned.control_plane_endpoint = build::control_plane_endpoint(tcp, Some(&service));

    // Certificates and kubeconfigs.
    *phase = "certificates";
    let started = Instant::now();
    let pki = write_pki(tcp, ctx, &namespace, cluster_ip.as_deref(), now).await?;
    ctx.metrics.phase("certificates", started.elapsed().as_secs_f64());
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
    let cert_names: Vec<String> = build::pki_secret_names(tcp).into_iter().take(6).collect();
    let kubeconfig_names: Vec<String> = build::pki_secret_names(tcp).into_iter().skip(6).collect();
    // A run that generated none of them keeps the message of the run that did: "reused" alone is no
    // news, and would cost a status write.
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
    let previous_kc = owned.kubeconfig.clone().unwrap_or_default();
    let status_of = |name: String, previous: Option<&SecretStatus>| {
        pki.get(&name).map(|s| build::secret_status(s, previous, now))
    };
    owned.kubeconfig = Some(KubeconfigsStatus {
        admin: status_of(build::admin_kubeconfig_name(tcp), previous_kc.admin.as_ref()),
        controller_manager: status_of(
            build::controller_manager_kubeconfig_name(tcp),
            previous_kc.controller_manager.as_ref(),
        ),
        scheduler: status_of(
            build::scheduler_kubeconfig_name(tcp),
            previous_kc.scheduler.as_ref(),
        ),
    });
    let previous_certs = owned.certificates.clone().unwrap_or_default();
    owned.certificates = Some(CertificatesStatus {
        ca: status_of(build::ca_secret_name(tcp), previous_certs.ca.as_ref()),
        api_server: status_of(
            build::apiserver_secret_name(tcp),
            previous_certs.api_server.as_ref(),
        ),
        api_server_kubelet_client: status_of(
            build::kubelet_client_secret_name(tcp),
            previous_certs.api_server_kubelet_client.as_ref(),
        ),
        front_proxy_ca: status_of(
            build::front_proxy_ca_secret_name(tcp),
            previous_certs.front_proxy_ca.as_ref(),
        ),
        front_proxy_client: status_of(
            build::front_proxy_client_secret_name(tcp),
            previous_certs.front_proxy_client.as_ref(),
        ),
        sa: status_of(build::sa_secret_name(tcp), previous_certs.sa.as_ref()),
    });

    // Deployment.
    *phase = "deployment";
    let started = Instant::now();
    let previous_resources = owned.kubernetes_resources.clone().unwrap_or_default();
    let installed = previous_resources
        .version
        .as_ref()
        .and_then(|v| v.version.clone());
    let (running, refused) = build::version_to_run(&tcp.spec.kubernetes.version, installed.as_deref());
    match &refused {
        Some((reason, message)) => {
            conditions.set(VERSION_ACCEPTED, Some(false), reason, message.clone());
            ctx.warn(tcp, reason, message).await;
        }
        None => conditions.set(
            VERSION_ACCEPTED,
            Some(true),
            "VersionAccepted",
            format!("{running} is the desired version"),
        ),
    }
    let view = StorageView {
        driver: storage.driver,
        schema: storage.schema.clone(),
        endpoints: storage.endpoints.clone(),
        overrides: storage.overrides.clone(),
        config_checksum: storage
            .config
            .annotations()
            .get(CHECKSUM_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        certificate: storage.certificate.as_ref().map(|c| {
            (
                c.annotations()
                    .get(CHECKSUM_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
                c.data.as_ref().is_some_and(|d| d.contains_key("server.key")),
            )
        }),
    };
    let built = build::deployment(tcp, &view, &pki, &running, settings)?;
    if built.apiserver_args.dropped.is_empty() {
        conditions.set(
            EXTRA_ARGS_APPLIED,
            Some(true),
            "ExtraArgsApplied",
            "every extraArgs.apiServer flag is applied",
        );
    } else {
        conditions.set(
            EXTRA_ARGS_APPLIED,
            Some(false),
            "ManagedFlagsWin",
            format!(
                "extraArgs.apiServer flags dropped because Tenantplane manages them: {}",
                built.apiserver_args.dropped.join(" ")
            ),
        );
    }
    let cached = ctx
        .caches
        .deployment(&namespace, &built.deployment.name_any())
        .await;
    let applied: Deployment =
        apply_unless_current(ctx, "Deployment", &key(tcp), &built.deployment, cached, |d| {
            d.metadata.generation.map(|g| g.to_string())
        })
        .await?;
    ctx.metrics.phase("deployment", started.elapsed().as_secs_f64());

    // Status from the applied Deployment.
    *phase = "status";
    let (state, available) = build::version_state(&applied, &running, installed.as_deref());
    let version = KubernetesVersionStatus {
        version: if matches!(
            state,
            KubernetesVersionState::Ready | KubernetesVersionState::Sleeping
        ) {
            Some(running.clone())
        } else {
            installed.clone()
        },
        status: Some(state),
    };
    let mut summary = build::deployment_summary(&applied, &now.to_string());
    if let Some(prev) = &previous_resources.deployment {
        let same = DeploymentStatusSummary {
            last_update: prev.last_update.clone(),
            ..summary.clone()
        };
        if &same == prev {
            summary = same;
        }
    }
    owned.kubernetes_resources = Some(KubernetesResourcesStatus {
        version: Some(version),
        deployment: Some(summary),
    });
    let replicas = build::replicas(tcp);
    if available {
        conditions.set(
            DEPLOYMENT_AVAILABLE,
            Some(true),
            "RolloutComplete",
            format!(
                "Deployment {} has {replicas} updated, ready replicas",
                applied.name_any()
            ),
        );
        let endpoint = owned.control_plane_endpoint.clone().unwrap_or_default();
        let ca = pki
            .get(&build::ca_secret_name(tcp))
            .and_then(|s| s.data.as_ref()?.get("ca.crt").cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        match readyz(&endpoint, &ca).await {
            Probe::Ok => conditions.set(
                READY,
                Some(true),
                "Ready",
                format!("{running} serves at {endpoint}: /readyz answered ok"),
            ),
            Probe::Unreachable => conditions.set(
                READY,
                Some(true),
                "Ready",
                format!(
                    "{running} is rolled out at {endpoint}; its /readyz is unreachable from the controller, so readiness rests on the pods' /readyz probes"
                ),
            ),
            Probe::NotReady(code) => conditions.set(
                READY,
                Some(false),
                "ApiNotReady",
                format!("{running} is rolled out at {endpoint} but its /readyz answered HTTP {code}"),
            ),
        }
    } else if replicas == 0 {
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
    } else {
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
    }
    Ok(())
}

/// Reads the PKI and kubeconfig Secrets, builds them, and writes the new and changed ones at once:
/// creates for the absent, forced applies for the others. The Secrets come from the cache; when there
/// is none, or a create finds that the cache lagged (the Secret exists), they are read live and the
/// build runs again, so a lagging cache can never replace a CA.
pub async fn write_pki(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
    cluster_ip: Option<&str>,
    now: Timestamp,
) -> Result<build::Pki, Error> {
    let names = build::pki_secret_names(tcp);
    let mut live = false;
    loop {
        let mut existing = BTreeMap::new();
        if !live {
            for name in &names {
                match ctx.caches.secret(namespace, name).await {
                    Lookup::Found(secret) => {
                        existing.insert(name.clone(), (*secret).clone());
                    }
                    Lookup::Missing => {}
                    Lookup::Unknown => {
                        live = true;
                        break;
                    }
                }
            }
        }
        if live {
            // One round trip for the nine.
            let found = futures_util::future::try_join_all(
                names.iter().map(|name| fetch::secret(ctx, namespace, name)),
            )
            .await?;
            existing = names
                .iter()
                .cloned()
                .zip(found)
                .filter_map(|(name, secret)| Some((name, secret?)))
                .collect();
        }
        let pki = build::pki(
            tcp,
            &existing,
            cluster_ip,
            &ctx.settings.workload,
            now.as_second(),
        )?;
        let changed = pki.secrets.iter().filter(|secret| {
            let name = secret.name_any();
            let unchanged = !pki.generated.contains(&name)
                && existing.get(&name).is_some_and(|e| {
                    untampered(e)
                        && e.annotations() == secret.annotations()
                        && e.labels() == secret.labels()
                        && e.owner_references() == secret.owner_references()
                });
            !unchanged
        });
        let written = futures_util::future::try_join_all(changed.map(|secret| async {
            if existing.contains_key(&secret.name_any()) {
                apply::secret(ctx, secret).await.map(Some)
            } else {
                apply::create_secret(ctx, secret).await
            }
        }))
        .await?;
        if written.iter().all(Option::is_some) {
            return Ok(pki);
        }
        if live {
            return Err(Error::NotReady {
                reason: "SecretCreatedConcurrently",
                message: "a PKI Secret appeared while it was being created; the reconcile is retried".into(),
            });
        }
        live = true;
    }
}

/// Applies `desired`, unless this controller applied the same desired object less than the resync
/// interval ago and the cached object is still what that apply left (`version`: a Deployment's
/// generation, a Service's resourceVersion). Returns the object as the API server has it.
async fn apply_unless_current<K>(
    ctx: &Context,
    kind: &'static str,
    key: &str,
    desired: &K,
    cached: Lookup<K>,
    version: fn(&K) -> Option<String>,
) -> Result<K, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let hash = cache::desired_hash(desired);
    if let (Lookup::Found(current), Some(last)) = (&cached, ctx.caches.applied(kind, key))
        && last.desired == hash
        && last.at.elapsed() < ctx.settings.resync
        && version(current).as_ref() == Some(&last.version)
    {
        return Ok((**current).clone());
    }
    let applied = apply::object(&ctx.client, desired).await?;
    ctx.caches.record_applied(
        kind,
        key,
        version(&applied).map(|version| cache::Applied {
            desired: hash,
            version,
            at: Instant::now(),
        }),
    );
    Ok(applied)
}

enum Probe {
    Ok,
    Unreachable,
    NotReady(u16),
}

/// `GET https://<endpoint>/readyz` trusting only the tenant CA (anonymous: `/readyz` is public by
/// default), within 2 s.
async fn readyz(endpoint: &str, ca_pem: &str) -> Probe {
    if endpoint.is_empty() {
        return Probe::Unreachable;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Ok(ca) = reqwest::Certificate::from_pem(ca_pem.as_bytes()) else {
        return Probe::Unreachable;
    };
    let Ok(client) = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(std::time::Duration::from_secs(2))
        .build()
    else {
        return Probe::Unreachable;
    };
    match client.get(format!("https://{endpoint}/readyz")).send().await {
        Ok(r) if r.status().is_success() => Probe::Ok,
        Ok(r) => Probe::NotReady(r.status().as_u16()),
        Err(err) => {
            tracing::debug!(endpoint, "tenant /readyz unreachable: {err}");
            Probe::Unreachable
        }
    }
}

//! The Deployment `<tcp>`: kube-apiserver, kube-controller-manager, kube-scheduler and, for SQL and
//! NATS, kine; typed `k8s-openapi` objects, so a misspelt field does not compile.

use k8s_openapi::{
    api::{
        apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment},
        core::v1::{
            Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar, HTTPGetAction, KeyToPath,
            PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, SecretEnvSource, SecretProjection,
            SecretVolumeSource, Volume, VolumeMount, VolumeProjection,
        },
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};

use super::*;

/// `<registry>/<image>:<version><tagSuffix>` for the three components.
pub fn images(tcp: &TenantControlPlane, version: &str) -> [String; 3] {
    let rs = tcp
        .spec
        .control_plane
        .deployment
        .as_ref()
        .and_then(|d| d.registry_settings.clone());
    let registry = rs
        .as_ref()
        .and_then(|r| r.registry.clone())
        .unwrap_or_else(|| "registry.k8s.io".into());
    let suffix = rs.as_ref().and_then(|r| r.tag_suffix.clone()).unwrap_or_default();
    let image = |name: Option<String>, default: &str| {
        format!(
            "{registry}/{}:{version}{suffix}",
            name.unwrap_or_else(|| default.to_string())
        )
    };
    [
        image(
            rs.as_ref().and_then(|r| r.api_server_image.clone()),
            "kube-apiserver",
        ),
        image(
            rs.as_ref().and_then(|r| r.controller_manager_image.clone()),
            "kube-controller-manager",
        ),
        image(
            rs.as_ref().and_then(|r| r.scheduler_image.clone()),
            "kube-scheduler",
        ),
    ]
}

/// Desired replicas (2 when the spec has no deployment section, as the CRD default).
pub fn replicas(tcp: &TenantControlPlane) -> i32 {
    tcp.spec
        .control_plane
        .deployment
        .as_ref()
        .map(|d| d.replicas.unwrap_or(2))
        .unwrap_or(2)
}

/// The pod template's checksum: over every PKI Secret's checksum and the datastore Secrets'. Not over
/// the authentication ConfigMap: kube-apiserver reloads that file itself.
pub fn pod_checksum(pki: &Pki, storage: &StorageView) -> String {
    let mut parts: Vec<String> = pki
        .secrets
        .iter()
        .map(|s| {
            s.annotations()
                .get(CHECKSUM_ANNOTATION)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    parts.push(storage.config_checksum.clone());
    parts.push(
        storage
            .certificate
            .as_ref()
            .map(|c| c.0.clone())
            .unwrap_or_default(),
    );
    sha(&parts.iter().map(String::as_str).collect::<Vec<_>>())
}

/// An HTTPS GET probe of `path` on `port` (upstream's timings).
fn probe(path: &str, port: i32) -> Option<Probe> {
    Some(Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        initial_delay_seconds: Some(0),
        timeout_seconds: Some(1),
        period_seconds: Some(10),
        success_threshold: Some(1),
        failure_threshold: Some(3),
        ..Default::default()
    })
}

fn strings<S: ToString>(items: &[S]) -> Option<Vec<String>> {
    Some(items.iter().map(ToString::to_string).collect())
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// A mount of one key of a Secret volume as a file.
fn file_mount(name: &str, path: &str, sub_path: &str) -> VolumeMount {
    VolumeMount {
        sub_path: Some(sub_path.into()),
        ..mount(name, path, true)
    }
}

fn tcp_port(name: &str, port: i32) -> Option<Vec<ContainerPort>> {
    Some(vec![ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }])
}

fn secret_volume(name: &str, secret: String) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(420),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn empty_dir(name: &str, medium: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: medium.map(Into::into),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The projected `etc-kubernetes-pki` volume: every certificate Secret and, for etcd, the datastore
/// certificate under `etcd/`.
fn pki_volume(tcp: &TenantControlPlane, etcd: bool) -> Volume {
    let items = |secret: String, keys: &[&str], prefix: &str| VolumeProjection {
        secret: Some(SecretProjection {
            name: secret,
            items: Some(
                keys.iter()
                    .map(|k| KeyToPath {
                        key: k.to_string(),
                        path: format!("{prefix}{k}"),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut sources = vec![
        items(ca_secret_name(tcp), &["ca.crt", "ca.key"], ""),
        items(
            apiserver_secret_name(tcp),
            &["apiserver.crt", "apiserver.key"],
            "",
        ),
        items(
            kubelet_client_secret_name(tcp),
            &["apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"],
            "",
        ),
        items(
            front_proxy_ca_secret_name(tcp),
            &["front-proxy-ca.crt", "front-proxy-ca.key"],
            "",
        ),
        items(
            front_proxy_client_secret_name(tcp),
            &["front-proxy-client.crt", "front-proxy-client.key"],
            "",
        ),
        items(sa_secret_name(tcp), &["sa.pub", "sa.key"], ""),
    ];
    if etcd {
        sources.push(items(
            certificate_secret_name(tcp),
            &["ca.crt", "server.crt", "server.key"],
            "etcd/",
        ));
    }
    Volume {
        name: "etc-kubernetes-pki".into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            default_mode: Some(420),
        }),
        ..Default::default()
    }
}

/// kube-apiserver, kube-controller-manager and kube-scheduler.
fn control_plane_containers(
    tcp: &TenantControlPlane,
    version: &str,
    apiserver_args: &[String],
    kine: bool,
) -> [Container; 3] {
    let port = port(tcp);
    let resources = tcp
        .spec
        .control_plane
        .deployment
        .as_ref()
        .and_then(|d| d.resources.clone())
        .unwrap_or_default();
    let [apiserver_image, cm_image, scheduler_image] = images(tcp, version);
    let mut apiserver_mounts = vec![mount("etc-kubernetes-pki", PKI, true)];
    if kine {
        apiserver_mounts.push(mount("kine-uds", "/uds", false));
    }
    if konnectivity(tcp).is_some() {
        apiserver_mounts.extend([uds_mount(), config_mount()]);
    }
    if authentication(tcp).is_some() {
        apiserver_mounts.push(authentication_mount());
    }
    let apiserver = Container {
        name: "kube-apiserver".into(),
        image: Some(apiserver_image),
        image_pull_policy: Some("Always".into()),
        command: strings(&["kube-apiserver"]),
        args: Some(apiserver_args.to_vec()),
        ports: tcp_port("kube-apiserver", port),
        liveness_probe: probe("/livez", port),
        readiness_probe: probe("/readyz", port),
        startup_probe: probe("/livez", port),
        resources: Some(resources.api_server.clone().unwrap_or_default()),
        volume_mounts: Some(apiserver_mounts),
        ..Default::default()
    };
    let controller_manager = Container {
        name: "kube-controller-manager".into(),
        image: Some(cm_image),
        command: strings(&["kube-controller-manager"]),
        args: Some(controller_manager_args(tcp)),
        volume_mounts: Some(vec![
            mount("etc-kubernetes-pki", PKI, true),
            file_mount(
                "controller-manager-kubeconfig",
                "/etc/kubernetes/controller-manager.conf",
                "controller-manager.conf",
            ),
        ]),
        liveness_probe: probe("/healthz", 10257),
        readiness_probe: probe("/healthz", 10257),
        startup_probe: probe("/healthz", 10257),
        resources: Some(resources.controller_manager.clone().unwrap_or_default()),
        ..Default::default()
    };
    let scheduler = Container {
        name: "kube-scheduler".into(),
        image: Some(scheduler_image),
        command: strings(&["kube-scheduler"]),
        args: Some(scheduler_args(tcp)),
        volume_mounts: Some(vec![file_mount(
            "scheduler-kubeconfig",
            "/etc/kubernetes/scheduler.conf",
            "scheduler.conf",
        )]),
        liveness_probe: probe("/healthz", 10259),
        readiness_probe: probe("/healthz", 10259),
        startup_probe: probe("/healthz", 10259),
        resources: Some(resources.scheduler.clone().unwrap_or_default()),
        ..Default::default()
    };
    [apiserver, controller_manager, scheduler]
}

/// The kine sidecar, its volumes and (with TLS) the init container that copies its certificates.
struct Kine {
    container: Container,
    init_containers: Vec<Container>,
    volumes: Vec<Volume>,
}

fn kine(tcp: &TenantControlPlane, storage: &StorageView, settings: &WorkloadSettings) -> Kine {
    let resources = tcp
        .spec
        .control_plane
        .deployment
        .as_ref()
        .and_then(|d| d.resources.as_ref())
        .and_then(|r| r.kine.clone())
        .unwrap_or_default();
    let mut volumes = vec![empty_dir("kine-uds", Some("Memory"))];
    let mut mounts = vec![mount("kine-uds", "/uds", false)];
    let mut init_containers = Vec::new();
    if storage.certificate.is_some() {
        volumes.push(secret_volume("kine-config", certificate_secret_name(tcp)));
        volumes.push(empty_dir("kine-certs", None));
        mounts.push(mount("kine-certs", "/certs", true));
        init_containers.push(Container {
            name: "chmod".into(),
            image: Some(settings.kine_image.clone()),
            command: strings(&["sh"]),
            args: strings(&["-c", "cp /kine/*.* /certs && chmod -R 600 /certs/*.*"]),
            volume_mounts: Some(vec![
                mount("kine-config", "/kine", true),
                mount("kine-certs", "/certs", false),
            ]),
            ..Default::default()
        });
    }
    let container = Container {
        name: "kine".into(),
        image: Some(settings.kine_image.clone()),
        image_pull_policy: Some("Always".into()),
        command: strings(&["/bin/kine"]),
        args: Some(kine_args(tcp, storage)),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: config_secret_name(tcp),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        env: Some(vec![
            EnvVar {
                name: "GODEBUG".into(),
                value: Some("x509ignoreCN=0".into()),
                ..Default::default()
            },
            // After `envFrom`, so the `$(DB_*)` references expand.
            EnvVar {
                name: KINE_ENDPOINT_ENV.into(),
                value: Some(kine_endpoint(storage.driver).into()),
                ..Default::default()
            },
        ]),
        ports: tcp_port("server", 2379),
        volume_mounts: Some(mounts),
        resources: Some(resources),
        ..Default::default()
    };
    Kine {
        container,
        init_containers,
        volumes,
    }
}

/// `(labels, annotations)` of the pod template: the selector label, the component, the checksums,
/// then `podAdditionalMetadata` where it does not collide.
fn pod_metadata(tcp: &TenantControlPlane, storage: &StorageView, pki: &Pki) -> ObjectMeta {
    let spec = tcp.spec.control_plane.deployment.as_ref();
    let mut labels = BTreeMap::from([(TCP_NAME_LABEL.to_string(), tcp.name_any())]);
    labels.insert("kamaji.clastix.io/component".into(), "deployment".into());
    let mut annotations = BTreeMap::from([
        (POD_CHECKSUM_ANNOTATION.to_string(), pod_checksum(pki, storage)),
        (
            STORAGE_CONFIG_ANNOTATION.to_string(),
            storage.config_checksum.clone(),
        ),
    ]);
    if let Some((c, _)) = &storage.certificate {
        annotations.insert(STORAGE_CERTIFICATE_ANNOTATION.to_string(), c.clone());
    }
    if let Some(meta) = spec.and_then(|s| s.pod_additional_metadata.as_ref()) {
        for (k, v) in meta.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    ObjectMeta {
        labels: Some(labels),
        annotations: Some(annotations),
        ..Default::default()
    }
}

/// The Deployment's own metadata: the name label, managed-by, then `additionalMetadata`.
fn deployment_metadata(tcp: &TenantControlPlane) -> Result<ObjectMeta, Error> {
    let spec = tcp.spec.control_plane.deployment.as_ref();
    let mut labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), tcp.name_any()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    let mut annotations = BTreeMap::new();
    if let Some(meta) = spec.and_then(|s| s.additional_metadata.as_ref()) {
        for (k, v) in meta.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            annotations.insert(k.clone(), v.clone());
        }
    }
    Ok(ObjectMeta {
        name: Some(tcp.name_any()),
        namespace: tcp.namespace(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![owner(tcp)?]),
        ..Default::default()
    })
}

/// The spec's strategy, else upstream's: a rolling update that surges to twice the replicas.
fn strategy(tcp: &TenantControlPlane) -> DeploymentStrategy {
    let spec = tcp.spec.control_plane.deployment.as_ref();
    spec.and_then(|s| s.strategy.clone())
        .unwrap_or_else(|| DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::String("100%".into())),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        })
}

/// The Deployment and the user flags dropped from kube-apiserver's args.
#[derive(Debug)]
pub struct BuiltDeployment {
    /// The Deployment to apply.
    pub deployment: Deployment,
    /// kube-apiserver's args.
    pub apiserver_args: Args,
    /// konnectivity-server's args, with the addon.
    pub konnectivity_args: Option<Args>,
    /// Names of the user's `--oidc-*` flags dropped for `spec.authentication`.
    pub oidc_dropped: Vec<String>,
}

/// The Deployment `<tcp>`.
pub fn deployment(
    tcp: &TenantControlPlane,
    storage: &StorageView,
    pki: &Pki,
    version: &str,
    settings: &WorkloadSettings,
) -> Result<BuiltDeployment, Error> {
    let spec = tcp.spec.control_plane.deployment.clone().unwrap_or_default();
    let apiserver = apiserver_args(tcp, storage);
    let is_kine = storage.driver != Driver::Etcd;
    let mut containers = control_plane_containers(tcp, version, &apiserver.args, is_kine).to_vec();
    let mut volumes = vec![
        pki_volume(tcp, !is_kine),
        secret_volume(
            "controller-manager-kubeconfig",
            controller_manager_kubeconfig_name(tcp),
        ),
        secret_volume("scheduler-kubeconfig", scheduler_kubeconfig_name(tcp)),
    ];
    let mut init_containers = Vec::new();
    if is_kine {
        let kine = kine(tcp, storage, settings);
        volumes.extend(kine.volumes);
        init_containers = kine.init_containers;
        containers.push(kine.container);
    }
    let mut konnectivity_args = None;
    if let Some(k) = konnectivity(tcp) {
        let args = server_args(tcp, k);
        containers.push(server_container(k, version, &args));
        volumes.extend(konnectivity::volumes(tcp));
        konnectivity_args = Some(args);
    }
    if authentication(tcp).is_some() {
        volumes.push(authentication_volume(tcp));
    }
    let pod_spec = PodSpec {
        init_containers: Some(init_containers),
        containers,
        volumes: Some(volumes),
        node_selector: spec.node_selector,
        tolerations: spec.tolerations,
        affinity: spec.affinity,
        service_account_name: spec.service_account_name,
        ..Default::default()
    };
    let deployment = Deployment {
        metadata: deployment_metadata(tcp)?,
        spec: Some(DeploymentSpec {
            replicas: Some(replicas(tcp)),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(TCP_NAME_LABEL.to_string(), tcp.name_any())])),
                ..Default::default()
            },
            strategy: Some(strategy(tcp)),
            template: PodTemplateSpec {
                metadata: Some(pod_metadata(tcp, storage, pki)),
                spec: Some(pod_spec),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(BuiltDeployment {
        deployment,
        apiserver_args: apiserver,
        konnectivity_args,
        oidc_dropped: oidc_flag_names(tcp),
    })
}

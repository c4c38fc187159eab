//! The Deployment `<tcp>`: kube-apiserver, kube-controller-manager, kube-scheduler and, for SQL and NATS, kine.

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

/// The pod template's checksum: over every PKI Secret's checksum and the datastore Secrets'.
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

fn probe(path: &str, port: i32) -> serde_json::Value {
    json!({
        "httpGet": {"path": path, "port": port, "scheme": "HTTPS"},
        "initialDelaySeconds": 0, "timeoutSeconds": 1, "periodSeconds": 10,
        "successThreshold": 1, "failureThreshold": 3,
    })
}

/// The Deployment and the user flags dropped from kube-apiserver's args.
#[derive(Debug)]
pub struct BuiltDeployment {
    /// The Deployment to apply.
    pub deployment: Deployment,
    /// kube-apiserver's args.
    pub apiserver_args: Args,
}

/// The Deployment `<tcp>`.
pub fn deployment(
    tcp: &TenantControlPlane,
    storage: &StorageView,
    pki: &Pki,
    version: &str,
    settings: &WorkloadSettings,
) -> Result<BuiltDeployment, Error> {
    let name = tcp.name_any();
    let port = port(tcp);
    let spec = tcp.spec.control_plane.deployment.clone().unwrap_or_default();
    let [apiserver_image, cm_image, scheduler_image] = images(tcp, version);
    let apiserver = apiserver_args(tcp, storage);
    let kine = storage.driver != Driver::Etcd;
    let resources = spec.resources.clone().unwrap_or_default();

    let secret_items = |secret: String, keys: &[&str], prefix: &str| json!({"secret": {"name": secret, "items": keys.iter().map(|k| json!({"key": k, "path": format!("{prefix}{k}")})).collect::<Vec<_>>()}});
    let mut sources = vec![
        secret_items(ca_secret_name(tcp), &["ca.crt", "ca.key"], ""),
        secret_items(
            apiserver_secret_name(tcp),
            &["apiserver.crt", "apiserver.key"],
            "",
        ),
        secret_items(
            kubelet_client_secret_name(tcp),
            &["apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"],
            "",
        ),
        secret_items(
            front_proxy_ca_secret_name(tcp),
            &["front-proxy-ca.crt", "front-proxy-ca.key"],
            "",
        ),
        secret_items(
            front_proxy_client_secret_name(tcp),
            &["front-proxy-client.crt", "front-proxy-client.key"],
            "",
        ),
        secret_items(sa_secret_name(tcp), &["sa.pub", "sa.key"], ""),
    ];
    if !kine {
        sources.push(secret_items(
            certificate_secret_name(tcp),
            &["ca.crt", "server.crt", "server.key"],
            "etcd/",
        ));
    }
    let mut volumes = vec![
        json!({"name": "etc-kubernetes-pki", "projected": {"sources": sources, "defaultMode": 420}}),
        json!({"name": "controller-manager-kubeconfig", "secret": {"secretName": controller_manager_kubeconfig_name(tcp), "defaultMode": 420}}),
        json!({"name": "scheduler-kubeconfig", "secret": {"secretName": scheduler_kubeconfig_name(tcp), "defaultMode": 420}}),
    ];
    let mut apiserver_mounts =
        vec![json!({"name": "etc-kubernetes-pki", "mountPath": PKI, "readOnly": true})];
    let mut containers = vec![
        json!({
            "name": "kube-apiserver",
            "image": apiserver_image,
            "imagePullPolicy": "Always",
            "command": ["kube-apiserver"],
            "args": apiserver.args,
            "ports": [{"name": "kube-apiserver", "containerPort": port, "protocol": "TCP"}],
            "livenessProbe": probe("/livez", port),
            "readinessProbe": probe("/readyz", port),
            "startupProbe": probe("/livez", port),
            "resources": resources.api_server.clone().unwrap_or_default(),
        }),
        json!({
            "name": "kube-controller-manager",
            "image": cm_image,
            "command": ["kube-controller-manager"],
            "args": controller_manager_args(tcp),
            "volumeMounts": [
                {"name": "etc-kubernetes-pki", "mountPath": PKI, "readOnly": true},
                {"name": "controller-manager-kubeconfig", "mountPath": "/etc/kubernetes/controller-manager.conf", "subPath": "controller-manager.conf", "readOnly": true},
            ],
            "livenessProbe": probe("/healthz", 10257),
            "readinessProbe": probe("/healthz", 10257),
            "startupProbe": probe("/healthz", 10257),
            "resources": resources.controller_manager.clone().unwrap_or_default(),
        }),
        json!({
            "name": "kube-scheduler",
            "image": scheduler_image,
            "command": ["kube-scheduler"],
            "args": scheduler_args(tcp),
            "volumeMounts": [
                {"name": "scheduler-kubeconfig", "mountPath": "/etc/kubernetes/scheduler.conf", "subPath": "scheduler.conf", "readOnly": true},
            ],
            "livenessProbe": probe("/healthz", 10259),
            "readinessProbe": probe("/healthz", 10259),
            "startupProbe": probe("/healthz", 10259),
            "resources": resources.scheduler.clone().unwrap_or_default(),
        }),
    ];
    let mut init_containers = Vec::new();
    if kine {
        volumes.push(json!({"name": "kine-uds", "emptyDir": {"medium": "Memory"}}));
        apiserver_mounts.push(json!({"name": "kine-uds", "mountPath": "/uds"}));
        let mut kine_mounts = vec![json!({"name": "kine-uds", "mountPath": "/uds"})];
        if storage.certificate.is_some() {
            volumes.push(json!({"name": "kine-config", "secret": {"secretName": certificate_secret_name(tcp), "defaultMode": 420}}));
            volumes.push(json!({"name": "kine-certs", "emptyDir": {}}));
            kine_mounts.push(json!({"name": "kine-certs", "mountPath": "/certs", "readOnly": true}));
            init_containers.push(json!({
                "name": "chmod",
                "image": settings.kine_image,
                "command": ["sh"],
                "args": ["-c", "cp /kine/*.* /certs && chmod -R 600 /certs/*.*"],
                "volumeMounts": [
                    {"name": "kine-config", "mountPath": "/kine", "readOnly": true},
                    {"name": "kine-certs", "mountPath": "/certs"},
                ],
            }));
        }
        containers.push(json!({
            "name": "kine",
            "image": settings.kine_image,
            "imagePullPolicy": "Always",
            "command": ["/bin/kine"],
            "args": kine_args(tcp, storage),
            "envFrom": [{"secretRef": {"name": config_secret_name(tcp)}}],
            "env": [{"name": "GODEBUG", "value": "x509ignoreCN=0"}],
            "ports": [{"name": "server", "containerPort": 2379, "protocol": "TCP"}],
            "volumeMounts": kine_mounts,
            "resources": resources.kine.clone().unwrap_or_default(),
        }));
    }
    containers[0]["volumeMounts"] = json!(apiserver_mounts);

    let selector = BTreeMap::from([(TCP_NAME_LABEL.to_string(), name.clone())]);
    let mut pod_labels = selector.clone();
    pod_labels.insert("kamaji.clastix.io/component".into(), "deployment".into());
    let mut pod_annotations = BTreeMap::from([
        (POD_CHECKSUM_ANNOTATION.to_string(), pod_checksum(pki, storage)),
        (
            STORAGE_CONFIG_ANNOTATION.to_string(),
            storage.config_checksum.clone(),
        ),
    ]);
    if let Some((c, _)) = &storage.certificate {
        pod_annotations.insert(STORAGE_CERTIFICATE_ANNOTATION.to_string(), c.clone());
    }
    if let Some(meta) = &spec.pod_additional_metadata {
        for (k, v) in meta.labels.iter().flatten() {
            pod_labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            pod_annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let mut labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), name.clone()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    let mut annotations = BTreeMap::new();
    if let Some(meta) = &spec.additional_metadata {
        for (k, v) in meta.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            annotations.insert(k.clone(), v.clone());
        }
    }
    let strategy = spec.strategy.clone().map(|s| json!(s)).unwrap_or_else(
        || json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}}),
    );
    let mut pod_spec = json!({
        "initContainers": init_containers,
        "containers": containers,
        "volumes": volumes,
    });
    if let Some(ns) = &spec.node_selector {
        pod_spec["nodeSelector"] = json!(ns);
    }
    if let Some(t) = &spec.tolerations {
        pod_spec["tolerations"] = json!(t);
    }
    if let Some(a) = &spec.affinity {
        pod_spec["affinity"] = json!(a);
    }
    if let Some(sa) = &spec.service_account_name {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    let value = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": tcp.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner(tcp)?],
        },
        "spec": {
            "replicas": replicas(tcp),
            "selector": {"matchLabels": selector},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    });
    let deployment = serde_json::from_value(value).map_err(|e| {
        invalid(
            "DeploymentInvalid",
            format!("the Deployment does not serialize: {e}"),
        )
    })?;
    Ok(BuiltDeployment {
        deployment,
        apiserver_args: apiserver,
    })
}

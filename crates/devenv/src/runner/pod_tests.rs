use std::{collections::HashMap, net::Ipv4Addr, path::PathBuf};

use k8s_openapi::api::core::v1::{PodSpec, Secret};
use serde_json::json;

use super::*;

const IP: Ipv4Addr = Ipv4Addr::new(127, 1, 2, 3);

struct Fake;

impl ImageResolver for Fake {
    fn resolve(&self, image: &str, command0: Option<&str>) -> Result<PathBuf, PlanError> {
        let (name, version) =
            image_name_version(image).ok_or_else(|| PlanError::ImageNotBuilt(image.into()))?;
        match command0.map(|c| c.rsplit('/').next().unwrap_or(c)) {
            Some(c) if c != name => Ok(PathBuf::from(format!("/usr/bin/{c}"))),
            _ if version == "v9.9.9" => {
                Err(PlanError::ImageNotBuilt(format!("{name} {version} is not built")))
            }
            _ => Ok(PathBuf::from(format!("/bin/{name}-{version}"))),
        }
    }
}

#[test]
fn image_references_split_into_name_and_version() {
    assert_eq!(
        image_name_version("registry.k8s.io/kube-apiserver:v1.34.4"),
        Some(("kube-apiserver".into(), "v1.34.4".into()))
    );
    assert_eq!(
        image_name_version("rancher/kine:v0.11.10-amd64"),
        Some(("kine".into(), "v0.11.10".into()))
    );
    assert_eq!(image_name_version("busybox"), None);
}

#[test]
fn mount_paths_are_rewritten_only_as_whole_components() {
    let mounts = vec![
        ("/uds".to_string(), PathBuf::from("/tmp/p/v/kine-uds")),
        ("/etc/kubernetes/pki".to_string(), PathBuf::from("/tmp/p/v/pki")),
        ("/certs".to_string(), PathBuf::from("/tmp/p/v/kine-certs")),
    ];
    assert_eq!(
        rewrite_paths("--etcd-servers=unix:///uds/kine", &mounts),
        "--etcd-servers=unix:///tmp/p/v/kine-uds/kine"
    );
    assert_eq!(
        rewrite_paths("--client-ca-file=/etc/kubernetes/pki/ca.crt", &mounts),
        "--client-ca-file=/tmp/p/v/pki/ca.crt"
    );
    assert_eq!(
        rewrite_paths("cp /kine/*.* /certs && chmod -R 600 /certs/*.*", &mounts),
        "cp /kine/*.* /tmp/p/v/kine-certs && chmod -R 600 /tmp/p/v/kine-certs/*.*"
    );
    assert_eq!(rewrite_paths("--path=/a/uds/x", &mounts), "--path=/a/uds/x");
    assert_eq!(rewrite_paths("--path=/udsx", &mounts), "--path=/udsx");
}

#[test]
fn variables_expand_like_kubernetes() {
    let env = BTreeMap::from([
        ("DB_USER".to_string(), "u".to_string()),
        ("X".to_string(), "$(Y)".to_string()),
    ]);
    assert_eq!(
        expand("postgres://$(DB_USER)@h/$(DB_SCHEMA)", &env),
        "postgres://u@h/$(DB_SCHEMA)"
    );
    assert_eq!(expand("$$(DB_USER) costs $5", &env), "$(DB_USER) costs $5");
    assert_eq!(expand("$(X)", &env), "$(Y)");
}

#[test]
fn kubeconfigs_on_loopback_move_to_the_pod_address() {
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n";
    let out = localize_kubeconfig(text, IP).unwrap();
    let value: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(
        value["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://127.1.2.3:6443")
    );
    assert_eq!(
        value["clusters"][0]["cluster"]["tls-server-name"].as_str(),
        Some("localhost")
    );
    let remote = "kind: Config\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n";
    assert_eq!(localize_kubeconfig(remote, IP), None);
    assert_eq!(localize_kubeconfig("a: b", IP), None);
}

fn secret(name: &str, data: &[(&str, &str)]) -> (String, Secret) {
    let data: BTreeMap<String, String> = data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    (
        name.to_string(),
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap(),
    )
}

fn kine_pod(image: &str) -> PodSpec {
    serde_json::from_value(json!({
        "initContainers": [{
            "name": "chmod", "image": "rancher/kine:v0.17.5", "command": ["sh"],
            "args": ["-c", "cp /kine/*.* /certs && chmod -R 600 /certs/*.*"],
            "volumeMounts": [{"name": "kine-config", "mountPath": "/kine"}, {"name": "kine-certs", "mountPath": "/certs"}],
        }],
        "containers": [
            {
                "name": "kube-apiserver", "image": image, "command": ["kube-apiserver"],
                "args": ["--etcd-servers=unix:///uds/kine", "--client-ca-file=/etc/kubernetes/pki/ca.crt", "--secure-port=6443"],
                "ports": [{"name": "kube-apiserver", "containerPort": 6443}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "kube-apiserver", "scheme": "HTTPS"}, "periodSeconds": 10},
                "volumeMounts": [{"name": "pki", "mountPath": "/etc/kubernetes/pki"}, {"name": "kine-uds", "mountPath": "/uds"}],
            },
            {
                "name": "kine", "image": "rancher/kine:v0.17.5", "command": ["/bin/kine"],
                "args": ["--listen-address=unix:///uds/kine", "--ca-file=/certs/ca.crt",
                         "--endpoint=postgres://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)/$(DB_SCHEMA)"],
                "envFrom": [{"secretRef": {"name": "cfg"}}],
                "env": [{"name": "GODEBUG", "value": "x509ignoreCN=0"}],
                "volumeMounts": [{"name": "kine-uds", "mountPath": "/uds"}, {"name": "kine-certs", "mountPath": "/certs"}],
            },
        ],
        "volumes": [
            {"name": "pki", "projected": {"sources": [{"secret": {"name": "ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}], "defaultMode": 420}},
            {"name": "kine-uds", "emptyDir": {"medium": "Memory"}},
            {"name": "kine-config", "secret": {"secretName": "dscert"}},
            {"name": "kine-certs", "emptyDir": {}},
        ],
    }))
    .unwrap()
}

#[test]
fn a_kine_pod_plans_files_processes_and_probes_on_its_own_address() {
    let secrets: HashMap<String, Secret> = [
        secret("ca", &[("ca.crt", "CA"), ("ca.key", "KEY")]),
        secret("dscert", &[("ca.crt", "DSCA")]),
        secret(
            "cfg",
            &[
                ("DB_USER", "u"),
                ("DB_PASSWORD", "p/uds"),
                ("DB_CONNECTION_STRING", "127.0.0.1:5432"),
                ("DB_SCHEMA", "s"),
            ],
        ),
    ]
    .into_iter()
    .collect();
    let config_maps = HashMap::new();
    let sources = Sources {
        secrets: &secrets,
        config_maps: &config_maps,
    };
    let dir = PathBuf::from("/tmp/pod");
    let plan = plan(
        &kine_pod("registry.k8s.io/kube-apiserver:v1.34.4"),
        &sources,
        &Fake,
        &dir,
        IP,
    )
    .unwrap();

    assert_eq!(
        plan.files,
        vec![
            FilePlan {
                path: dir.join("v/pki/ca.crt"),
                content: b"CA".to_vec(),
                mode: 420
            },
            FilePlan {
                path: dir.join("v/kine-config/ca.crt"),
                content: b"DSCA".to_vec(),
                mode: 0o600
            },
        ]
    );
    assert_eq!(plan.init[0].program, PathBuf::from("/usr/bin/sh"));
    assert_eq!(
        plan.init[0].args,
        vec![
            "-c".to_string(),
            "cp /tmp/pod/v/kine-config/*.* /tmp/pod/v/kine-certs && chmod -R 600 /tmp/pod/v/kine-certs/*.*"
                .into()
        ]
    );
    let api = &plan.containers[0];
    assert_eq!(api.program, PathBuf::from("/bin/kube-apiserver-v1.34.4"));
    assert_eq!(
        api.args,
        vec![
            "--etcd-servers=unix:///tmp/pod/v/kine-uds/kine".to_string(),
            "--client-ca-file=/tmp/pod/v/pki/ca.crt".into(),
            "--secure-port=6443".into(),
            "--bind-address=127.1.2.3".into(),
        ]
    );
    assert_eq!(
        api.readiness.as_ref().unwrap().url(),
        "https://127.1.2.3:6443/readyz"
    );
    let kine = &plan.containers[1];
    assert_eq!(kine.program, PathBuf::from("/bin/kine-v0.17.5"));
    assert_eq!(
        kine.args,
        vec![
            "--listen-address=unix:///tmp/pod/v/kine-uds/kine".to_string(),
            "--ca-file=/tmp/pod/v/kine-certs/ca.crt".into(),
            // A password that looks like a mount path is not rewritten: expansion comes after rewriting.
            "--endpoint=postgres://u:p/uds@127.0.0.1:5432/s".into(),
            "--metrics-bind-address=127.1.2.3:8080".into(),
        ]
    );
    assert!(
        kine.env
            .contains(&("GODEBUG".to_string(), "x509ignoreCN=0".to_string()))
    );
}

#[test]
fn an_image_of_an_unbuilt_version_is_refused_and_a_missing_secret_is_reported() {
    let secrets = HashMap::new();
    let config_maps = HashMap::new();
    let sources = Sources {
        secrets: &secrets,
        config_maps: &config_maps,
    };
    let err = plan(
        &kine_pod("registry.k8s.io/kube-apiserver:v1.34.4"),
        &sources,
        &Fake,
        Path::new("/p"),
        IP,
    )
    .unwrap_err();
    assert_eq!(
        err,
        PlanError::Missing {
            kind: "Secret",
            name: "ca".into()
        }
    );

    let secrets: HashMap<String, Secret> = [
        secret("ca", &[("ca.crt", "CA")]),
        secret("dscert", &[]),
        secret("cfg", &[]),
    ]
    .into_iter()
    .collect();
    let sources = Sources {
        secrets: &secrets,
        config_maps: &config_maps,
    };
    let err = plan(
        &kine_pod("registry.k8s.io/kube-apiserver:v9.9.9"),
        &sources,
        &Fake,
        Path::new("/p"),
        IP,
    )
    .unwrap_err();
    assert_eq!(
        err,
        PlanError::ImageNotBuilt("kube-apiserver v9.9.9 is not built".into())
    );
    assert_eq!(err.reason(), "ImageNotBuilt");
}

#[test]
fn a_konnectivity_sidecar_listens_on_the_pod_address_and_the_egress_socket_moves_to_its_volume() {
    let egress = "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: GRPC\n    transport:\n      uds:\n        udsName: /run/konnectivity/konnectivity-server.socket\n";
    let secrets: HashMap<String, Secret> =
        [secret("konn", &[("egress-selector-configuration.yaml", egress)])]
            .into_iter()
            .collect();
    let config_maps = HashMap::new();
    let sources = Sources {
        secrets: &secrets,
        config_maps: &config_maps,
    };
    let spec: PodSpec = serde_json::from_value(json!({
        "containers": [
            {
                "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.34.4", "command": ["kube-apiserver"],
                "args": ["--egress-selector-config-file=/etc/kubernetes/konnectivity/egress-selector-configuration.yaml"],
                "volumeMounts": [{"name": "konnectivity-uds", "mountPath": "/run/konnectivity"}, {"name": "konnectivity-config", "mountPath": "/etc/kubernetes/konnectivity"}],
            },
            {
                "name": "konnectivity-server", "image": "registry.k8s.io/kas-network-proxy/proxy-server:v0.34.0", "command": ["/proxy-server"],
                "args": ["--uds-name=/run/konnectivity/konnectivity-server.socket", "--agent-port=8132", "--admin-bind-address=127.0.0.1"],
                "volumeMounts": [{"name": "konnectivity-uds", "mountPath": "/run/konnectivity"}],
            },
        ],
        "volumes": [
            {"name": "konnectivity-uds", "emptyDir": {"medium": "Memory"}},
            {"name": "konnectivity-config", "secret": {"secretName": "konn"}},
        ],
    }))
    .unwrap();
    let plan = plan(&spec, &sources, &Fake, &PathBuf::from("/tmp/pod"), IP).unwrap();
    // Volume sync re-plans the same files, localized the same way.
    assert_eq!(
        plan_files(&spec, &sources, &PathBuf::from("/tmp/pod"), IP).unwrap(),
        plan.files
    );

    let file = &plan.files[0];
    assert_eq!(
        file.path,
        PathBuf::from("/tmp/pod/v/konnectivity-config/egress-selector-configuration.yaml")
    );
    let localized: serde_yaml::Value = serde_yaml::from_slice(&file.content).unwrap();
    assert_eq!(
        localized["egressSelections"][0]["connection"]["transport"]["uds"]["udsName"].as_str(),
        Some("/tmp/pod/v/konnectivity-uds/konnectivity-server.socket")
    );
    assert_eq!(
        plan.containers[0].args,
        vec![
            "--egress-selector-config-file=/tmp/pod/v/konnectivity-config/egress-selector-configuration.yaml",
            "--bind-address=127.1.2.3",
        ]
    );
    assert_eq!(
        plan.containers[1].program,
        PathBuf::from("/bin/proxy-server-v0.34.0")
    );
    assert_eq!(
        plan.containers[1].args,
        vec![
            "--uds-name=/tmp/pod/v/konnectivity-uds/konnectivity-server.socket",
            "--agent-port=8132",
            "--admin-bind-address=127.1.2.3",
            "--server-bind-address=127.1.2.3",
            "--agent-bind-address=127.1.2.3",
            "--health-bind-address=127.1.2.3",
        ]
    );
}

//! The runner's volume sync against a real kube-apiserver (etcd + kube-apiserver, no controller-manager):
//! a changed ConfigMap reaches the file of the running pod within seconds, with no restart and no new pod.

use std::{
    collections::BTreeSet,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tenantplane_devenv::{
    localenv::{
        self,
        etcd::{EtcdOptions, LocalEtcd},
        kube::{KubeOptions, LocalKube},
    },
    runner::{DEPLOYMENT_LABEL, Runner, RunnerSettings},
};
use tenantplane_testkit::eventually;

/// The pod directories under the runner's directory (each has a `pod.json`).
fn pod_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|e| {
            e.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("pod.json").exists())
                .collect()
        })
        .unwrap_or_default()
}

/// The PID the container printed when it started, once per start.
fn started_pids(pod: &Path) -> Vec<u32> {
    std::fs::read_to_string(pod.join("logs/kube-apiserver.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("started ")?.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_map_reaches_the_running_pods_file_without_a_restart() {
    localenv::install_crypto_provider();
    let scratch = localenv::scratch_dir("volume-sync").unwrap();
    let etcd = LocalEtcd::start(scratch.join("etcd"), EtcdOptions::default())
        .await
        .unwrap();
    let mut options = KubeOptions::new(etcd.url());
    options.controllers = None;
    let kube = LocalKube::start(scratch.join("kube"), options).await.unwrap();
    let client = kube.client().await.unwrap();
    let ns = "default";
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "auth"},
        "data": {"config.yaml": "issuer: one\n"},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    // The image maps to kube-apiserver, but the command is the host's `sh` (as kine's chmod init
    // container); `$$$$` is the shell's `$$` after Kubernetes' `$(VAR)` expansion.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "vs", "labels": {DEPLOYMENT_LABEL: "vs"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vs"}},
            "template": {
                "metadata": {"labels": {"app": "vs"}},
                "spec": {
                    "containers": [{
                        "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.34.4",
                        "command": ["sh", "-c", "echo started $$$$; exec sleep 3600"],
                        "volumeMounts": [{"name": "auth", "mountPath": "/etc/auth"}],
                    }],
                    "volumes": [{"name": "auth", "configMap": {"name": "auth", "defaultMode": 0o640}}],
                },
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let mut settings = RunnerSettings::new(scratch.join("pods"));
    settings.namespaces = Some(BTreeSet::from([ns.to_string()]));
    let pods = settings.dir.clone();
    let mut runner = Runner::start(client.clone(), settings).unwrap();

    let (pod, pid) = eventually("the pod to start", Duration::from_secs(60), || async {
        let pod = pod_dirs(&pods).into_iter().next()?;
        let pid = started_pids(&pod).into_iter().next()?;
        Some((pod, pid))
    })
    .await;
    let pod_json = std::fs::read_to_string(pod.join("pod.json")).unwrap();
    let file = pod.join("v/auth/config.yaml");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "issuer: one\n");

    let changed = Instant::now();
    cms.patch(
        "auth",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"config.yaml": "issuer: two\n"}})),
    )
    .await
    .unwrap();
    eventually(
        "the new content in the pod's file",
        Duration::from_secs(10),
        || async { (std::fs::read_to_string(&file).ok()? == "issuer: two\n").then_some(()) },
    )
    .await;
    let took = changed.elapsed();

    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert_eq!(pod_dirs(&pods), vec![pod.clone()], "no new pod");
    assert_eq!(std::fs::read_to_string(pod.join("pod.json")).unwrap(), pod_json);
    assert_eq!(started_pids(&pod), vec![pid], "the container did not restart");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("sleep"),
        "{pid} still runs"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    runner.stop().await;
}

//! The runner's rolling update against a real kube-apiserver (etcd + kube-apiserver, no
//! controller-manager): once the new pod is ready the old one leaves the Deployment's count (and its
//! Service) at once, as a terminating pod leaves its EndpointSlice, and stops afterwards; its graceful
//! stop does not hold the rollout back.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::apps::v1::Deployment;
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

/// The PID each pod's container printed when it started, by pod directory.
fn started(dir: &Path) -> Vec<(PathBuf, u32)> {
    let pods = std::fs::read_dir(dir).map(|e| e.flatten().map(|e| e.path()).collect::<Vec<_>>());
    pods.unwrap_or_default()
        .into_iter()
        .filter_map(|pod| {
            let log = std::fs::read_to_string(pod.join("logs/kube-apiserver.log")).ok()?;
            let pid = log
                .lines()
                .find_map(|l| l.strip_prefix("started ")?.trim().parse().ok())?;
            Some((pod, pid))
        })
        .collect()
}

/// Whether `pid` still runs `sleep` (a killed child is gone, or a zombie with no command line).
fn sleeping(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("sleep"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_pod_leaves_the_rollout_before_its_graceful_stop_ends() {
    localenv::install_crypto_provider();
    let scratch = localenv::scratch_dir("rollout").unwrap();
    let etcd = LocalEtcd::start(scratch.join("etcd"), EtcdOptions::default())
        .await
        .unwrap();
    let mut options = KubeOptions::new(etcd.url());
    options.controllers = None;
    let kube = LocalKube::start(scratch.join("kube"), options).await.unwrap();
    let client = kube.client().await.unwrap();
    let ns = "default";
    // The container ignores SIGTERM (an ignored signal survives `exec`), so stopping it takes the
    // runner's whole grace period before the kill.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "ro", "labels": {DEPLOYMENT_LABEL: "ro"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "ro"}},
            "template": {
                "metadata": {"labels": {"app": "ro"}, "annotations": {"rev": "1"}},
                "spec": {"containers": [{
                    "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.34.4",
                    "command": ["sh", "-c", "trap '' TERM; echo started $$$$; exec sleep 3600"],
                }]},
            },
        },
    }))
    .unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let mut settings = RunnerSettings::new(scratch.join("pods"));
    settings.namespaces = Some(BTreeSet::from([ns.to_string()]));
    let pods = settings.dir.clone();
    let mut runner = Runner::start(client.clone(), settings).unwrap();
    let (old_pod, old_pid) = eventually("the first pod to start", Duration::from_secs(60), || async {
        started(&pods).into_iter().next()
    })
    .await;

    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    deployments
        .patch("ro", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let rolled = eventually(
        "the rollout to one new replica",
        Duration::from_secs(60),
        || async {
            let d = deployments.get("ro").await.ok()?;
            let s = d.status?;
            let current = s.observed_generation == d.metadata.generation;
            (current
                && s.replicas == Some(1)
                && s.updated_replicas == Some(1)
                && s.available_replicas == Some(1))
            .then(|| sleeping(old_pid))
        },
    )
    .await;
    assert!(
        rolled,
        "the old pod's container (pid {old_pid}) was already stopped when the rollout was reported: its graceful stop held the rollout back"
    );
    let new = started(&pods);
    assert!(new.iter().any(|(pod, _)| *pod != old_pod), "{new:?}");
    eventually(
        "the old container to be stopped",
        Duration::from_secs(10),
        || async { (!sleeping(old_pid)).then_some(()) },
    )
    .await;
    runner.stop().await;
}

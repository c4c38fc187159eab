//! TenantControlPlane reconcile at scale (issue 9): `cargo bench --bench tcp_scale` (N from
//! `TCP_BENCH_N`, default 1000; 5 at `TENANTPLANE_BENCH_SIZE=smoke`, where every TCP must be Ready within
//! 300 s instead of 1,800 s). A TCP not Ready by then, or N = 0, fails the run (exit 1); a failed request
//! of the bench's own clients panics.
//!
//! Starts its own kube-apiserver (with its etcd) and a second, TLS + auth etcd as the one shared
//! DataStore, then runs the release `tenantplane controller` as a child process (concurrency 16, leader
//! election off). A stand-in for the kubelet and the deployment controller marks every Deployment
//! available as soon as it appears. It creates N TenantControlPlanes (16 at a time) and measures the
//! time until every one is `Ready` with all its objects, the controller's peak RSS, and then a bare
//! client creating the same objects (11 Secrets, a Service and a Deployment per TCP, 16 at a time) as
//! the write limit of this apiserver. A second bare client then does the whole job without a
//! controller: the TCP create, the finalizer, the etcd user, the owned objects, two status writes and
//! the Deployment status, with no reads and no watches, as the limit of the job on this machine.
//!
//! `TCP_BENCH_IN_TENANT=on|off` runs the controller phase in the layout of [`standin`] instead (a real
//! kube-apiserver standing in for every tenant cluster), with the in-tenant phase on or off, waits
//! (with it on) until every TCP also has `NodeJoinReady`, and then measures a minute of steady state.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark binary panics on setup failures"
)]

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Secret, Service},
};
use kube::{
    Api, Resource as _, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt as _, watcher},
};
use serde_json::json;
use tenantplane::{
    controller::{
        TCP_FINALIZER,
        tenant_control_plane::{build as workload, status::STATUS_MANAGER},
    },
    datastore::{Driver as _, Owner, TenantSpace, etcd::EtcdDriver},
    k8s::crd::{DataStore, TenantControlPlane},
    pki::Ca,
};
mod common;
#[path = "tcp_scale/standin.rs"]
mod standin;

use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kube::{KubeOptions, LocalKube},
    ports,
    process::{self, ChildProcess, Spec},
};

/// Namespace of the TenantControlPlanes the controller reconciles.
const NS: &str = "bench";
/// Namespace of the bare client's objects.
const BARE_NS: &str = "bench-bare";
/// Namespace of the bare client that does the whole job.
const WHOLE_NS: &str = "bench-whole";
/// Requests in flight while creating (TCPs, and the bare client's object sets).
const CONCURRENCY: usize = 16;
/// Upstream Kamaji's published rate: 100 TCPs in about 7 min 30 s.
const UPSTREAM_TCP_PER_SECOND: f64 = 100.0 / 450.0;

fn vm_hwm_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

async fn namespace(kube: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn tcp(name: &str, namespace: &str) -> TenantControlPlane {
    tenantplane_testkit::tcp(namespace, name)
        .datastore("bench-etcd")
        .build()
}

/// A kube-apiserver with its etcd and the bench's CRDs and namespaces, and a TLS + auth etcd as the
/// shared DataStore (a DataStore object only in the controller's namespace).
struct Stack {
    kube_etcd: LocalEtcd,
    kube_server: LocalKube,
    kube: kube::Client,
    etcd: LocalEtcd,
}

impl Stack {
    async fn start(dir: &std::path::Path) -> Self {
        let kube_etcd = LocalEtcd::start(dir.join("kube-etcd"), EtcdOptions::default())
            .await
            .unwrap();
        let kube_server = LocalKube::start(dir.join("kube"), KubeOptions::new(kube_etcd.url()))
            .await
            .unwrap();
        let kube = kube_server.client().await.unwrap();
        localenv::kube::install_crds(&kube, "bench").await.unwrap();
        // The new resources may take a moment to be served.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for ns in [NS, BARE_NS, WHOLE_NS] {
            namespace(&kube, ns).await;
        }
        // The controller keeps its state (served records, migration journals) there, as a deployment has it.
        localenv::kube::ensure_namespace(&kube, tenantplane::k8s::DEFAULT_STATE_NAMESPACE)
            .await
            .unwrap();
        let ca = Ca::new("bench-ca").unwrap();
        let etcd = LocalEtcd::start(dir.join("ds-etcd"), EtcdOptions { tls_ca: Some(&ca) })
            .await
            .unwrap();
        localenv::kube::create_etcd_datastore(&kube, &etcd, "bench-etcd", NS)
            .await
            .unwrap();
        Self {
            kube_etcd,
            kube_server,
            kube,
            etcd,
        }
    }
}

/// The whole job of one TCP done by a bare client: every write the controller path makes (the TCP,
/// its finalizer, the etcd user, 11 Secrets, a Service and a Deployment with owner references, two
/// status writes, the stand-in kubelet's Deployment status), and no reads or watches.
struct WholeJob<'a> {
    kube: kube::Client,
    driver: EtcdDriver,
    pki: &'a workload::Pki,
    view: &'a workload::StorageView,
    ready_status: serde_json::Value,
}

impl WholeJob<'_> {
    async fn run(&self, i: usize) {
        let name = format!("cp-{i}");
        let tcps: Api<TenantControlPlane> = Api::namespaced(self.kube.clone(), WHOLE_NS);
        let created = tcps
            .create(&PostParams::default(), &tcp(&name, WHOLE_NS))
            .await
            .unwrap();
        let finalizer = json!({"metadata": {"finalizers": [TCP_FINALIZER]}});
        tcps.patch(&name, &PatchParams::default(), &Patch::Merge(&finalizer))
            .await
            .unwrap();
        let uid = created.metadata.uid.clone().unwrap();
        let space = TenantSpace::new(
            format!("whole_{name}"),
            format!("whole_{name}"),
            Owner::new(&uid, &created.namespace().unwrap(), &name).unwrap(),
        )
        .unwrap();
        self.driver.provision(&space).await.unwrap();
        let owner = created.controller_owner_ref(&()).unwrap();
        let meta = |suffix: String| kube::api::ObjectMeta {
            name: Some(suffix),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        };
        let secrets: Api<Secret> = Api::namespaced(self.kube.clone(), WHOLE_NS);
        for (j, mut secret) in eleven_secrets(self.pki).into_iter().enumerate() {
            secret.metadata = meta(format!("{name}-{j}"));
            secrets.create(&PostParams::default(), &secret).await.unwrap();
        }
        let mut svc = workload::service(&created).unwrap();
        svc.metadata = meta(name.clone());
        Api::<Service>::namespaced(self.kube.clone(), WHOLE_NS)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
        let status = |phase: &str| {
            let mut status = self.ready_status.clone();
            status["kubernetesResources"]["version"]["status"] = json!(phase);
            json!({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
                   "status": status})
        };
        let apply = PatchParams::apply(STATUS_MANAGER).force();
        let mut d = workload::deployment(&created, self.view, self.pki, "v1.34.0", &Default::default())
            .unwrap()
            .deployment;
        d.metadata = meta(name.clone());
        let deployments = Api::<Deployment>::namespaced(self.kube.clone(), WHOLE_NS);
        deployments.create(&PostParams::default(), &d).await.unwrap();
        tcps.patch_status(&name, &apply, &Patch::Apply(status("Provisioning")))
            .await
            .unwrap();
        deployments
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&available(Some(1), 1)),
            )
            .await
            .unwrap();
        tcps.patch_status(&name, &apply, &Patch::Apply(status("Ready")))
            .await
            .unwrap();
    }
}

/// The Deployment status kubelet and the deployment controller would report once `replicas` pods of
/// `generation` run.
fn available(generation: Option<i64>, replicas: i32) -> serde_json::Value {
    json!({"status": {
        "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas, "unavailableReplicas": 0,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                        "message": "bench", "lastUpdateTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }})
}

/// A TCP's 11 Secrets as the bare clients write them: the 9 PKI/kubeconfig Secrets, and two of them
/// again standing in for the datastore-config and datastore-certificate Secrets.
fn eleven_secrets(pki: &workload::Pki) -> Vec<Secret> {
    let mut all = pki.secrets.clone();
    all.push(pki.secrets[0].clone());
    all.push(pki.secrets[1].clone());
    all
}

/// Plays kubelet + deployment controller: every Deployment of `NS` (of every namespace with
/// `all`) becomes available at once.
async fn mark_deployments_available(kube: kube::Client, all: bool) {
    let api: Api<Deployment> = if all {
        Api::all(kube.clone())
    } else {
        Api::namespaced(kube.clone(), NS)
    };
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    while let Ok(Some(d)) = events.try_next().await {
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let generation = d.metadata.generation;
        let status = d.status.clone().unwrap_or_default();
        if status.observed_generation == generation && status.available_replicas == Some(replicas) {
            continue;
        }
        let patch = available(generation, replicas);
        let namespace = d.namespace().unwrap_or_else(|| NS.to_string());
        let _ = Api::<Deployment>::namespaced(kube.clone(), &namespace)
            .patch_status(&d.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
}

/// (TCPs with any version status, TCPs Ready, TCPs with `NodeJoinReady`), from the bench's watch cache
/// (a LIST of every TCP twice a second would load the apiserver the controller is measured against).
fn progress(store: &kube::runtime::reflector::Store<TenantControlPlane>) -> (usize, usize, usize) {
    let list = store.state();
    let state = |t: &TenantControlPlane| {
        t.status
            .as_ref()
            .and_then(|s| s.kubernetes_resources.as_ref())
            .and_then(|k| k.version.as_ref())
            .and_then(|v| v.status)
            .map(|s| format!("{s:?}"))
    };
    let with_status = list.iter().filter(|t| state(t).is_some()).count();
    let ready = list
        .iter()
        .filter(|t| state(t).as_deref() == Some("Ready"))
        .count();
    let joined = list
        .iter()
        .filter(|t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "NodeJoinReady"))
        })
        .count();
    (with_status, ready, joined)
}

#[tokio::main]
async fn main() {
    let size = common::Size::from_env();
    let n = common::env_number("TCP_BENCH_N", size.pick(5, 1000));
    common::measured("controller phase", n);
    common::exit_if_failed();
    let ready_deadline = Duration::from_secs(size.pick(300, 1800));
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-tcp").unwrap();
    let Stack {
        kube_etcd,
        kube_server,
        kube,
        etcd,
    } = Stack::start(&dir.join("controller-stack")).await;
    let in_tenant = standin::in_tenant();
    let stand_in = match in_tenant {
        Some(_) => {
            let stand_in = standin::StandIn::start(&dir.join("stand-in")).await;
            stand_in.seed(&kube, n, CONCURRENCY).await;
            Some(stand_in)
        }
        None => None,
    };

    let metrics_port = ports::claim().unwrap();
    // `TCP_BENCH_WRAPPER="heaptrack -o /tmp/controller"` runs the controller under a profiler.
    let wrapper: Vec<String> = std::env::var("TCP_BENCH_WRAPPER")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let spec = match wrapper.split_first() {
        Some((program, args)) => Spec::new("controller", program)
            .args(args)
            .args([env!("CARGO_BIN_EXE_tenantplane")]),
        None => Spec::new("controller", env!("CARGO_BIN_EXE_tenantplane")),
    };
    let scope = match in_tenant {
        Some(on) => ["--in-tenant".to_string(), on.to_string()],
        None => ["--watch-namespace".to_string(), NS.to_string()],
    };
    let spec = spec
        .args(["controller", "--leader-election", "false"])
        .args(scope)
        .env("TENANTPLANE_KUBECONFIG", kube_server.kubeconfig_path())
        .env(
            "TENANTPLANE_METRICS_LISTEN",
            format!("127.0.0.1:{}", metrics_port.port()),
        )
        .env(
            "TENANTPLANE_CONTROLLER_CONCURRENCY",
            std::env::var("TCP_BENCH_CONCURRENCY").unwrap_or_else(|_| "16".into()),
        )
        .env("RUST_LOG", "warn");
    let controller = ChildProcess::spawn(&spec, &dir.join("controller.log")).unwrap();
    let perf = std::env::var_os("TCP_BENCH_PERF").map(|path| {
        // The controller's own CPU profile over 20 s of the controller phase, for `perf report`.
        let pid = controller.pid().to_string();
        std::process::Command::new("perf")
            .args(["record", "-F", "499", "-g", "-o"])
            .arg(path)
            .args(["-p", &pid, "--", "sleep", "25"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    });
    tokio::spawn(mark_deployments_available(kube.clone(), in_tenant.is_some()));

    let datastores: Api<DataStore> = Api::all(kube.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while !datastores
        .get("bench-etcd")
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.ready)
    {
        assert!(Instant::now() < deadline, "the DataStore never became ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rss_idle = vm_hwm_mib(controller.pid());
    let controller_cpu = || process::cpu_seconds(controller.pid()).map_or(0.0, |(_, s)| s);

    let tcps: Api<TenantControlPlane> = match in_tenant {
        Some(_) => Api::all(kube.clone()),
        None => Api::namespaced(kube.clone(), NS),
    };
    let (store, writer) = kube::runtime::reflector::store();
    tokio::spawn(
        watcher(tcps.clone(), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| async {}),
    );
    store.wait_until_ready().await.unwrap();
    if let Some(path) = std::env::var_os("TCP_BENCH_PPROF") {
        // kube-apiserver's CPU profile over 20 s of the controller phase, for `go tool pprof`.
        let kube = kube.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let request = axum::http::Request::get("/debug/pprof/profile?seconds=20")
                .body(Vec::new())
                .unwrap();
            let profile = kube.request_stream(request).await.unwrap();
            let mut bytes = Vec::new();
            futures::io::AsyncReadExt::read_to_end(&mut Box::pin(profile), &mut bytes)
                .await
                .unwrap();
            std::fs::write(path, bytes).unwrap();
        });
    }
    let mut named = vec![(kube_etcd.pid(), "etcd (kube)"), (etcd.pid(), "etcd (DataStore)")];
    if let Some(stand_in) = &stand_in {
        named.extend(
            stand_in
                .pids()
                .into_iter()
                .map(|pid| (pid, "stand-in tenant apiserver")),
        );
    }
    let requests_before = apiserver_requests(&kube).await;
    let cpu_before = cpu_by_command(&named);
    let controller_before = controller_cpu();
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let (kube, stand_in) = (kube.clone(), stand_in.as_ref());
            async move {
                let (namespace, object) = match stand_in {
                    Some(s) => (standin::namespace(i), s.tcp(i)),
                    None => (NS.to_string(), tcp(&format!("cp-{i}"), NS)),
                };
                Api::<TenantControlPlane>::namespaced(kube, &namespace)
                    .create(&PostParams::default(), &object)
                    .await
                    .unwrap();
            }
        })
        .await;
    let created = started.elapsed();
    let mut last_report = Instant::now();
    let mut with_status_at = None;
    let wait_joined = in_tenant == Some(true);
    let ready = loop {
        let (with_status, ready, joined) = progress(&store);
        if with_status == n && with_status_at.is_none() {
            with_status_at = Some(started.elapsed());
        }
        if ready == n && (!wait_joined || joined == n) {
            break ready;
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "progress after {:>5.0?}: {with_status}/{n} with status, {ready}/{n} Ready, {joined}/{n} NodeJoinReady",
                started.elapsed()
            );
            last_report = Instant::now();
        }
        if started.elapsed() > ready_deadline {
            common::fail(
                "controller phase",
                format!("{ready}/{n} TCPs Ready ({joined}/{n} NodeJoinReady) after {ready_deadline:?}"),
            );
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let all_ready = started.elapsed();
    let requests_after = apiserver_requests(&kube).await;
    let cpu_after = cpu_by_command(&named);
    let controller_phase_cpu = controller_cpu() - controller_before;
    let rss_peak = vm_hwm_mib(controller.pid());
    // A minute of steady state: with the in-tenant phase, one resync pass per tenant.
    let steady = match in_tenant {
        Some(_) => {
            let before = controller_cpu();
            tokio::time::sleep(Duration::from_secs(65)).await;
            Some((controller_cpu() - before, vm_hwm_mib(controller.pid())))
        }
        None => None,
    };
    let deployments = match in_tenant {
        Some(_) => Api::<Deployment>::all(kube.clone()),
        None => Api::<Deployment>::namespaced(kube.clone(), NS),
    }
    .list(&Default::default())
    .await
    .unwrap()
    .items
    .len();
    let metrics = reqwest::get(format!("http://127.0.0.1:{}/metrics", metrics_port.port()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    drop(controller);
    reconcile_errors(&metrics, in_tenant.is_some());
    if let Some(on) = in_tenant {
        // The in-tenant comparison needs the controller phase only.
        let report = standin::Report {
            n,
            on,
            all_ready,
            ready,
            rss: (rss_idle, rss_peak),
            controller_cpu: controller_phase_cpu,
            steady,
        };
        report.print();
        println!(
            "CPU seconds during the controller phase ({:.1} s wall, 2 cores):",
            all_ready.as_secs_f64()
        );
        print_cpu(&cpu_before, &cpu_after);
        for line in metrics
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("reconcile"))
        {
            println!("    {line}");
        }
        common::exit_if_failed();
        return;
    }

    // The bare client: the same objects, written directly.
    let template = {
        let mut t = tcp("cp", BARE_NS);
        t.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
        t
    };
    let pki = workload::pki(
        &template,
        &BTreeMap::new(),
        None,
        &Default::default(),
        1_800_000_000,
    )
    .unwrap();
    let view = workload::StorageView {
        driver: tenantplane::k8s::crd::Driver::Etcd,
        schema: "bench".into(),
        endpoints: vec![etcd.endpoint()],
        overrides: vec![],
        config_checksum: String::new(),
        certificate: None,
    };
    let bare_cpu_before = cpu_by_command(&named);
    let bare_started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let (kube, pki, view, template) = (kube.clone(), &pki, &view, &template);
            async move {
                let name = format!("cp-{i}");
                let secrets: Api<Secret> = Api::namespaced(kube.clone(), BARE_NS);
                for (j, mut s) in eleven_secrets(pki).into_iter().enumerate() {
                    s.metadata = kube::api::ObjectMeta {
                        name: Some(format!("{name}-{j}")),
                        ..Default::default()
                    };
                    secrets.create(&PostParams::default(), &s).await.unwrap();
                }
                let mut svc = workload::service(template).unwrap();
                svc.metadata.name = Some(name.clone());
                svc.metadata.owner_references = None;
                Api::<Service>::namespaced(kube.clone(), BARE_NS)
                    .create(&PostParams::default(), &svc)
                    .await
                    .unwrap();
                let mut d = workload::deployment(template, view, pki, "v1.34.0", &Default::default())
                    .unwrap()
                    .deployment;
                d.metadata.name = Some(name);
                d.metadata.owner_references = None;
                Api::<Deployment>::namespaced(kube.clone(), BARE_NS)
                    .create(&PostParams::default(), &d)
                    .await
                    .unwrap();
            }
        })
        .await;
    let bare = bare_started.elapsed();
    let bare_cpu_after = cpu_by_command(&named);

    let ready_status = store
        .state()
        .iter()
        .find(|t| t.name_any() == "cp-0" || (in_tenant.is_some() && t.name_any() == standin::NAME))
        .and_then(|t| t.status.clone())
        .expect("cp-0 has a status");
    // The whole job runs on a fresh stack: etcd's auth store costs more with every user it holds.
    drop((kube_server, kube_etcd, etcd));
    let whole_stack = Stack::start(&dir.join("whole-job-stack")).await;
    let whole_named = [
        (whole_stack.kube_etcd.pid(), "etcd (kube)"),
        (whole_stack.etcd.pid(), "etcd (DataStore)"),
    ];
    let whole_view = workload::StorageView {
        endpoints: vec![whole_stack.etcd.endpoint()],
        ..view
    };
    let whole = WholeJob {
        kube: whole_stack.kube.clone(),
        driver: EtcdDriver::new(whole_stack.etcd.root_driver_settings().unwrap()).unwrap(),
        pki: &pki,
        view: &whole_view,
        ready_status: serde_json::to_value(&ready_status).unwrap(),
    };
    let whole_cpu_before = cpu_by_command(&whole_named);
    let whole_started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| whole.run(i))
        .await;
    let whole_elapsed = whole_started.elapsed();
    let whole_cpu_after = cpu_by_command(&whole_named);

    if let Some(mut perf) = perf {
        perf.wait().unwrap();
    }
    let rate = n as f64 / all_ready.as_secs_f64();
    let bare_rate = n as f64 / bare.as_secs_f64();
    println!("n = {n} TenantControlPlanes on one etcd DataStore, controller concurrency 16");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| create requests done | {created:.1?} |");
    println!(
        "| every TCP has a version status | {} |",
        with_status_at.map_or("never".into(), |d| format!("{d:.1?}"))
    );
    println!("| every TCP Ready (objects + status) | {all_ready:.1?} ({ready}/{n} Ready) |");
    println!("| Deployments | {deployments} |");
    println!("| controller TCP/s | {rate:.2} |");
    println!("| bare client, same objects | {bare:.1?} = {bare_rate:.2} TCP/s |");
    println!("| controller / bare client | {:.0} % |", 100.0 * rate / bare_rate);
    let whole_rate = n as f64 / whole_elapsed.as_secs_f64();
    println!("| bare client, the whole job | {whole_elapsed:.1?} = {whole_rate:.2} TCP/s |");
    println!(
        "| controller / bare client, the whole job | {:.0} % |",
        100.0 * rate / whole_rate
    );
    println!(
        "| controller / upstream Kamaji (0.22 TCP/s) | {:.0}x |",
        rate / UPSTREAM_TCP_PER_SECOND
    );
    println!("| controller peak RSS (VmHWM) | {rss_idle:.1} MiB idle → {rss_peak:.1} MiB |");
    println!(
        "| controller CPU until done | {controller_phase_cpu:.1} s = {:.1} ms per TCP |",
        1000.0 * controller_phase_cpu / n as f64
    );
    let interesting = [
        "reconcile_errors_total{",
        "reconciles_total{",
        "phase_duration_seconds_sum",
    ];
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && interesting.iter().any(|k| l.contains(k)))
    {
        println!("    {line}");
    }
    println!(
        "CPU seconds during the controller phase ({:.1} s wall, 2 cores):",
        all_ready.as_secs_f64()
    );
    print_cpu(&cpu_before, &cpu_after);
    println!(
        "CPU seconds during the bare client ({:.1} s wall):",
        bare.as_secs_f64()
    );
    print_cpu(&bare_cpu_before, &bare_cpu_after);
    println!(
        "CPU seconds during the bare client doing the whole job ({:.1} s wall):",
        whole_elapsed.as_secs_f64()
    );
    print_cpu(&whole_cpu_before, &whole_cpu_after);
    println!("apiserver requests during the controller phase, per TCP (all clients, the bench's too):");
    let delta = |k: &str| {
        requests_after.get(k).copied().unwrap_or(0.0) - requests_before.get(k).copied().unwrap_or(0.0)
    };
    let mut deltas: Vec<(String, f64)> = requests_after
        .keys()
        .filter(|k| !k.starts_with("seconds "))
        .map(|k| (k.clone(), delta(k)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    deltas.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = deltas.iter().map(|(_, d)| d).sum();
    println!(
        "    total {:.1} (mean server-side latency of each kind in parentheses)",
        total / n as f64
    );
    for (key, count) in deltas.iter().take(16) {
        let mean_ms = 1000.0 * delta(&format!("seconds {key}")) / count;
        println!("    {:>6.2} {key} ({mean_ms:.1} ms)", count / n as f64);
    }
    common::exit_if_failed();
}

/// Fails the controller phase for every reason the controller counted reconcile errors under; the
/// in-tenant controller's count only with a `tenant_cluster` (the stand-in): without one its connections
/// fail by design.
fn reconcile_errors(metrics: &str, tenant_cluster: bool) {
    for line in metrics.lines().filter(|l| {
        l.starts_with("tenantplane_controller_reconcile_errors_total{")
            && (tenant_cluster || !l.contains("controller=\"in-tenant\""))
    }) {
        let (labels, count) = line.rsplit_once(' ').unwrap_or((line, "0"));
        if count.parse::<f64>().unwrap_or(0.0) > 0.0 {
            common::fail("controller phase", format!("{count} reconcile errors: {labels}"));
        }
    }
}

/// Prints the CPU seconds each process used between two samples, most first.
fn print_cpu(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) {
    let mut cpu: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d >= 0.5)
        .collect();
    cpu.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = cpu.iter().map(|(_, d)| d).sum();
    println!("    {total:>7.1} in all");
    for (comm, secs) in cpu {
        println!("    {secs:>7.1} {comm}");
    }
}

/// CPU seconds (user + system) used so far by every running process, summed by command name, or
/// by the label `named` gives its pid.
fn cpu_by_command(named: &[(u32, &str)]) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some((comm, seconds)) = process::cpu_seconds(pid) else {
            continue;
        };
        let label = named
            .iter()
            .find(|(p, _)| *p == pid)
            .map_or(comm, |(_, label)| label.to_string());
        *sums.entry(label).or_insert(0.0) += seconds;
    }
    sums
}

/// kube-apiserver's `apiserver_request_total`, summed by verb, resource and subresource.
async fn apiserver_requests(kube: &kube::Client) -> BTreeMap<String, f64> {
    let text = kube
        .request_text(axum::http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let mut sums = BTreeMap::new();
    for line in text.lines().filter(|l| {
        l.starts_with("apiserver_request_total{") || l.starts_with("apiserver_request_duration_seconds_sum{")
    }) {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        if label("resource").is_empty() {
            continue;
        }
        let seconds = if line.starts_with("apiserver_request_total{") {
            ""
        } else {
            "seconds "
        };
        let key = format!(
            "{seconds}{} {} {}",
            label("verb"),
            label("resource"),
            label("subresource")
        );
        *sums.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    sums
}

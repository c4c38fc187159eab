//! `TCP_BENCH_IN_TENANT=on|off`: the layout in which the in-tenant phase has a real tenant cluster to
//! work on. One real kube-apiserver (with its etcd, no controller-manager) stands in for every tenant
//! cluster: each TenantControlPlane's `networkProfile` points at it, and its `<tcp>-ca` Secret is
//! seeded, before the TCP is created, with that apiserver's CA (the controller keeps a reusable CA, and
//! signs the admin kubeconfig and checks `/readyz` with it). Every TCP is named `cp`, in a namespace of
//! its own (`bench-t-<i>`), so every tenant's in-tenant objects are the same objects with the same
//! content (kubeadm-config names the cluster after the TCP): a pass finds what the previous tenant's
//! pass applied, as it would find its own. `off` runs the same layout with `--in-tenant false`.

use std::{collections::BTreeMap, time::Duration};

use futures::{StreamExt as _, stream};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, api::PostParams};
use serde_json::json;
use tenantplane::{
    controller::{build::CHECKSUM_ANNOTATION, tenant_control_plane::build as workload},
    k8s::crd::TenantControlPlane,
    pki::CertKey,
};
use tenantplane_devenv::localenv::{
    etcd::{EtcdOptions, LocalEtcd},
    kube::{KubeOptions, LocalKube},
};

/// The TCPs' name in every namespace.
pub const NAME: &str = "cp";

/// The namespace of TCP `i`.
pub fn namespace(i: usize) -> String {
    format!("bench-t-{i}")
}

/// Whether the in-tenant phase runs: `Some(on)` in this layout, `None` in the plain one.
pub fn in_tenant() -> Option<bool> {
    match std::env::var("TCP_BENCH_IN_TENANT").as_deref() {
        Ok("on") => Some(true),
        Ok("off") => Some(false),
        _ => None,
    }
}

/// The kube-apiserver standing in for every tenant cluster.
pub struct StandIn {
    _etcd: LocalEtcd,
    kube: LocalKube,
    port: u16,
}

impl StandIn {
    /// Starts it (its own etcd, no controller-manager).
    pub async fn start(dir: &std::path::Path) -> Self {
        let etcd = LocalEtcd::start(dir.join("standin-etcd"), EtcdOptions::default())
            .await
            .unwrap();
        let options = KubeOptions {
            controllers: None,
            ..KubeOptions::new(etcd.url())
        };
        let kube = LocalKube::start(dir.join("standin"), options).await.unwrap();
        let port = kube.url().rsplit(':').next().unwrap().parse().unwrap();
        Self {
            _etcd: etcd,
            kube,
            port,
        }
    }

    /// Its processes (for the CPU table).
    pub fn pids(&self) -> Vec<u32> {
        self.kube.pids()
    }

    /// TCP `i`, pointing at the stand-in.
    pub fn tcp(&self, i: usize) -> TenantControlPlane {
        tenantplane_testkit::tcp(&namespace(i), NAME)
            .datastore("bench-etcd")
            .spec(
                "networkProfile",
                json!({"address": "127.0.0.1", "port": self.port}),
            )
            .build()
    }

    /// Creates the `n` namespaces, each with its `cp-ca` Secret holding the stand-in's CA.
    pub async fn seed(&self, kube: &kube::Client, n: usize, concurrency: usize) {
        let ca = seeded_ca(self.kube.ca(), &self.tcp(0));
        stream::iter(0..n)
            .for_each_concurrent(concurrency, |i| {
                let (kube, mut ca) = (kube.clone(), ca.clone());
                async move {
                    super::namespace(&kube, &namespace(i)).await;
                    ca.metadata.namespace = Some(namespace(i));
                    Api::<Secret>::namespaced(kube, &namespace(i))
                        .create(&PostParams::default(), &ca)
                        .await
                        .unwrap();
                }
            })
            .await;
    }
}

/// The CA Secret the controller would generate for `template`, with `ca` as its material and no owner
/// (the TCP does not exist yet; the controller adds the owner reference when it keeps the CA).
fn seeded_ca(ca: &CertKey, template: &TenantControlPlane) -> Secret {
    let mut template = template.clone();
    template.metadata.uid = Some("00000000-0000-4000-8000-000000000001".into());
    let generated = workload::pki(
        &template,
        &BTreeMap::new(),
        None,
        &Default::default(),
        1_800_000_000,
    )
    .unwrap();
    let mut secret = generated.get(&format!("{NAME}-ca")).unwrap().clone();
    let data: BTreeMap<String, ByteString> = [
        ("ca.crt", &ca.cert_pem),
        ("ca.key", &ca.key_pem),
        ("tls.crt", &ca.cert_pem),
        ("tls.key", &ca.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    let annotations = secret.metadata.annotations.get_or_insert_default();
    annotations.insert(
        CHECKSUM_ANNOTATION.into(),
        tenantplane::controller::build::checksum(&data),
    );
    secret.data = Some(data);
    secret.metadata.owner_references = None;
    secret
}

/// The controller phase's figures in this layout.
pub struct Report {
    /// TenantControlPlanes.
    pub n: usize,
    /// Whether the in-tenant phase ran.
    pub on: bool,
    /// Until every TCP was Ready (and, with the phase on, had `NodeJoinReady`).
    pub all_ready: Duration,
    /// TCPs Ready then.
    pub ready: usize,
    /// The controller's VmHWM when idle and at the end (MiB).
    pub rss: (f64, f64),
    /// The controller's CPU seconds in that phase.
    pub controller_cpu: f64,
    /// The controller's CPU seconds over the next 65 s, and its VmHWM then.
    pub steady: Option<(f64, f64)>,
}

impl Report {
    /// Prints the table.
    pub fn print(&self) {
        let n = self.n as f64;
        println!(
            "n = {} TenantControlPlanes, a namespace each, one etcd DataStore, one stand-in tenant apiserver, controller concurrency 16, in-tenant phase {}",
            self.n,
            if self.on { "on" } else { "off" }
        );
        println!("| measure | value |");
        println!("|---|---|");
        let until = if self.on {
            "Ready and NodeJoinReady"
        } else {
            "Ready"
        };
        println!(
            "| every TCP {until} | {:.1?} ({}/{} Ready) = {:.2} TCP/s |",
            self.all_ready,
            self.ready,
            self.n,
            n / self.all_ready.as_secs_f64()
        );
        println!(
            "| controller CPU until then | {:.1} s = {:.1} ms per TCP |",
            self.controller_cpu,
            1000.0 * self.controller_cpu / n
        );
        println!(
            "| controller peak RSS (VmHWM) | {:.1} MiB idle → {:.1} MiB |",
            self.rss.0, self.rss.1
        );
        if let Some((cpu, hwm)) = self.steady {
            println!(
                "| controller CPU over the next 65 s (steady state) | {cpu:.1} s = {:.2} ms per TCP per minute; VmHWM {hwm:.1} MiB |",
                1000.0 * cpu * 60.0 / 65.0 / n
            );
        }
    }
}

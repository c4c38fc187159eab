//! Status-back latency: from a write to a TenantControlPlane's status subresource to the
//! `NOTIFY control_plane_status` that the worker sends after committing it to PostgreSQL.
//!
//! Starts its own PostgreSQL, etcd and kube-apiserver (the test environment's binaries), one control
//! plane and an in-process worker, then makes 500 sequential status changes (30 at
//! `TENANTPLANE_BENCH_SIZE=smoke`) and prints percentiles. A change with no NOTIFY, or no sample, fails
//! the run (exit 1).
//! Run: `cargo bench --bench status_latency --profile dev` (or without `--profile dev` for release).

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tenantplane::{
    k8s::crd::TenantControlPlane,
    store::{self, control_planes::NewControlPlane},
    worker::{Worker, WorkerMetrics, WorkerSettings},
};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kube::{KubeOptions, LocalKube},
    postgres::LocalPostgres,
};

mod common;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let changes = common::Size::from_env().pick(30, 500);
    bench(changes)
        .await
        .context("scenario: status write → NOTIFY after commit")
}

/// The bench over `changes` status changes.
async fn bench(changes: usize) -> anyhow::Result<()> {
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-status")?;
    let pg = LocalPostgres::start(dir.join("pg")).await?;
    let url = localenv::postgres::create_database(&pg.url(), "bench").await?;
    let db = PgPoolOptions::new().max_connections(8).connect(&url).await?;
    store::MIGRATOR.run(&db).await?;
    let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions::default()).await?;
    let kube_server = LocalKube::start(dir.join("kube"), KubeOptions::new(etcd.url())).await?;
    let kube = kube_server.client().await?;
    localenv::kube::install_crds(&kube, "bench").await?;
    // The new resources may take a moment to be served.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let tenant = store::tenants::insert(&db, "bench", "bench", &json!({})).await?;
    let mut tx = db.begin().await?;
    let cp = NewControlPlane {
        name: "prod".into(),
        kubernetes_version: "v1.33.2".into(),
        replicas: 2,
        service_type: "ClusterIP".into(),
        port: 6443,
        size_class: "small".into(),
        datastore_pool: None,
        datastore_labels: json!({}),
        datastore_name: Some("etcd-default".into()),
        offload: "none".into(),
        addons: json!({}),
        labels: json!({}),
    };
    store::control_planes::insert_created(&mut tx, tenant.id, &cp, "bench", None, 1800).await?;
    tx.commit().await?;

    let worker = Arc::new(Worker::new(
        db.clone(),
        kube.clone(),
        WorkerSettings {
            resync_seconds: 3600.0,
            ..WorkerSettings::default()
        },
        WorkerMetrics::default(),
    ));
    let task = tokio::spawn(worker.run());
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), "tp-bench");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while api.get_opt("prod").await?.is_none() {
        anyhow::ensure!(std::time::Instant::now() < deadline, "the TCP never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut listener = PgListener::connect(&url).await?;
    listener.listen("control_plane_status").await?;
    // Drain the Provisioning write of the first watch event.
    while tokio::time::timeout(Duration::from_millis(500), listener.recv())
        .await
        .is_ok()
    {}

    let mut samples = Vec::with_capacity(changes);
    for i in 0..changes {
        let status =
            json!({"status": {"controlPlaneEndpoint": format!("10.0.{}.{}:6443", i / 250, i % 250 + 1)}});
        let started = std::time::Instant::now();
        api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .with_context(|| format!("no NOTIFY for change {i} within 10 s"))??;
        samples.push(started.elapsed());
    }
    task.abort();
    anyhow::ensure!(!samples.is_empty(), "measured nothing (no samples)");
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "status-back latency over {changes} changes (status write → NOTIFY after commit): \
         p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(1.0))
    );
    drop((kube_server, etcd, pg));
    Ok(())
}

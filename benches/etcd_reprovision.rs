//! Re-provisioning etcd tenants (issue 9): `cargo bench --bench etcd_reprovision` (N from
//! `ETCD_BENCH_N`, default 1000; 20 at `TENANTPLANE_BENCH_SIZE=smoke`).
//!
//! Every controller restart and every resync re-provisions each TenantControlPlane's etcd user. etcd
//! rebuilds its permission cache for every user on each auth change, so a change per tenant costs
//! O(users) each and O(users²) per wave. The bench provisions N tenants on one TLS + auth etcd (16 at
//! a time), then provisions all N again, and reports the wall time and the etcd's CPU seconds of each
//! wave. A failed provision, or a wave of no tenants, fails the run (exit 1).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark binary panics on setup failures"
)]

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use futures::{StreamExt as _, stream};
use tenantplane::{
    datastore::{Driver as _, Owner, TenantSpace, etcd::EtcdDriver},
    pki::Ca,
};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    process,
};

mod common;

/// Provisions in flight, as the controller's default concurrency.
const CONCURRENCY: usize = 16;

/// CPU seconds etcd has used so far.
fn etcd_cpu(etcd: &LocalEtcd) -> f64 {
    process::cpu_seconds(etcd.pid()).expect("etcd runs").1
}

/// Provisions tenants `0..n` and returns (wall seconds, etcd CPU seconds); a failed provision fails
/// the run.
async fn wave(name: &str, driver: &EtcdDriver, etcd: &LocalEtcd, n: usize) -> (f64, f64) {
    let cpu = etcd_cpu(etcd);
    let failed = AtomicUsize::new(0);
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let failed = &failed;
            async move {
                let tenant = format!("tenant_{i}");
                // The same owner in both waves, as a running TenantControlPlane keeps its UID.
                let uid = format!("00000000-0000-4000-8000-{i:012}");
                let owner = Owner::new(&uid, "bench", &format!("cp-{i}")).unwrap();
                let space = TenantSpace::new(&tenant, &tenant, owner).unwrap();
                if let Err(e) = driver.provision(&space).await
                    && failed.fetch_add(1, Ordering::Relaxed) == 0
                {
                    eprintln!("wave {name}: first failed provision ({tenant}): {e}");
                }
            }
        })
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let failed = failed.into_inner();
    if failed > 0 {
        common::fail(
            &format!("wave {name}"),
            format!("{failed} of {n} provisions failed"),
        );
    }
    common::measured(&format!("wave {name}"), n);
    (elapsed, etcd_cpu(etcd) - cpu)
}

#[tokio::main]
async fn main() {
    let size = common::Size::from_env();
    let n = common::env_number("ETCD_BENCH_N", size.pick(20, 1000));
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-etcd-reprovision").unwrap();
    let ca = Ca::new("bench-ca").unwrap();
    let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    let driver = EtcdDriver::new(etcd.root_driver_settings().unwrap()).unwrap();
    let (first_wall, first_cpu) = wave("first", &driver, &etcd, n).await;
    let (again_wall, again_cpu) = wave("again", &driver, &etcd, n).await;
    println!("n = {n} etcd tenants, {CONCURRENCY} at a time");
    println!("| wave | wall | per tenant | etcd CPU |");
    println!("|---|---|---|---|");
    for (wave, wall, cpu) in [("first", first_wall, first_cpu), ("again", again_wall, again_cpu)] {
        println!(
            "| {wave} | {wall:.1} s | {:.1} ms | {cpu:.1} s |",
            1000.0 * wall / n as f64
        );
    }
    common::exit_if_failed();
}

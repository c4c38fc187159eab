//! Re-provisioning etcd tenants (issue 9): `cargo bench --bench etcd_reprovision` (N from
//! `ETCD_BENCH_N`, default 1000).
//!
//! Every controller restart and every resync re-provisions each TenantControlPlane's etcd user. etcd
//! rebuilds its permission cache for every user on each auth change, so a change per tenant costs
//! O(users) each and O(users²) per wave. The bench provisions N tenants on one TLS + auth etcd (16 at
//! a time), then provisions all N again, and reports the wall time and the etcd's CPU seconds of each
//! wave.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark binary panics on setup failures"
)]

use std::time::Instant;

use futures::{StreamExt as _, stream};
use tenantplane::{
    config::Secret,
    datastore::{
        Driver as _, TenantSpace,
        etcd::{EtcdDriver, EtcdSettings},
    },
    localenv::{
        self,
        etcd::{EtcdOptions, LocalEtcd},
        pki::TinyCa,
    },
};

/// Provisions in flight, as the controller's default concurrency.
const CONCURRENCY: usize = 16;

/// CPU seconds (user + system) process `pid` has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // After the command: utime and stime are fields 14 and 15 of stat(5), in ticks of 1/100 s.
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
}

/// Provisions tenants `0..n` and returns (wall seconds, etcd CPU seconds).
async fn wave(driver: &EtcdDriver, etcd: &LocalEtcd, n: usize) -> (f64, f64) {
    let cpu = cpu_seconds(etcd.pid());
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| async move {
            let name = format!("tenant_{i}");
            let space = TenantSpace::new(&name, &name).unwrap();
            driver.provision(&space).await.unwrap();
        })
        .await;
    (started.elapsed().as_secs_f64(), cpu_seconds(etcd.pid()) - cpu)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("ETCD_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-etcd-reprovision").unwrap();
    let ca = TinyCa::new("bench-ca").unwrap();
    let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    let root = etcd.tls().unwrap().root_client.clone();
    let driver = EtcdDriver::new(EtcdSettings::new(
        vec![etcd.endpoint()],
        ca.ca.clone(),
        root.cert_pem,
        Secret::new(root.key_pem),
    ))
    .unwrap();
    let (first_wall, first_cpu) = wave(&driver, &etcd, n).await;
    let (again_wall, again_cpu) = wave(&driver, &etcd, n).await;
    println!("n = {n} etcd tenants, {CONCURRENCY} at a time");
    println!("| wave | wall | per tenant | etcd CPU |");
    println!("|---|---|---|---|");
    for (wave, wall, cpu) in [("first", first_wall, first_cpu), ("again", again_wall, again_cpu)] {
        println!(
            "| {wave} | {wall:.1} s | {:.1} ms | {cpu:.1} s |",
            1000.0 * wall / n as f64
        );
    }
}

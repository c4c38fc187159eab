//! Live migration of an etcd tenant (issue 21): `cargo bench --bench migrate_etcd`.
//!
//! For 1k, 10k and 50k ConfigMap-sized objects (1.0 to 1.6 KiB values; sizes from
//! `MIGRATE_BENCH_SIZES=1000,10000`, runs from `MIGRATE_BENCH_RUNS`, default 3), each run starts two
//! TLS + auth etcds, writes the objects on the source, and moves them with [`EtcdMover`] while the
//! tenant's own certificate writes 20 objects/s (updates, creates, deletes): copy, catch-up until the
//! lag is at most 50 revisions, freeze and finish, verify. It prints the median and the range of the
//! total time (copy to finish Done) and of the freeze time (freeze to finish Done), and the speed of
//! the target's revision bump (200,000 revision-floor puts).
//!
//! `TENANTPLANE_BENCH_SIZE=smoke` moves 200 objects once and bumps 2,000 revisions. A failed step or
//! verification, a size with no run, or a bump that bumped nothing fails the run (exit 1).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark binary panics on setup failures"
)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions, Txn, TxnOp};
use tenantplane::{
    datastore::{
        Driver as _, Owner, TenantCredentials, TenantSpace,
        etcd::EtcdDriver,
        migrate::{
            Checkpoint, Mover, Step,
            etcd::{EtcdMoveOptions, EtcdMover},
        },
    },
    pki::{Ca, CertKey},
};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
};

mod common;

/// One run's stage times, in seconds.
#[derive(Debug, Clone, Copy)]
struct Run {
    copy: f64,
    catch_up: f64,
    freeze: f64,
    verify: f64,
    bumped: u64,
}

impl Run {
    fn total(&self) -> f64 {
        self.copy + self.catch_up + self.freeze
    }
}

async fn start_etcd(ca: &Ca, name: &str) -> (LocalEtcd, EtcdDriver) {
    let dir = localenv::scratch_dir(name).unwrap();
    let etcd = LocalEtcd::start(dir, EtcdOptions { tls_ca: Some(ca) })
        .await
        .unwrap();
    let driver = EtcdDriver::new(etcd.root_driver_settings().unwrap()).unwrap();
    (etcd, driver)
}

async fn client(etcd: &LocalEtcd, key: &CertKey) -> Client {
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&etcd.tls().unwrap().ca.cert_pem))
        .identity(Identity::from_pem(&key.cert_pem, &key.key_pem));
    Client::connect([etcd.url()], Some(ConnectOptions::new().with_tls(tls)))
        .await
        .unwrap()
}

fn value(i: usize, v: usize) -> Vec<u8> {
    let mut text =
        format!("{{\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"cm-{i}\",\"v\":{v}}},\"data\":\"");
    text.push_str(&"x".repeat(1000 + i % 600));
    text.push_str("\"}");
    text.into_bytes()
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}registry/configmaps/default/cm-{i}")
}

async fn seed(client: &mut Client, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|&i| TxnOp::put(key(prefix, i), value(i, 0), None))
            .collect();
        client.txn(Txn::new().and_then(ops)).await.unwrap();
    }
}

/// Writes 20 objects/s with the tenant's client until `stop`; refused writes (frozen) are fine.
fn writer(
    mut client: Client,
    prefix: String,
    n: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let _ = match i % 4 {
                0 => client.delete(key(&prefix, i * 7 % n), None).await.map(|_| ()),
                1 => client
                    .put(key(&prefix, n + i), value(i, 1), None)
                    .await
                    .map(|_| ()),
                _ => client
                    .put(key(&prefix, i * 13 % n), value(i, 2), None)
                    .await
                    .map(|_| ()),
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Provisions a tenant on both etcds; the tenant's client on the source.
async fn tenant(source: &EtcdDriver, target: &EtcdDriver, etcd: &LocalEtcd) -> (TenantSpace, Client) {
    let owner = Owner::new("00000000-0000-4000-8000-000000000021", "bench", "cp").unwrap();
    let space = TenantSpace::new("bench-tenant", "bench-tenant", owner).unwrap();
    let TenantCredentials::Etcd(creds) = source.provision(&space).await.unwrap() else {
        panic!("etcd credentials expected");
    };
    target.provision(&space).await.unwrap();
    let key = CertKey {
        cert_pem: creds.client_cert_pem.clone(),
        key_pem: creds.client_key_pem.expose().clone(),
    };
    (space, client(etcd, &key).await)
}

/// One migration of `n` objects under the writer.
async fn run(ca: &Ca, n: usize, index: usize) -> Run {
    let (source_etcd, source) = start_etcd(ca, &format!("bench-mv-{n}-{index}-src")).await;
    let (_target_etcd, target) = start_etcd(ca, &format!("bench-mv-{n}-{index}-dst")).await;
    let (space, tenant_client) = tenant(&source, &target, &source_etcd).await;
    let prefix = format!("/{}/", space.schema());
    seed(
        &mut client(&source_etcd, &source_etcd.tls().unwrap().root_client).await,
        &prefix,
        n,
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(tenant_client, prefix, n, stop.clone());
    let mover = EtcdMover::new(source, target, &space, &space, EtcdMoveOptions::default());
    let mut checkpoint = Checkpoint::default();

    let scenario = format!("{n} objects, run {index}");
    let step = |what: &str| format!("{scenario}: {what}");
    let started = Instant::now();
    while common::ok(mover.copy_step(&mut checkpoint).await, &step("copy")) == Step::More {}
    let copy = started.elapsed().as_secs_f64();
    let started = Instant::now();
    while common::ok(mover.catch_up_step(&mut checkpoint).await, &step("catch-up")) > 50 {}
    let catch_up = started.elapsed().as_secs_f64();
    let started = Instant::now();
    common::ok(mover.freeze().await, &step("freeze"));
    while common::ok(mover.finish_step(&mut checkpoint).await, &step("finish")) == Step::More {}
    let freeze = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    writing.await.unwrap();
    let started = Instant::now();
    let verification = common::ok(mover.verify().await, &step("verify"));
    let verify = started.elapsed().as_secs_f64();
    assert!(
        verification.equal(),
        "{scenario}: the target differs: {verification:?}"
    );
    Run {
        copy,
        catch_up,
        freeze,
        verify,
        bumped: mover.revisions_bumped(),
    }
}

/// Revision-floor puts per second: a mover whose margin asks the target for `revisions` revisions; a bump
/// of none fails the run.
async fn bump_speed(ca: &Ca, revisions: i64) -> f64 {
    let (source_etcd, source) = start_etcd(ca, "bench-mv-bump-src").await;
    let (_target_etcd, target) = start_etcd(ca, "bench-mv-bump-dst").await;
    let (space, _) = tenant(&source, &target, &source_etcd).await;
    let options = EtcdMoveOptions {
        revision_margin: revisions,
        ..EtcdMoveOptions::default()
    };
    let mover = EtcdMover::new(source, target, &space, &space, options);
    let started = Instant::now();
    common::ok(mover.copy_step(&mut Checkpoint::default()).await, "revision bump");
    let bumped = mover.revisions_bumped();
    common::measured("revision bump", usize::try_from(bumped).unwrap_or(usize::MAX));
    bumped as f64 / started.elapsed().as_secs_f64()
}

/// `median (min–max)` of `values`.
fn summary(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    format!("{median:.2} s ({:.2}–{:.2})", values[0], values[values.len() - 1])
}

#[tokio::main]
async fn main() {
    let size = common::Size::from_env();
    let sizes: Vec<usize> = std::env::var("MIGRATE_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| size.pick(vec![200], vec![1_000, 10_000, 50_000]));
    let runs = common::env_number("MIGRATE_BENCH_RUNS", size.pick(1, 3));
    let revisions = size.pick(2_000, 200_000);
    localenv::install_crypto_provider();
    let ca = Ca::new("bench-ca").unwrap();
    let speed = bump_speed(&ca, revisions).await;
    println!("etcd migration, writer at 20 objects/s, {runs} runs each; median (min–max)");
    println!(
        "| objects | total (copy → finish) | copy | catch-up | freeze (freeze → finish Done) | verify | revisions bumped |"
    );
    println!("|---|---|---|---|---|---|---|");
    common::measured("sizes", sizes.len());
    for n in sizes {
        let mut results = Vec::new();
        for index in 0..runs {
            results.push(run(&ca, n, index).await);
        }
        if !common::measured(&format!("{n} objects"), results.len()) {
            continue;
        }
        let pick = |f: fn(&Run) -> f64| summary(results.iter().map(f).collect());
        let bumped: Vec<u64> = results.iter().map(|r| r.bumped).collect();
        println!(
            "| {n} | {} | {} | {} | {} | {} | {bumped:?} |",
            pick(Run::total),
            pick(|r| r.copy),
            pick(|r| r.catch_up),
            pick(|r| r.freeze),
            pick(|r| r.verify),
        );
    }
    println!(
        "revision bump: {speed:.0} revisions/s ({revisions} empty puts, 64 in flight, one TLS connection)"
    );
    common::exit_if_failed();
}

//! Live migration of a kine tenant between two SQL DataStores (issue 21): `cargo bench --bench
//! migrate_kine` (sizes from `MIGRATE_BENCH_SIZES`, default `1000,10000,50000`; runs from
//! `MIGRATE_BENCH_RUNS`, default 3).
//!
//! For PostgreSQL and MariaDB (one local server each, source and target tenants on it), each size is
//! written once through a kine on the source (values of 1–2 KiB); every run then migrates it to a fresh
//! target while a writer puts 20 objects/s through the source's kine: copy, catch up until fewer than 20
//! rows lag, freeze, finish, and verify (untimed), then thaw for the next run. It reports the total time
//! (first copy step → finish done) and the freeze time (freeze → finish done), median and min–max.
//!
//! `TENANTPLANE_BENCH_SIZE=smoke` moves 200 objects once per backend. A failed load or migration step, a
//! verification that differs, or a size with no run fails the run (exit 1).

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

use etcd_client::Client;
use futures::{StreamExt as _, stream};
use tenantplane::{
    datastore::{
        Driver as _, Owner, SqlCredentials, SqlSettings, TenantCredentials, TenantSpace,
        migrate::{
            Checkpoint, Mover as _, Step,
            sql::{KineMover, KineSpace},
        },
        mysql::MySqlDriver,
        postgres::PostgresDriver,
    },
    k8s::crd,
};
use tenantplane_devenv::localenv::{self, kine::LocalKine, mariadb::LocalMariaDb, postgres::LocalPostgres};

mod common;

/// Puts in flight while loading.
const LOAD_CONCURRENCY: usize = 64;

/// The writer's pace during a migration: 20 objects/s.
const WRITE_EVERY: Duration = Duration::from_millis(50);

#[derive(Clone, Copy)]
enum Backend {
    Postgres,
    MariaDb,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "PostgreSQL",
            Backend::MariaDb => "MariaDB",
        }
    }

    fn kind(self) -> crd::Driver {
        match self {
            Backend::Postgres => crd::Driver::PostgreSQL,
            Backend::MariaDb => crd::Driver::MySQL,
        }
    }
}

/// A fresh tenant space on `settings`, provisioned by the real driver.
async fn provision(backend: Backend, settings: &SqlSettings, name: &str) -> (TenantSpace, SqlCredentials) {
    let uid = uuid::Uuid::new_v4().to_string();
    let owner = Owner::new(&uid, "bench", &format!("cp-{}", &uid[..8])).unwrap();
    let tenant = TenantSpace::new(name, name, owner).unwrap();
    let creds = match backend {
        Backend::Postgres => {
            PostgresDriver::new(settings.clone())
                .unwrap()
                .provision(&tenant)
                .await
        }
        Backend::MariaDb => {
            MySqlDriver::new(settings.clone())
                .unwrap()
                .provision(&tenant)
                .await
        }
    };
    match creds.unwrap() {
        TenantCredentials::Sql(creds) => (tenant, creds),
        _ => panic!("SQL drivers return SQL credentials"),
    }
}

fn kine_dsn(backend: Backend, c: &SqlCredentials) -> String {
    let password = c.password.expose();
    match backend {
        Backend::Postgres => format!(
            "postgres://{}:{password}@{}/{}?sslmode=disable",
            c.user, c.endpoint, c.database
        ),
        Backend::MariaDb => format!("mysql://{}:{password}@tcp({})/{}", c.user, c.endpoint, c.database),
    }
}

/// A value of 1–2 KiB that differs per object.
fn value(i: usize) -> Vec<u8> {
    let len = 1024 + (i * 7919) % 1024;
    (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect()
}

/// Writes `n` objects through kine; a failed put fails `scenario`.
async fn load(client: &Client, n: usize, scenario: &str) {
    stream::iter(0..n)
        .for_each_concurrent(LOAD_CONCURRENCY, |i| {
            let mut kv = client.kv_client();
            async move {
                let put = kv
                    .put(format!("/registry/configmaps/bench/cm-{i:06}"), value(i), None)
                    .await;
                common::ok(put, &format!("{scenario}: load"));
            }
        })
        .await;
}

/// Puts one object every [`WRITE_EVERY`] until `stop` (during the freeze a put waits for the thaw).
fn writer(client: &Client, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut kv = client.kv_client();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WRITE_EVERY);
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let _ = kv
                .put(format!("/registry/leases/bench/w-{:03}", n % 100), value(n), None)
                .await;
            n += 1;
        }
    })
}

/// One migration to a fresh target; returns (total, freeze) seconds.
async fn migrate(backend: Backend, settings: &SqlSettings, source: &TenantSpace, run: &str) -> (f64, f64) {
    let (target, _) = provision(backend, settings, &format!("bench_dst_{run}")).await;
    let space = |tenant: &TenantSpace| KineSpace {
        settings: settings.clone(),
        tenant: tenant.clone(),
    };
    let mover = KineMover::new(backend.kind(), space(source), space(&target)).unwrap();
    let mut checkpoint = Checkpoint::default();
    let step = |what: &str| format!("{} run {run}: {what}", backend.name());
    let started = Instant::now();
    while common::ok(mover.copy_step(&mut checkpoint).await, &step("copy")) == Step::More {}
    while common::ok(mover.catch_up_step(&mut checkpoint).await, &step("catch-up")) >= 20 {}
    let frozen = Instant::now();
    common::ok(mover.freeze().await, &step("freeze"));
    while common::ok(mover.finish_step(&mut checkpoint).await, &step("finish")) == Step::More {}
    let (total, freeze) = (started.elapsed(), frozen.elapsed());
    let verification = common::ok(mover.verify().await, &step("verify"));
    assert!(
        verification.equal(),
        "{}: the target differs: {verification:?}",
        step("verify")
    );
    common::ok(mover.thaw().await, &step("thaw"));
    match backend {
        Backend::Postgres => {
            PostgresDriver::new(settings.clone())
                .unwrap()
                .deprovision(&target)
                .await
        }
        Backend::MariaDb => {
            MySqlDriver::new(settings.clone())
                .unwrap()
                .deprovision(&target)
                .await
        }
    }
    .unwrap();
    (total.as_secs_f64(), freeze.as_secs_f64())
}

/// "median s (min–max)" of `values`.
fn summary(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    format!("{median:.2} s ({:.2}–{:.2})", values[0], values[values.len() - 1])
}

/// Every size on one backend: one row of the table per size.
async fn bench(backend: Backend, settings: &SqlSettings, sizes: &[usize], runs: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for &n in sizes {
        let (source, creds) = provision(backend, settings, &format!("bench_src_{n}")).await;
        let dir = localenv::scratch_dir(&format!("bench-migrate-kine-{n}")).unwrap();
        let kine = LocalKine::start(dir, &kine_dsn(backend, &creds)).await.unwrap();
        let client = Client::connect([kine.url()], None).await.unwrap();
        let loaded = Instant::now();
        load(&client, n, &format!("{} n={n}", backend.name())).await;
        let load_secs = loaded.elapsed().as_secs_f64();
        let (mut totals, mut freezes) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let stop = Arc::new(AtomicBool::new(false));
            let writes = writer(&client, stop.clone());
            let (total, freeze) = migrate(backend, settings, &source, &format!("{n}_{run}")).await;
            stop.store(true, Ordering::Relaxed);
            writes.await.unwrap();
            eprintln!(
                "{} n={n} run {run}: total {total:.2} s, freeze {freeze:.3} s",
                backend.name()
            );
            totals.push(total);
            freezes.push(freeze);
        }
        if !common::measured(&format!("{} n={n}", backend.name()), totals.len()) {
            continue;
        }
        lines.push(format!(
            "| {} | {n} | {} | {} | {load_secs:.1} s |",
            backend.name(),
            summary(totals),
            summary(freezes)
        ));
        drop(kine);
    }
    lines
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|v| v.trim().parse().unwrap())
        .collect()
}

#[tokio::main]
async fn main() {
    let size = common::Size::from_env();
    let sizes = env_list("MIGRATE_BENCH_SIZES", size.pick("200", "1000,10000,50000"));
    let runs = common::env_number("MIGRATE_BENCH_RUNS", size.pick(1, 3));
    common::measured("sizes", sizes.len());
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-migrate-kine").unwrap();
    let pg = LocalPostgres::start(dir.join("pg")).await.unwrap();
    let mariadb = LocalMariaDb::start(dir.join("mariadb")).await.unwrap();
    let pg_settings = SqlSettings::new(format!("127.0.0.1:{}", pg.port()), "postgres", None);
    let my_settings = SqlSettings::new(format!("127.0.0.1:{}", mariadb.port()), "root", None);
    let mut lines = bench(Backend::Postgres, &pg_settings, &sizes, runs).await;
    lines.extend(bench(Backend::MariaDb, &my_settings, &sizes, runs).await);
    println!("{runs} runs each; writer at 20 objects/s through the source's kine during every migration");
    println!("| backend | objects | total, median (min–max) | freeze → finished, median (min–max) | load |");
    println!("|---|---|---|---|---|");
    for line in lines {
        println!("{line}");
    }
    common::exit_if_failed();
}

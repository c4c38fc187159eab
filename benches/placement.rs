//! Placement engine benchmarks: single decisions over 1,000 DataStores, 100k sequential placements, and how the
//! cost grows from 10 to 10,000 DataStores, for each policy.
//!
//! Run: `cargo bench --bench placement -- --warm-up-time 1 --measurement-time 3`. Results: `BENCHMARKS.md`.
//! `cargo test --bench placement` runs every benchmark once (criterion's test mode); with
//! `TENANTPLANE_BENCH_SIZE=smoke` the sequential run is 1,000 placements. A decision the bench measures
//! that fails (no DataStore chosen) panics, naming the benchmark, before it is measured.

use std::hint::black_box;

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use tenantplane::{
    k8s::crd::Driver,
    placement::{
        DataStoreSnapshot, PlacementConfig, PlacementRequest, Policy, PoolSnapshot, SizeClass, Snapshot,
        choose, place,
    },
};
use uuid::Uuid;

mod common;

const POLICIES: [(Policy, &str); 4] = [
    (Policy::Spread, "spread"),
    (Policy::Binpack, "binpack"),
    (Policy::Rendezvous, "rendezvous"),
    (Policy::Dedicated, "dedicated"),
];

/// Placements in the sequential run; shortened at smoke size and in unoptimised builds (`cargo test
/// --all-targets` runs each once).
fn sequential_count() -> usize {
    let full = if cfg!(debug_assertions) { 1_000 } else { 100_000 };
    common::Size::from_env().pick(1_000, full)
}

/// Panics, naming `benchmark`, when a decision it measures fails: a benchmark of errors measures nothing.
/// Checks every request at full size, the first 16 at smoke size.
fn decisions_succeed(benchmark: &str, reqs: &[PlacementRequest], s: &Snapshot, config: &PlacementConfig) {
    let checked = common::Size::from_env().pick(16, reqs.len());
    for r in &reqs[..checked.min(reqs.len())] {
        if let Err(e) = choose(r, s, config) {
            panic!("{benchmark}: a placement decision failed: {e}");
        }
    }
}

/// One pool of `n` ready etcd DataStores with `capacity` slots and mixed loads (half of them empty when
/// `Dedicated`), named like real ones.
fn snapshot(policy: Policy, n: usize, capacity: u32) -> Snapshot {
    let datastores = (0..n)
        .map(|i| {
            let i32 = u32::try_from(i).unwrap_or(u32::MAX);
            let load = match policy {
                Policy::Dedicated => i32 % 2,
                _ => i32.wrapping_mul(7_919) % (capacity / 2).max(1),
            };
            DataStoreSnapshot {
                name: format!("etcd-{i:05}"),
                pool: "main".into(),
                driver: Driver::Etcd,
                labels: [("region".to_owned(), "eu-west".to_owned())].into(),
                ready: true,
                cordoned: false,
                capacity_tenants: capacity,
                capacity_bytes: None,
                load_tenants: load,
                load_bytes: 0,
                ca_id: Some("sha256:ca".into()),
            }
        })
        .collect();
    Snapshot {
        pools: vec![PoolSnapshot {
            name: "main".into(),
            policy,
            datastores,
        }],
    }
}

/// Requests with UUID-shaped control-plane ids, as the API will send them.
fn requests(n: usize) -> Vec<PlacementRequest> {
    (0..n)
        .map(|i| {
            let cp = format!("{:08x}-0000-4000-8000-{:012x}", i, i.wrapping_mul(2_654_435_761));
            PlacementRequest::new(Uuid::nil(), cp, SizeClass::Small)
        })
        .collect()
}

fn decide_over_1000(c: &mut Criterion) {
    let config = PlacementConfig::default();
    let reqs = requests(1_024);
    let mut group = c.benchmark_group("decide_1000");
    group.throughput(Throughput::Elements(1));
    for (policy, name) in POLICIES {
        let s = snapshot(policy, 1_000, 200);
        decisions_succeed(&format!("decide_1000/{name}"), &reqs, &s, &config);
        let mut i = 0;
        group.bench_function(BenchmarkId::new("choose", name), |b| {
            b.iter(|| {
                i = (i + 1) % reqs.len();
                black_box(choose(black_box(&reqs[i]), &s, &config).is_ok())
            })
        });
        group.bench_function(BenchmarkId::new("place_with_report", name), |b| {
            b.iter(|| {
                i = (i + 1) % reqs.len();
                black_box(place(black_box(&reqs[i]), &s, &config).is_ok())
            })
        });
    }
    group.finish();
}

fn sequential(c: &mut Criterion) {
    let config = PlacementConfig::default();
    let mut group = c.benchmark_group("sequential");
    // One iteration is a whole run: ten of them, each on a fresh copy of the snapshot.
    group.sample_size(10).sampling_mode(SamplingMode::Flat);
    for (policy, name) in POLICIES {
        // A Dedicated pool holds one tenant per DataStore: 1,000 placements fill 1,000 empty DataStores.
        let (s, count) = match policy {
            Policy::Dedicated => {
                let mut s = snapshot(policy, 1_000, 1);
                s.pools[0].datastores.iter_mut().for_each(|d| d.load_tenants = 0);
                (s, sequential_count().min(1_000))
            }
            _ => (snapshot(policy, 1_000, 200), sequential_count()),
        };
        let reqs = requests(count);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(BenchmarkId::new(name, count), |b| {
            b.iter_batched(
                || s.clone(),
                |mut s| {
                    for r in &reqs {
                        match choose(r, &s, &config) {
                            Ok(choice) => s.record(&choice, r.size_class, &config),
                            Err(e) => panic!("sequential/{name}: a placement failed: {e}"),
                        }
                    }
                    s
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn growth(c: &mut Criterion) {
    let config = PlacementConfig::default();
    let reqs = requests(1_024);
    let mut group = c.benchmark_group("growth");
    group.throughput(Throughput::Elements(1));
    for (policy, name) in POLICIES {
        for n in [10, 100, 1_000, 10_000] {
            let s = snapshot(policy, n, 200);
            decisions_succeed(&format!("growth/{name}/{n}"), &reqs, &s, &config);
            let mut i = 0;
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    i = (i + 1) % reqs.len();
                    black_box(choose(black_box(&reqs[i]), &s, &config).is_ok())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decide_over_1000, sequential, growth);
criterion_main!(benches);

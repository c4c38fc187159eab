//! Property tests over random pools and request streams; each decision is applied to the load as the store would.

use std::collections::BTreeMap;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::k8s::crd::Driver;

const BYTES: BytesPerSize = BytesPerSize {
    small: 10,
    medium: 40,
    large: 100,
};

fn config() -> PlacementConfig {
    PlacementConfig {
        auto_override_pool: Some("ovr".into()),
        bytes_per_tenant: Some(BYTES),
        ..Default::default()
    }
}

fn arb_driver(nats_weight: u32) -> impl Strategy<Value = Driver> {
    prop_oneof![
        4 => Just(Driver::Etcd),
        1 => Just(Driver::MySQL),
        1 => Just(Driver::PostgreSQL),
        nats_weight => Just(Driver::Nats),
    ]
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Spread),
        Just(Policy::Binpack),
        Just(Policy::Rendezvous),
        Just(Policy::Dedicated)
    ]
}

fn arb_data_store(nats_weight: u32) -> impl Strategy<Value = DataStoreSnapshot> {
    (
        arb_driver(nats_weight),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.1),
        0u32..6,
        0u32..4,
        prop::option::weighted(0.3, 50u64..400),
        0u64..120,
        prop_oneof![Just(None), Just(Some("ca-1")), Just(Some("ca-2"))],
        prop::option::of(prop_oneof![Just("eu"), Just("us")]),
    )
        .prop_map(
            |(driver, ready, cordoned, cap, load, cap_bytes, load_bytes, ca, region)| DataStoreSnapshot {
                name: String::new(),
                pool: String::new(),
                driver,
                labels: region
                    .map(|r| BTreeMap::from([("region".to_owned(), r.to_owned())]))
                    .unwrap_or_default(),
                ready,
                cordoned,
                capacity_tenants: cap,
                capacity_bytes: cap_bytes,
                load_tenants: load,
                load_bytes,
                ca_id: ca.map(str::to_owned),
            },
        )
}

fn arb_pool(name: &'static str, nats_weight: u32) -> impl Strategy<Value = PoolSnapshot> {
    (
        arb_policy(),
        prop::collection::vec(arb_data_store(nats_weight), 0..9),
    )
        .prop_map(move |(policy, mut dss)| {
            for (i, d) in dss.iter_mut().enumerate() {
                d.name = format!("{name}-{i}");
                d.pool = name.to_owned();
            }
            PoolSnapshot {
                name: name.to_owned(),
                policy,
                datastores: dss,
            }
        })
}

fn arb_snapshot(nats_weight: u32) -> impl Strategy<Value = Snapshot> {
    (
        arb_pool("main", nats_weight),
        arb_pool("spare", nats_weight),
        arb_pool("ovr", nats_weight),
    )
        .prop_map(|(a, b, c)| Snapshot { pools: vec![a, b, c] })
}

fn arb_request() -> impl Strategy<Value = PlacementRequest> {
    (
        0u32..10_000,
        prop_oneof![
            Just(SizeClass::Small),
            Just(SizeClass::Medium),
            Just(SizeClass::Large)
        ],
        prop::collection::vec(arb_driver(1), 0..3),
        prop::option::weighted(0.2, prop_oneof![Just("eu"), Just("us")]),
        prop_oneof![Just(None), Just(Some("main")), Just(Some("spare"))],
        prop_oneof![
            2 => Just(OffloadMode::None),
            2 => Just(OffloadMode::Auto),
            1 => Just(OffloadMode::Pool("ovr".into())),
            1 => Just(OffloadMode::Pool("main".into())),
        ],
    )
        .prop_map(|(cp, size, drivers, region, pool, offload)| PlacementRequest {
            tenant_id: Uuid::nil(),
            control_plane_id: format!("cp-{cp}"),
            size_class: size,
            allowed_drivers: drivers,
            label_selector: region
                .map(|r| BTreeMap::from([("region".to_owned(), r.to_owned())]))
                .unwrap_or_default(),
            pool: pool.map(str::to_owned),
            offload,
        })
}

/// The resources a request must offload and the pool, computed independently of the engine.
fn expected_offload(r: &PlacementRequest, c: &PlacementConfig) -> Option<(String, Vec<&'static str>)> {
    let (pool, min) = match &r.offload {
        OffloadMode::None => return None,
        OffloadMode::Auto => (c.auto_override_pool.clone()?, SizeClass::Medium),
        OffloadMode::Pool(p) => (p.clone(), SizeClass::Small),
    };
    if r.size_class < min {
        return None;
    }
    let mut resources = vec![EVENTS];
    if r.size_class == SizeClass::Large {
        resources.push(LEASES);
    }
    resources.retain(|res| c.offloadable.contains(res));
    Some((pool, resources))
}

/// Every hard constraint a DataStore must pass in any role, written out independently of the engine.
fn fits_common(pool: &PoolSnapshot, d: &DataStoreSnapshot, bytes: u64) -> bool {
    let exclusive = pool.policy == Policy::Dedicated || d.driver == Driver::Nats;
    let cap = if exclusive {
        d.capacity_tenants.min(1)
    } else {
        d.capacity_tenants
    };
    d.ready
        && !d.cordoned
        && d.load_tenants < cap
        && !(exclusive && d.load_tenants > 0)
        && d.capacity_bytes.is_none_or(|c| d.load_bytes + bytes <= c)
}

fn fits_primary(
    r: &PlacementRequest,
    pool: &PoolSnapshot,
    d: &DataStoreSnapshot,
    bytes: u64,
    etcd: bool,
) -> bool {
    r.pool.as_ref().is_none_or(|p| *p == pool.name)
        && (r.allowed_drivers.is_empty() || r.allowed_drivers.contains(&d.driver))
        && (!etcd || d.driver == Driver::Etcd)
        && r.label_selector.iter().all(|(k, v)| d.labels.get(k) == Some(v))
        && fits_common(pool, d, bytes)
}

fn fits_override(p: &DataStoreSnapshot, pool: &PoolSnapshot, t: &DataStoreSnapshot, bytes: u64) -> bool {
    t.driver == Driver::Etcd
        && t.name != p.name
        && t.ca_id.is_some()
        && t.ca_id == p.ca_id
        && fits_common(pool, t, bytes)
}

fn all(s: &Snapshot) -> impl Iterator<Item = (&PoolSnapshot, &DataStoreSnapshot)> {
    s.pools
        .iter()
        .flat_map(|p| p.datastores.iter().map(move |d| (p, d)))
}

/// Checks one answer of the engine against the snapshot it was computed from.
fn check(r: &PlacementRequest, s: &Snapshot, c: &PlacementConfig) -> Result<Option<Choice>, TestCaseError> {
    let bytes = c.bytes_for(r.size_class);
    let plan = expected_offload(r, c);
    let offloads = plan.as_ref().is_some_and(|(_, res)| !res.is_empty());
    let override_pool = plan
        .as_ref()
        .and_then(|(p, _)| s.pools.iter().find(|x| x.name == *p));
    let answer = choose(r, s, c);
    match &answer {
        Ok(choice) => {
            let pool = &s.pools[choice.primary.pool];
            let p = s.data_store(choice.primary).unwrap();
            prop_assert!(
                fits_primary(r, pool, p, bytes, offloads),
                "primary {} breaks a constraint",
                p.name
            );
            match (choice.offload, &plan) {
                (None, _) => prop_assert!(!offloads, "offload expected"),
                (Some(o), Some((pool_name, resources))) => {
                    prop_assert_eq!(o.resources, resources.as_slice());
                    let mut unique = o.resources.to_vec();
                    unique.dedup();
                    prop_assert_eq!(unique.len(), o.resources.len());
                    prop_assert!(o.resources.iter().all(|res| c.offloadable.contains(res)));
                    let tpool = &s.pools[o.target.pool];
                    prop_assert_eq!(&tpool.name, pool_name);
                    let t = s.data_store(o.target).unwrap();
                    prop_assert!(p.driver == Driver::Etcd);
                    prop_assert!(
                        fits_override(p, tpool, t, bytes),
                        "override {} breaks a constraint",
                        t.name
                    );
                }
                (Some(_), None) => prop_assert!(false, "unexpected offload"),
            }
            // The report agrees with the fast path.
            let d = place(r, s, c).unwrap();
            prop_assert_eq!(&d.primary, &p.name);
            let chosen = d.candidates.iter().find(|x| x.data_store == p.name).unwrap();
            prop_assert!(matches!(chosen.outcome, Outcome::Scored(_)));
        }
        Err(PlacementError::NoCandidate { summary }) => {
            let n = all(s)
                .filter(|(pool, d)| fits_primary(r, pool, d, bytes, offloads))
                .count();
            prop_assert_eq!(n, 0, "a primary fits");
            prop_assert!(summary.iter().all(|(_, count)| *count > 0));
        }
        Err(PlacementError::NoOverrideCandidate { .. }) => {
            let pool = override_pool.unwrap();
            let pair = all(s)
                .filter(|(pp, d)| fits_primary(r, pp, d, bytes, true))
                .any(|(_, p)| pool.datastores.iter().any(|t| fits_override(p, pool, t, bytes)));
            prop_assert!(!pair, "a primary and an override fit together");
        }
        Err(e) => prop_assert!(false, "unexpected error {e}"),
    }
    Ok(answer.ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn no_decision_ever_violates_a_hard_constraint(
        mut snapshot in arb_snapshot(2),
        requests in prop::collection::vec(arb_request(), 1..30),
    ) {
        let c = config();
        for r in &requests {
            if let Some(choice) = check(r, &snapshot, &c)? {
                snapshot.record(&choice, r.size_class, &c);
            }
        }
    }

    #[test]
    fn nats_never_gets_a_second_tenant(
        mut snapshot in arb_snapshot(12),
        requests in prop::collection::vec(arb_request(), 1..40),
    ) {
        let c = config();
        for r in &requests {
            if let Ok(choice) = choose(r, &snapshot, &c) {
                let used = std::iter::once(choice.primary).chain(choice.offload.map(|o| o.target));
                for slot in used {
                    let d = snapshot.data_store(slot).unwrap();
                    prop_assert!(d.driver != Driver::Nats || d.load_tenants == 0, "{} already has a tenant", d.name);
                }
                snapshot.record(&choice, r.size_class, &c);
            }
        }
    }

    #[test]
    fn spread_keeps_max_minus_min_load_within_one(k in 1usize..12, cap in 1u32..20, fill in 0.0f64..=1.0, seed: u64) {
        let mut s = uniform(Policy::Spread, k, cap);
        let n = (k as f64 * f64::from(cap) * fill) as usize;
        for i in 0..n {
            place_one(&mut s, &format!("cp-{seed}-{i}"))?;
            let loads: Vec<u32> = s.pools[0].datastores.iter().map(|d| d.load_tenants).collect();
            let (max, min) = (loads.iter().max().unwrap(), loads.iter().min().unwrap());
            prop_assert!(max - min <= 1, "loads {:?}", loads);
        }
    }

    #[test]
    fn binpack_uses_the_fewest_datastores(k in 1usize..12, cap in 1u32..20, fill in 0.0f64..=1.0, seed: u64) {
        let mut s = uniform(Policy::Binpack, k, cap);
        let n = (k as f64 * f64::from(cap) * fill) as usize;
        for i in 0..n {
            place_one(&mut s, &format!("cp-{seed}-{i}"))?;
        }
        let used = s.pools[0].datastores.iter().filter(|d| d.load_tenants > 0).count();
        prop_assert_eq!(used, n.div_ceil(cap as usize));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rendezvous_moves_about_one_nth_when_a_datastore_is_added(n in 2usize..=16, seed: u64) {
        const TENANTS: usize = 2_000;
        let names: Vec<String> = (0..n).map(|i| format!("ds-{seed:x}-{i}")).collect();
        let pool = |count: usize| Snapshot {
            pools: vec![PoolSnapshot {
                name: "main".into(),
                policy: Policy::Rendezvous,
                datastores: names[..count].iter().map(|name| empty(name, 1_000_000)).collect(),
            }],
        };
        let (before, after) = (pool(n - 1), pool(n));
        let c = PlacementConfig::default();
        let mut moved = 0;
        for i in 0..TENANTS {
            let r = PlacementRequest::new(Uuid::nil(), format!("cp-{seed}-{i}"), SizeClass::Small);
            let (a, b) = (choose(&r, &before, &c).unwrap().primary, choose(&r, &after, &c).unwrap().primary);
            if a != b {
                moved += 1;
                prop_assert_eq!(b.index, n - 1, "a tenant moved between old DataStores");
            }
        }
        let bound = (1.0 / n as f64 + 0.05) * TENANTS as f64;
        prop_assert!(f64::from(moved) <= bound, "{moved} of {TENANTS} moved with n = {n}");
    }
}

fn empty(name: &str, cap: u32) -> DataStoreSnapshot {
    DataStoreSnapshot {
        name: name.into(),
        pool: "main".into(),
        driver: Driver::Etcd,
        labels: BTreeMap::new(),
        ready: true,
        cordoned: false,
        capacity_tenants: cap,
        capacity_bytes: None,
        load_tenants: 0,
        load_bytes: 0,
        ca_id: None,
    }
}

fn uniform(policy: Policy, k: usize, cap: u32) -> Snapshot {
    let datastores = (0..k).map(|i| empty(&format!("ds-{i:02}"), cap)).collect();
    Snapshot {
        pools: vec![PoolSnapshot {
            name: "main".into(),
            policy,
            datastores,
        }],
    }
}

fn place_one(s: &mut Snapshot, cp: &str) -> Result<(), TestCaseError> {
    let c = PlacementConfig::default();
    let r = PlacementRequest::new(Uuid::nil(), cp, SizeClass::Small);
    let choice = choose(&r, s, &c).map_err(|e| TestCaseError::fail(e.to_string()))?;
    s.record(&choice, r.size_class, &c);
    Ok(())
}

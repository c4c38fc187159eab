//! Unit tests with exact outcomes: policies, hard constraints, offload modes, error texts and drain plans.

use std::collections::BTreeMap;

use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::k8s::crd::Driver;

fn ds(name: &str, driver: Driver) -> DataStoreSnapshot {
    DataStoreSnapshot {
        name: name.into(),
        pool: String::new(),
        driver,
        labels: BTreeMap::new(),
        ready: true,
        cordoned: false,
        capacity_tenants: 10,
        capacity_bytes: None,
        load_tenants: 0,
        load_bytes: 0,
        ca_id: Some("ca-1".into()),
    }
}

fn etcd(name: &str) -> DataStoreSnapshot {
    ds(name, Driver::Etcd)
}

fn loaded(name: &str, load: u32, capacity: u32) -> DataStoreSnapshot {
    DataStoreSnapshot {
        load_tenants: load,
        capacity_tenants: capacity,
        ..etcd(name)
    }
}

fn pool(name: &str, policy: Policy, datastores: Vec<DataStoreSnapshot>) -> PoolSnapshot {
    let datastores = datastores
        .into_iter()
        .map(|d| DataStoreSnapshot {
            pool: name.into(),
            ..d
        })
        .collect();
    PoolSnapshot {
        name: name.into(),
        policy,
        datastores,
    }
}

fn snap(pools: Vec<PoolSnapshot>) -> Snapshot {
    Snapshot { pools }
}

fn one_pool(policy: Policy, datastores: Vec<DataStoreSnapshot>) -> Snapshot {
    snap(vec![pool("main", policy, datastores)])
}

fn req(cp: &str, size: SizeClass) -> PlacementRequest {
    PlacementRequest::new(Uuid::nil(), cp, size)
}

fn small(cp: &str) -> PlacementRequest {
    req(cp, SizeClass::Small)
}

fn cfg() -> PlacementConfig {
    PlacementConfig::default()
}

fn outcome(decision: &Decision, name: &str) -> Outcome {
    decision
        .candidates
        .iter()
        .find(|c| c.data_store == name)
        .unwrap()
        .outcome
}

fn override_outcome(decision: &Decision, name: &str) -> Outcome {
    decision
        .override_candidates
        .iter()
        .find(|c| c.data_store == name)
        .unwrap()
        .outcome
}

/// Places a small tenant and checks that `rejected` is turned down for `reason` while `fallback` is chosen.
fn assert_rejected(
    snapshot: &Snapshot,
    request: &PlacementRequest,
    config: &PlacementConfig,
    reason: Reason,
) {
    let d = place(request, snapshot, config).unwrap();
    assert_eq!(d.primary, "fallback");
    assert_eq!(outcome(&d, "rejected"), Outcome::Rejected(reason));
}

// ---------------------------------------------------------------- policies

#[test]
fn spread_picks_the_datastore_least_loaded_after_placement() {
    let s = one_pool(
        Policy::Spread,
        vec![loaded("a", 5, 10), loaded("b", 2, 10), loaded("c", 1, 4)],
    );
    let d = place(&small("cp"), &s, &cfg()).unwrap();
    assert_eq!(d.primary, "b");
    assert_eq!(outcome(&d, "a"), Outcome::Scored(1.0 - 6.0 / 10.0));
    assert_eq!(outcome(&d, "b"), Outcome::Scored(1.0 - 3.0 / 10.0));
    assert_eq!(outcome(&d, "c"), Outcome::Scored(1.0 - 2.0 / 4.0));
    assert!(d.overrides.is_empty() && d.override_candidates.is_empty());
}

#[test]
fn spread_prefers_the_bigger_datastore_when_fractions_after_placement_differ() {
    // Before placement both are empty; after it, c would be 1/1 full and b only 1/100.
    let s = one_pool(Policy::Spread, vec![loaded("c", 0, 1), loaded("b", 0, 100)]);
    assert_eq!(place(&small("cp"), &s, &cfg()).unwrap().primary, "b");
}

#[test]
fn spread_breaks_ties_by_name() {
    let s = one_pool(
        Policy::Spread,
        vec![loaded("b", 2, 10), loaded("a", 2, 10), loaded("c", 2, 10)],
    );
    assert_eq!(place(&small("cp"), &s, &cfg()).unwrap().primary, "a");
}

#[test]
fn binpack_picks_the_most_loaded_datastore_that_still_fits() {
    let s = one_pool(
        Policy::Binpack,
        vec![loaded("a", 3, 10), loaded("b", 10, 10), loaded("c", 9, 10)],
    );
    let d = place(&small("cp"), &s, &cfg()).unwrap();
    assert_eq!(d.primary, "c");
    assert_eq!(outcome(&d, "a"), Outcome::Scored(4.0 / 10.0));
    assert_eq!(outcome(&d, "b"), Outcome::Rejected(Reason::AtCapacity));
    assert_eq!(outcome(&d, "c"), Outcome::Scored(1.0));
}

#[test]
fn binpack_breaks_ties_by_name() {
    let s = one_pool(
        Policy::Binpack,
        vec![loaded("z", 4, 10), loaded("y", 4, 10), loaded("x", 1, 10)],
    );
    assert_eq!(place(&small("cp"), &s, &cfg()).unwrap().primary, "y");
}

#[test]
fn rendezvous_picks_the_highest_hash_and_ignores_load() {
    let names = ["etcd-a", "etcd-b", "etcd-c"];
    let expected = *names.iter().max_by_key(|n| rendezvous_hash("cp-7", n)).unwrap();
    // Frozen: the hash never changes, so neither does this answer.
    assert_eq!(expected, FROZEN_RENDEZVOUS_CP7);
    let mut s = one_pool(Policy::Rendezvous, names.iter().map(|n| etcd(n)).collect());
    assert_eq!(place(&small("cp-7"), &s, &cfg()).unwrap().primary, expected);
    // Load does not move it, only a full DataStore does.
    for d in &mut s.pools[0].datastores {
        d.load_tenants = if d.name == expected { 9 } else { 0 };
    }
    assert_eq!(place(&small("cp-7"), &s, &cfg()).unwrap().primary, expected);
    let full = s.find(expected).unwrap();
    s.data_store_mut(full).unwrap().load_tenants = 10;
    let d = place(&small("cp-7"), &s, &cfg()).unwrap();
    assert_ne!(d.primary, expected);
    assert_eq!(outcome(&d, expected), Outcome::Rejected(Reason::AtCapacity));
}

const FROZEN_RENDEZVOUS_CP7: &str = "etcd-a";

#[test]
fn rendezvous_shares_tenants_in_proportion_to_capacity() {
    let s = one_pool(
        Policy::Rendezvous,
        vec![loaded("small", 0, 1_000), loaded("big", 0, 3_000)],
    );
    let on_big = (0..4_000)
        .filter(|i| {
            choose(&small(&format!("cp-{i}")), &s, &cfg())
                .unwrap()
                .primary
                .index
                == 1
        })
        .count();
    let share = on_big as f64 / 4_000.0;
    assert!((0.72..=0.78).contains(&share), "big got {share}");
}

#[test]
fn dedicated_takes_only_empty_datastores_first_by_name() {
    let s = one_pool(
        Policy::Dedicated,
        vec![loaded("c", 0, 5), loaded("a", 1, 5), loaded("b", 0, 5)],
    );
    let d = place(&small("cp"), &s, &cfg()).unwrap();
    assert_eq!(d.primary, "b");
    assert_eq!(outcome(&d, "a"), Outcome::Rejected(Reason::DedicatedInUse));
    assert_eq!(outcome(&d, "c"), Outcome::Scored(1.0));
}

#[test]
fn nats_counts_as_one_slot_in_any_pool() {
    let nats = DataStoreSnapshot {
        capacity_tenants: 5,
        ..ds("nats", Driver::Nats)
    };
    let s = one_pool(Policy::Spread, vec![nats, loaded("etcd", 8, 10)]);
    let d = place(&small("cp"), &s, &cfg()).unwrap();
    // Empty NATS is full after one tenant (1 − 1/1 = 0); etcd has 1 − 9/10 left.
    assert_eq!(outcome(&d, "nats"), Outcome::Scored(0.0));
    assert_eq!(d.primary, "etcd");
}

#[test]
fn pools_are_tried_in_snapshot_order_unless_the_request_names_one() {
    let s = snap(vec![
        pool("first", Policy::Spread, vec![loaded("a", 9, 10)]),
        pool("second", Policy::Spread, vec![loaded("b", 0, 10)]),
    ]);
    assert_eq!(place(&small("cp"), &s, &cfg()).unwrap().primary, "a");
    let in_second = PlacementRequest {
        pool: Some("second".into()),
        ..small("cp")
    };
    let d = place(&in_second, &s, &cfg()).unwrap();
    assert_eq!((d.primary.as_str(), d.candidates.len()), ("b", 1));
    let unknown = PlacementRequest {
        pool: Some("third".into()),
        ..small("cp")
    };
    assert_eq!(
        place(&unknown, &s, &cfg()),
        Err(PlacementError::UnknownPool { pool: "third".into() })
    );
}

#[test]
fn a_full_first_pool_falls_through_to_the_next() {
    let s = snap(vec![
        pool("first", Policy::Spread, vec![loaded("a", 10, 10)]),
        pool(
            "second",
            Policy::Binpack,
            vec![loaded("b", 3, 10), loaded("c", 5, 10)],
        ),
    ]);
    let d = place(&small("cp"), &s, &cfg()).unwrap();
    assert_eq!(d.primary, "c");
    assert_eq!(d.candidates[0].pool, "first");
    assert_eq!(d.candidates[0].outcome, Outcome::Rejected(Reason::AtCapacity));
}

// ---------------------------------------------------------------- hard constraints, one each

#[test]
fn a_driver_that_is_not_allowed_is_rejected() {
    let s = one_pool(
        Policy::Spread,
        vec![ds("rejected", Driver::MySQL), etcd("fallback")],
    );
    let r = PlacementRequest {
        allowed_drivers: vec![Driver::Etcd, Driver::PostgreSQL],
        ..small("cp")
    };
    assert_rejected(&s, &r, &cfg(), Reason::DriverNotAllowed);
}

#[test]
fn labels_must_match_the_selector_exactly() {
    let mut fallback = etcd("fallback");
    fallback.labels = BTreeMap::from([("region".into(), "eu".into()), ("tier".into(), "gold".into())]);
    let mut rejected = etcd("rejected");
    rejected.labels = BTreeMap::from([("region".into(), "us".into()), ("tier".into(), "gold".into())]);
    let s = one_pool(Policy::Spread, vec![rejected, fallback]);
    let r = PlacementRequest {
        label_selector: BTreeMap::from([("region".into(), "eu".into())]),
        ..small("cp")
    };
    assert_rejected(&s, &r, &cfg(), Reason::LabelMismatch);
}

#[test]
fn a_datastore_that_is_not_ready_is_rejected() {
    let s = one_pool(
        Policy::Spread,
        vec![
            DataStoreSnapshot {
                ready: false,
                ..etcd("rejected")
            },
            loaded("fallback", 9, 10),
        ],
    );
    assert_rejected(&s, &small("cp"), &cfg(), Reason::NotReady);
}

#[test]
fn a_cordoned_datastore_is_rejected() {
    let s = one_pool(
        Policy::Spread,
        vec![
            DataStoreSnapshot {
                cordoned: true,
                ..etcd("rejected")
            },
            loaded("fallback", 9, 10),
        ],
    );
    assert_rejected(&s, &small("cp"), &cfg(), Reason::Cordoned);
}

#[test]
fn a_datastore_at_tenant_capacity_is_rejected() {
    let s = one_pool(
        Policy::Binpack,
        vec![loaded("rejected", 3, 3), loaded("fallback", 0, 3)],
    );
    assert_rejected(&s, &small("cp"), &cfg(), Reason::AtCapacity);
}

#[test]
fn a_datastore_without_room_for_the_byte_estimate_is_rejected() {
    let config = PlacementConfig {
        bytes_per_tenant: Some(BytesPerSize {
            small: 100,
            medium: 1_000,
            large: 10_000,
        }),
        ..cfg()
    };
    let rejected = DataStoreSnapshot {
        capacity_bytes: Some(1_500),
        load_bytes: 600,
        ..etcd("rejected")
    };
    let fallback = DataStoreSnapshot {
        capacity_bytes: Some(1_600),
        load_bytes: 600,
        ..loaded("fallback", 9, 10)
    };
    let s = one_pool(Policy::Spread, vec![rejected, fallback]);
    assert_rejected(&s, &req("cp", SizeClass::Medium), &config, Reason::AtByteCapacity);
    // Without a byte limit the estimate is not checked.
    let unlimited = DataStoreSnapshot {
        capacity_bytes: None,
        load_bytes: u64::MAX,
        ..etcd("x")
    };
    let s = one_pool(Policy::Spread, vec![unlimited]);
    assert_eq!(
        place(&req("cp", SizeClass::Large), &s, &config).unwrap().primary,
        "x"
    );
}

#[test]
fn a_nats_datastore_never_takes_a_second_tenant() {
    let nats = DataStoreSnapshot {
        load_tenants: 1,
        capacity_tenants: 100,
        ..ds("rejected", Driver::Nats)
    };
    let s = one_pool(Policy::Binpack, vec![nats, loaded("fallback", 0, 10)]);
    assert_rejected(&s, &small("cp"), &cfg(), Reason::NatsInUse);
}

#[test]
fn a_used_datastore_in_a_dedicated_pool_is_rejected() {
    let s = one_pool(
        Policy::Dedicated,
        vec![loaded("rejected", 1, 10), loaded("fallback", 0, 10)],
    );
    assert_rejected(&s, &small("cp"), &cfg(), Reason::DedicatedInUse);
}

fn offload_snapshot(primaries: Vec<DataStoreSnapshot>, overrides: Vec<DataStoreSnapshot>) -> Snapshot {
    snap(vec![
        pool("main", Policy::Spread, primaries),
        pool("events", Policy::Spread, overrides),
    ])
}

fn to_events(size: SizeClass) -> PlacementRequest {
    PlacementRequest {
        offload: OffloadMode::Pool("events".into()),
        pool: Some("main".into()),
        ..req("cp", size)
    }
}

#[test]
fn offloading_needs_an_etcd_primary() {
    let s = offload_snapshot(
        vec![ds("rejected", Driver::PostgreSQL), loaded("fallback", 9, 10)],
        vec![etcd("ev")],
    );
    assert_rejected(&s, &to_events(SizeClass::Small), &cfg(), Reason::PrimaryNotEtcd);
}

#[test]
fn an_override_target_must_be_etcd() {
    let s = offload_snapshot(
        vec![etcd("p")],
        vec![ds("rejected", Driver::MySQL), loaded("ev", 5, 10)],
    );
    let d = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap();
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev")]);
    assert_eq!(
        override_outcome(&d, "rejected"),
        Outcome::Rejected(Reason::OverrideNotEtcd)
    );
}

#[test]
fn an_override_target_must_share_the_primary_ca() {
    let other_ca = DataStoreSnapshot {
        ca_id: Some("ca-2".into()),
        ..etcd("other-ca")
    };
    let no_ca = DataStoreSnapshot {
        ca_id: None,
        ..etcd("no-ca")
    };
    let s = offload_snapshot(vec![etcd("p")], vec![other_ca, no_ca, loaded("ev", 9, 10)]);
    let d = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap();
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev")]);
    assert_eq!(
        override_outcome(&d, "other-ca"),
        Outcome::Rejected(Reason::CaMismatch)
    );
    assert_eq!(
        override_outcome(&d, "no-ca"),
        Outcome::Rejected(Reason::CaMismatch)
    );
}

#[test]
fn a_primary_without_a_ca_can_have_no_override() {
    let s = offload_snapshot(
        vec![DataStoreSnapshot {
            ca_id: None,
            ..etcd("p")
        }],
        vec![DataStoreSnapshot {
            ca_id: None,
            ..etcd("ev")
        }],
    );
    let err = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap_err();
    assert_eq!(
        err,
        PlacementError::NoOverrideCandidate {
            resource: EVENTS.into(),
            summary: vec![(Reason::CaMismatch, 1)]
        }
    );
}

#[test]
fn an_override_target_is_never_the_primary() {
    // One pool serves both roles: the primary is rejected as its own override.
    let s = snap(vec![pool(
        "both",
        Policy::Binpack,
        vec![loaded("a", 5, 10), loaded("b", 1, 10)],
    )]);
    let r = PlacementRequest {
        offload: OffloadMode::Pool("both".into()),
        ..small("cp")
    };
    let d = place(&r, &s, &cfg()).unwrap();
    assert_eq!(d.primary, "a");
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "b")]);
    assert_eq!(override_outcome(&d, "a"), Outcome::Rejected(Reason::AlreadyUsed));
}

#[test]
fn a_primary_whose_ca_has_no_override_is_passed_over() {
    let best = loaded("best", 0, 10); // ca-1: nothing in the override pool
    let next = DataStoreSnapshot {
        ca_id: Some("ca-2".into()),
        ..loaded("next", 5, 10)
    };
    let s = offload_snapshot(
        vec![best, next],
        vec![DataStoreSnapshot {
            ca_id: Some("ca-2".into()),
            ..etcd("ev")
        }],
    );
    let d = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap();
    assert_eq!(d.primary, "next");
    assert_eq!(outcome(&d, "best"), Outcome::Rejected(Reason::NoOverrideOnCa));
    assert_eq!(outcome(&d, "next"), Outcome::Scored(1.0 - 6.0 / 10.0));
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev")]);
}

#[test]
fn the_allow_list_refuses_custom_resources_duplicates_and_malformed_names() {
    let list = |v: &[&str]| OffloadAllowList::try_from(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert!(list(&["/events", "coordination.k8s.io/leases", "apps/deployments"]).is_ok());
    assert_eq!(
        list(&["kamaji.clastix.io/datastores"]),
        Err(AllowListError::NotBuiltIn("kamaji.clastix.io/datastores".into()))
    );
    // A CRD group may end in .k8s.io (Gateway API): still not built in.
    assert!(matches!(
        list(&["gateway.networking.k8s.io/gateways"]),
        Err(AllowListError::NotBuiltIn(_))
    ));
    assert!(matches!(
        list(&["apiextensions.k8s.io/customresourcedefinitions"]),
        Err(AllowListError::NotBuiltIn(_))
    ));
    assert_eq!(
        list(&["/events", "/events"]),
        Err(AllowListError::Duplicate("/events".into()))
    );
    assert!(matches!(list(&["events"]), Err(AllowListError::Malformed(_))));
    assert!(matches!(list(&["/"]), Err(AllowListError::Malformed(_))));
    assert!(matches!(
        list(&["/pods/status"]),
        Err(AllowListError::Malformed(_))
    ));
    let err =
        serde_json::from_value::<PlacementConfig>(json!({"offloadable": ["/events", "example.com/widgets"]}));
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("custom resources cannot be offloaded")
    );
}

#[test]
fn only_allow_listed_resources_are_offloaded_each_once() {
    let s = offload_snapshot(vec![etcd("p")], vec![etcd("ev")]);
    let d = place(&to_events(SizeClass::Large), &s, &cfg()).unwrap();
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev"), (LEASES, "ev")]);

    let events_only = PlacementConfig {
        offloadable: OffloadAllowList::try_from(vec![EVENTS.to_owned()]).unwrap(),
        ..cfg()
    };
    let d = place(&to_events(SizeClass::Large), &s, &events_only).unwrap();
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev")]);

    let leases_only = PlacementConfig {
        offloadable: OffloadAllowList::try_from(vec![LEASES.to_owned()]).unwrap(),
        ..cfg()
    };
    assert_eq!(
        place(&to_events(SizeClass::Small), &s, &leases_only),
        Err(PlacementError::NothingToOffload {
            pool: "events".into()
        })
    );
    let auto = PlacementConfig {
        auto_override_pool: Some("events".into()),
        ..leases_only
    };
    let r = PlacementRequest {
        offload: OffloadMode::Auto,
        ..to_events(SizeClass::Medium)
    };
    assert!(place(&r, &s, &auto).unwrap().overrides.is_empty());
}

// ---------------------------------------------------------------- offload modes

fn offloaded(mode: OffloadMode, size: SizeClass, config: &PlacementConfig) -> Vec<(String, String)> {
    let s = offload_snapshot(vec![etcd("p")], vec![etcd("ev")]);
    let r = PlacementRequest {
        offload: mode,
        ..to_events(size)
    };
    let d = place(&r, &s, config).unwrap();
    assert_eq!(d.primary, "p");
    d.data_store_overrides()
        .into_iter()
        .map(|(r, d)| (r.to_owned(), d.to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(r, d)| ((*r).to_owned(), (*d).to_owned()))
        .collect()
}

#[test]
fn offload_none_keeps_everything_on_the_primary() {
    let auto = PlacementConfig {
        auto_override_pool: Some("events".into()),
        ..cfg()
    };
    assert_eq!(offloaded(OffloadMode::None, SizeClass::Large, &auto), pairs(&[]));
}

#[test]
fn offload_auto_follows_the_size_class() {
    let auto = PlacementConfig {
        auto_override_pool: Some("events".into()),
        ..cfg()
    };
    assert_eq!(offloaded(OffloadMode::Auto, SizeClass::Small, &auto), pairs(&[]));
    assert_eq!(
        offloaded(OffloadMode::Auto, SizeClass::Medium, &auto),
        pairs(&[(EVENTS, "ev")])
    );
    assert_eq!(
        offloaded(OffloadMode::Auto, SizeClass::Large, &auto),
        pairs(&[(EVENTS, "ev"), (LEASES, "ev")])
    );
}

#[test]
fn offload_auto_without_a_configured_pool_offloads_nothing() {
    assert_eq!(offloaded(OffloadMode::Auto, SizeClass::Large, &cfg()), pairs(&[]));
}

#[test]
fn offload_to_a_pool_moves_events_and_for_large_leases() {
    let pool = || OffloadMode::Pool("events".into());
    assert_eq!(
        offloaded(pool(), SizeClass::Small, &cfg()),
        pairs(&[(EVENTS, "ev")])
    );
    assert_eq!(
        offloaded(pool(), SizeClass::Medium, &cfg()),
        pairs(&[(EVENTS, "ev")])
    );
    assert_eq!(
        offloaded(pool(), SizeClass::Large, &cfg()),
        pairs(&[(EVENTS, "ev"), (LEASES, "ev")])
    );
}

#[test]
fn offload_to_an_unknown_pool_is_an_error() {
    let s = offload_snapshot(vec![etcd("p")], vec![etcd("ev")]);
    let r = PlacementRequest {
        offload: OffloadMode::Pool("nope".into()),
        ..small("cp")
    };
    assert_eq!(
        place(&r, &s, &cfg()),
        Err(PlacementError::UnknownPool { pool: "nope".into() })
    );
    let auto = PlacementConfig {
        auto_override_pool: Some("gone".into()),
        ..cfg()
    };
    let r = PlacementRequest {
        offload: OffloadMode::Auto,
        ..req("cp", SizeClass::Medium)
    };
    assert_eq!(
        place(&r, &s, &auto),
        Err(PlacementError::UnknownPool { pool: "gone".into() })
    );
}

#[test]
fn the_override_target_follows_the_override_pool_policy() {
    let s = snap(vec![
        pool("main", Policy::Spread, vec![etcd("p")]),
        pool(
            "events",
            Policy::Binpack,
            vec![
                loaded("ev-a", 2, 10),
                loaded("ev-b", 7, 10),
                loaded("ev-c", 10, 10),
            ],
        ),
    ]);
    let d = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap();
    assert_eq!(d.data_store_overrides(), vec![(EVENTS, "ev-b")]);
    assert_eq!(override_outcome(&d, "ev-b"), Outcome::Scored(8.0 / 10.0));
    assert_eq!(
        override_outcome(&d, "ev-c"),
        Outcome::Rejected(Reason::AtCapacity)
    );
}

// ---------------------------------------------------------------- errors

#[test]
fn no_candidate_names_each_constraint_with_counts() {
    let mut dss = vec![loaded("f1", 5, 5), loaded("f2", 5, 5), loaded("f3", 5, 5)];
    dss.push(DataStoreSnapshot {
        cordoned: true,
        ..etcd("c1")
    });
    dss.push(DataStoreSnapshot {
        cordoned: true,
        ..etcd("c2")
    });
    dss.push(DataStoreSnapshot {
        ready: false,
        ..etcd("n1")
    });
    let s = one_pool(Policy::Spread, dss);
    let err = place(&small("cp"), &s, &cfg()).unwrap_err();
    assert_eq!(
        err,
        PlacementError::NoCandidate {
            summary: vec![
                (Reason::AtCapacity, 3),
                (Reason::Cordoned, 2),
                (Reason::NotReady, 1)
            ]
        }
    );
    assert_eq!(
        err.to_string(),
        "no DataStore fits: 3 at capacity, 2 cordoned, 1 not ready"
    );
    assert_eq!(choose(&small("cp"), &s, &cfg()).unwrap_err(), err);
}

#[test]
fn an_empty_pool_says_so() {
    let s = one_pool(Policy::Spread, vec![]);
    assert_eq!(
        place(&small("cp"), &s, &cfg()).unwrap_err().to_string(),
        "no DataStore fits: there is no DataStore to consider"
    );
}

#[test]
fn no_override_candidate_names_the_resource_and_counts() {
    let other = |n: &str| DataStoreSnapshot {
        ca_id: Some("ca-9".into()),
        ..etcd(n)
    };
    let s = offload_snapshot(
        vec![etcd("p")],
        vec![other("x"), other("y"), ds("z", Driver::PostgreSQL)],
    );
    let err = place(&to_events(SizeClass::Large), &s, &cfg()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no override DataStore fits /events: 2 under another etcd CA, 1 not etcd"
    );
}

#[test]
fn errors_and_reasons_serialize_as_stable_snake_case() {
    for reason in Reason::ALL {
        assert_eq!(serde_json::to_value(reason).unwrap(), json!(reason.as_str()));
    }
    let err = PlacementError::NoCandidate {
        summary: vec![(Reason::AtCapacity, 3)],
    };
    assert_eq!(
        serde_json::to_value(&err).unwrap(),
        json!({"error": "no_candidate", "summary": [["at_capacity", 3]]})
    );
    assert_eq!(
        serde_json::to_value(OffloadMode::Pool("ev".into())).unwrap(),
        json!({"pool": "ev"})
    );
    assert_eq!(serde_json::to_value(OffloadMode::Auto).unwrap(), json!("auto"));
    assert_eq!(
        serde_json::to_value(Policy::Rendezvous).unwrap(),
        json!("rendezvous")
    );
    assert_eq!(serde_json::to_value(SizeClass::Medium).unwrap(), json!("medium"));
}

#[test]
fn a_decision_serializes_for_the_api_and_round_trips() {
    let s = offload_snapshot(
        vec![
            etcd("p"),
            DataStoreSnapshot {
                cordoned: true,
                ..etcd("q")
            },
        ],
        vec![etcd("ev")],
    );
    let d = place(&to_events(SizeClass::Small), &s, &cfg()).unwrap();
    let value = serde_json::to_value(&d).unwrap();
    assert_eq!(
        value,
        json!({
            "primary": "p",
            "overrides": [{"resource": "/events", "data_store": "ev"}],
            "candidates": [
                {"data_store": "p", "pool": "main", "outcome": {"scored": 0.9}},
                {"data_store": "q", "pool": "main", "outcome": {"rejected": "cordoned"}}
            ],
            "override_candidates": [{"data_store": "ev", "pool": "events", "outcome": {"scored": 0.9}}]
        })
    );
    assert_eq!(serde_json::from_value::<Decision>(value).unwrap(), d);
}

#[test]
fn record_adds_the_tenant_to_every_datastore_it_uses() {
    let config = PlacementConfig {
        bytes_per_tenant: Some(BytesPerSize {
            small: 1,
            medium: 2,
            large: 3,
        }),
        ..cfg()
    };
    let mut s = offload_snapshot(vec![etcd("p")], vec![etcd("ev")]);
    let choice = choose(&to_events(SizeClass::Large), &s, &config).unwrap();
    s.record(&choice, SizeClass::Large, &config);
    for name in ["p", "ev"] {
        let d = s.data_store(s.find(name).unwrap()).unwrap();
        assert_eq!((d.load_tenants, d.load_bytes), (1, 3), "{name}");
    }
}

// ---------------------------------------------------------------- drain plans

fn assignment(cp: &str, size: SizeClass, primary: &str) -> Assignment {
    Assignment {
        control_plane_id: cp.into(),
        size_class: size,
        label_selector: BTreeMap::new(),
        primary: primary.into(),
        overrides: Vec::new(),
    }
}

fn moved(cp: &str, to: &str) -> Move {
    Move {
        control_plane: cp.into(),
        usage: Usage::Primary,
        from: "a".into(),
        to: Some(to.into()),
        blocked_by: vec![],
    }
}

#[test]
fn drain_moves_largest_first_under_the_pool_policy_and_reports_what_cannot_move() {
    let s = one_pool(
        Policy::Spread,
        vec![
            DataStoreSnapshot {
                cordoned: true,
                ..loaded("a", 4, 10)
            },
            loaded("b", 1, 3),
            loaded("c", 2, 3),
        ],
    );
    let assignments = vec![
        assignment("t1", SizeClass::Small, "a"),
        assignment("t2", SizeClass::Large, "a"),
        assignment("t3", SizeClass::Medium, "a"),
        assignment("t4", SizeClass::Small, "a"),
        assignment("elsewhere", SizeClass::Large, "b"),
    ];
    let plan = drain_plan(&s, &cfg(), "a", &assignments).unwrap();
    assert_eq!(
        plan,
        vec![
            moved("t2", "b"), // b: 2/3 after, c: 3/3
            moved("t3", "b"), // tie at 3/3: by name
            moved("t1", "c"), // b is full
            Move {
                control_plane: "t4".into(),
                usage: Usage::Primary,
                from: "a".into(),
                to: None,
                blocked_by: vec![(Reason::AtCapacity, 2), (Reason::Cordoned, 1)],
            },
        ]
    );
}

#[test]
fn drain_of_an_override_keeps_etcd_the_ca_and_away_from_the_primary() {
    let s = snap(vec![
        pool("main", Policy::Spread, vec![etcd("p")]),
        pool(
            "events",
            Policy::Binpack,
            vec![
                DataStoreSnapshot {
                    cordoned: true,
                    ..loaded("a", 1, 10)
                },
                DataStoreSnapshot {
                    ca_id: Some("ca-2".into()),
                    ..loaded("other-ca", 5, 10)
                },
                ds("pg", Driver::PostgreSQL),
                loaded("ok", 1, 10),
            ],
        ),
    ]);
    let mut a = assignment("t", SizeClass::Large, "p");
    a.overrides = vec![
        OverrideDecision {
            resource: EVENTS.into(),
            data_store: "a".into(),
        },
        OverrideDecision {
            resource: LEASES.into(),
            data_store: "a".into(),
        },
    ];
    let plan = drain_plan(&s, &cfg(), "a", &[a]).unwrap();
    assert_eq!(
        plan,
        vec![Move {
            control_plane: "t".into(),
            usage: Usage::Overrides(vec![EVENTS.into(), LEASES.into()]),
            from: "a".into(),
            to: Some("ok".into()),
            blocked_by: vec![],
        }]
    );
}

#[test]
fn drain_keeps_the_driver_and_treats_the_drained_datastore_as_cordoned() {
    // `a` is not marked cordoned, yet nothing moves back onto it; the PostgreSQL DataStore is no target for etcd.
    let s = one_pool(
        Policy::Binpack,
        vec![loaded("a", 1, 10), ds("pg", Driver::PostgreSQL)],
    );
    let plan = drain_plan(&s, &cfg(), "a", &[assignment("t", SizeClass::Small, "a")]).unwrap();
    assert_eq!(plan[0].to, None);
    assert_eq!(
        plan[0].blocked_by,
        vec![(Reason::DriverNotAllowed, 1), (Reason::Cordoned, 1)]
    );
    assert_eq!(
        drain_plan(&s, &cfg(), "zz", &[]),
        Err(PlacementError::UnknownDataStore {
            data_store: "zz".into()
        })
    );
}

//! Rebalance plans and override re-placement for migrations: pure, on a [`Snapshot`].
//!
//! A pool is balanced when the spread imbalance (the most minus the fewest tenants on its ready, uncordoned
//! DataStores of one driver) is at most one. [`rebalance_plan`] moves primaries from the fullest to the
//! emptiest DataStore that passes every hard constraint until it is, or until nothing can move.
//! [`retarget_overrides`] re-places a migrating control plane's overrides under its target's etcd CA.

use std::collections::BTreeSet;

use super::{
    decision::OverrideDecision,
    drain::{Assignment, Move, Usage},
    engine::{NO_LABELS, Need, best, is_exclusive},
    model::{PlacementConfig, SizeClass, Slot, Snapshot},
    reason::{PlacementError, Reason, Tally},
};
use crate::k8s::crd::Driver;

/// Moves at most this many control planes per plan (a bound on the loop, far above any real pool).
const MAX_MOVES: usize = 10_000;

/// The spread imbalance of each driver's ready, uncordoned DataStores in `pool`: `(driver, max − min)`.
pub fn imbalance(snapshot: &Snapshot, pool: usize) -> Vec<(Driver, u32)> {
    let Some(p) = snapshot.pools.get(pool) else {
        return Vec::new();
    };
    let mut out: Vec<(Driver, u32)> = Vec::new();
    for driver in [Driver::Etcd, Driver::MySQL, Driver::PostgreSQL, Driver::Nats] {
        let loads: Vec<u32> = p
            .datastores
            .iter()
            .filter(|d| d.driver == driver && d.ready && !d.cordoned)
            .map(|d| d.load_tenants)
            .collect();
        if let (Some(max), Some(min)) = (loads.iter().max(), loads.iter().min()) {
            out.push((driver, max - min));
        }
    }
    out
}

/// Plans the primary moves that bring `pool`'s spread imbalance to at most one tenant.
///
/// Each step takes the fullest DataStore (ready, uncordoned) that has a control plane able to move, and
/// moves one (smallest size class first, then by id) to the emptiest DataStore of the same pool and driver
/// holding at least two tenants fewer, under the hard constraints: the control plane's labels, ready, not
/// cordoned, capacity, NATS and `Dedicated` exclusivity, none of its other DataStores, and its primary's
/// etcd CA when it has overrides (so its overrides stay valid). Loads are simulated as the plan goes.
pub fn rebalance_plan(
    snapshot: &Snapshot,
    config: &PlacementConfig,
    pool: &str,
    assignments: &[Assignment],
) -> Result<Vec<Move>, PlacementError> {
    let pool_index = snapshot
        .pool_index(pool)
        .ok_or_else(|| PlacementError::UnknownPool {
            pool: pool.to_owned(),
        })?;
    let mut sim = snapshot.clone();
    let mut placed: Vec<Assignment> = assignments
        .iter()
        .filter(|a| sim.find(&a.primary).is_some_and(|s| s.pool == pool_index))
        .cloned()
        .collect();
    placed.sort_by(|a, b| {
        a.size_class
            .cmp(&b.size_class)
            .then_with(|| a.control_plane_id.cmp(&b.control_plane_id))
    });
    let mut moves = Vec::new();
    while moves.len() < MAX_MOVES {
        let Some((index, target)) = next_move(&sim, config, pool_index, &placed) else {
            break;
        };
        let a = &mut placed[index];
        let (Some(from), Some(to)) = (
            sim.find(&a.primary),
            sim.data_store(target).map(|d| d.name.clone()),
        ) else {
            break;
        };
        sim.remove_load(from, a.size_class, config);
        sim.add_load(target, a.size_class, config);
        moves.push(Move {
            control_plane: a.control_plane_id.clone(),
            usage: Usage::Primary,
            from: a.primary.clone(),
            to: Some(to.clone()),
            blocked_by: Vec::new(),
        });
        a.primary = to;
    }
    Ok(moves)
}

/// The next move of a rebalance: `(index into placed, target slot)`, or `None` when balanced or stuck.
fn next_move(
    sim: &Snapshot,
    config: &PlacementConfig,
    pool: usize,
    placed: &[Assignment],
) -> Option<(usize, Slot)> {
    let p = sim.pools.get(pool)?;
    let mut sources: Vec<usize> = (0..p.datastores.len())
        .filter(|i| p.datastores[*i].ready && !p.datastores[*i].cordoned)
        .collect();
    sources.sort_by(|a, b| {
        let (da, db) = (&p.datastores[*a], &p.datastores[*b]);
        db.load_tenants
            .cmp(&da.load_tenants)
            .then_with(|| da.name.cmp(&db.name))
    });
    for source in sources {
        let from = &p.datastores[source];
        for (index, a) in placed.iter().enumerate().filter(|(_, a)| a.primary == from.name) {
            if let Some(target) = emptiest_fit(sim, config, pool, a, from.load_tenants) {
                return Some((index, target));
            }
        }
    }
    None
}

/// The emptiest DataStore of `pool` that `a` may move to and that holds at least two tenants fewer than
/// `source_load` (ties by name).
fn emptiest_fit(
    sim: &Snapshot,
    config: &PlacementConfig,
    pool: usize,
    a: &Assignment,
    source_load: u32,
) -> Option<Slot> {
    let p = sim.pools.get(pool)?;
    let from = sim.data_store(sim.find(&a.primary)?)?;
    let drivers = [from.driver];
    let others: Vec<&str> = a.overrides.iter().map(|o| o.data_store.as_str()).collect();
    let need = Need {
        drivers: &drivers,
        etcd: None,
        labels: &a.label_selector,
        exclude: &others,
        ca: (!a.overrides.is_empty()).then_some(from.ca_id.as_deref()),
        bytes: config.bytes_for(a.size_class),
    };
    p.datastores
        .iter()
        .enumerate()
        .filter(|(_, d)| d.name != from.name && d.load_tenants + 2 <= source_load)
        .filter(|(_, d)| need.check(d, is_exclusive(p.policy, d)).is_ok())
        .min_by(|(_, x), (_, y)| {
            x.load_tenants
                .cmp(&y.load_tenants)
                .then_with(|| x.name.cmp(&y.name))
        })
        .map(|(index, _)| Slot { pool, index })
}

/// Where a migrating control plane's overrides go so that they share `target`'s etcd CA.
///
/// Overrides already on a DataStore with the target's CA (other than the target) stay; each other one
/// goes to the best etcd DataStore with that CA (every pool, in snapshot order, under each pool's policy),
/// never the target or `source`, and one DataStore takes all the resources that move together. Fails with
/// [`PlacementError::NoOverrideCandidate`] naming the first resource that fits nowhere.
pub fn retarget_overrides(
    snapshot: &Snapshot,
    config: &PlacementConfig,
    control_plane_id: &str,
    size: SizeClass,
    source: &str,
    target: &str,
    overrides: &[OverrideDecision],
) -> Result<Vec<OverrideDecision>, PlacementError> {
    let unknown = || PlacementError::UnknownDataStore {
        data_store: target.to_owned(),
    };
    let target_ds = snapshot
        .data_store(snapshot.find(target).ok_or_else(unknown)?)
        .ok_or_else(unknown)?;
    let ca = target_ds.ca_id.as_deref();
    let keeps = |name: &str| {
        name != target
            && name != source
            && snapshot
                .find(name)
                .and_then(|s| snapshot.data_store(s))
                .is_some_and(|d| ca.is_some() && d.ca_id.as_deref() == ca)
    };
    let moving: Vec<&OverrideDecision> = overrides.iter().filter(|o| !keeps(&o.data_store)).collect();
    let Some(first) = moving.first() else {
        return Ok(overrides.to_vec());
    };
    let kept: BTreeSet<&str> = overrides
        .iter()
        .filter(|o| keeps(&o.data_store))
        .map(|o| o.data_store.as_str())
        .collect();
    let exclude: Vec<&str> = [target, source].into_iter().collect();
    let need = Need {
        drivers: &[],
        etcd: Some(Reason::OverrideNotEtcd),
        labels: &NO_LABELS,
        exclude: &exclude,
        ca: Some(ca),
        bytes: config.bytes_for(size),
    };
    // A DataStore the control plane keeps an override on already counts it: prefer that one.
    let chosen = match kept.iter().next() {
        Some(name) => (*name).to_owned(),
        None => {
            let mut tally = Tally::default();
            let slot = best(
                snapshot,
                0..snapshot.pools.len(),
                &need,
                control_plane_id,
                &mut tally,
            )
            .map(|b| b.slot)
            .ok_or_else(|| PlacementError::NoOverrideCandidate {
                resource: first.resource.clone(),
                summary: tally.summary(),
            })?;
            snapshot
                .data_store(slot)
                .map(|d| d.name.clone())
                .ok_or_else(unknown)?
        }
    };
    Ok(overrides
        .iter()
        .map(|o| OverrideDecision {
            resource: o.resource.clone(),
            data_store: if keeps(&o.data_store) {
                o.data_store.clone()
            } else {
                chosen.clone()
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::placement::{DataStoreSnapshot, Policy, PoolSnapshot};

    fn ds(name: &str, driver: Driver, load: u32, capacity: u32, ca: &str) -> DataStoreSnapshot {
        DataStoreSnapshot {
            driver,
            ready: true,
            cordoned: false,
            capacity_tenants: capacity,
            load_tenants: load,
            capacity_bytes: None,
            load_bytes: 0,
            name: name.into(),
            ca_id: Some(ca.into()),
            labels: Default::default(),
            pool: "p".into(),
        }
    }

    fn snapshot(datastores: Vec<DataStoreSnapshot>) -> Snapshot {
        Snapshot {
            pools: vec![PoolSnapshot {
                name: "p".into(),
                policy: Policy::Spread,
                datastores,
            }],
        }
    }

    fn on(id: &str, primary: &str) -> Assignment {
        Assignment {
            control_plane_id: id.into(),
            size_class: SizeClass::Small,
            label_selector: Default::default(),
            primary: primary.into(),
            overrides: Vec::new(),
        }
    }

    fn moves(plan: &[Move]) -> Vec<(&str, &str, &str)> {
        plan.iter()
            .map(|m| {
                (
                    m.control_plane.as_str(),
                    m.from.as_str(),
                    m.to.as_deref().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_pool_of_four_and_zero_moves_two_to_reach_an_imbalance_of_zero() {
        let snap = snapshot(vec![
            ds("a", Driver::Etcd, 4, 10, "ca1"),
            ds("b", Driver::Etcd, 0, 10, "ca1"),
        ]);
        let on_a: Vec<Assignment> = ["c1", "c2", "c3", "c4"].iter().map(|id| on(id, "a")).collect();
        let plan = rebalance_plan(&snap, &PlacementConfig::default(), "p", &on_a).unwrap();
        assert_eq!(moves(&plan), [("c1", "a", "b"), ("c2", "a", "b")]);
    }

    #[test]
    fn three_stores_five_one_zero_end_within_one_tenant() {
        let snap = snapshot(vec![
            ds("a", Driver::Etcd, 5, 10, "ca1"),
            ds("b", Driver::Etcd, 1, 10, "ca1"),
            ds("c", Driver::Etcd, 0, 10, "ca1"),
        ]);
        let mut all: Vec<Assignment> = ["c1", "c2", "c3", "c4", "c5"]
            .iter()
            .map(|id| on(id, "a"))
            .collect();
        all.push(on("c6", "b"));
        let plan = rebalance_plan(&snap, &PlacementConfig::default(), "p", &all).unwrap();
        assert_eq!(
            moves(&plan),
            [("c1", "a", "c"), ("c2", "a", "b"), ("c3", "a", "c")]
        );
    }

    #[test]
    fn a_balanced_pool_has_no_moves() {
        let snap = snapshot(vec![
            ds("a", Driver::Etcd, 2, 10, "ca1"),
            ds("b", Driver::Etcd, 1, 10, "ca1"),
        ]);
        let all = vec![on("c1", "a"), on("c2", "a"), on("c3", "b")];
        assert_eq!(
            rebalance_plan(&snap, &PlacementConfig::default(), "p", &all).unwrap(),
            []
        );
    }

    #[test]
    fn moves_keep_the_driver_the_capacity_and_the_overrides_ca() {
        let snap = snapshot(vec![
            ds("a", Driver::Etcd, 4, 10, "ca1"),
            ds("full", Driver::Etcd, 1, 1, "ca1"),
            ds("pg", Driver::PostgreSQL, 0, 10, "x"),
            ds("other-ca", Driver::Etcd, 0, 10, "ca2"),
        ]);
        let mut with_override = on("c1", "a");
        with_override.overrides = vec![OverrideDecision {
            resource: "/events".into(),
            data_store: "ev".into(),
        }];
        let all = vec![with_override, on("c2", "a"), on("c3", "a"), on("c4", "a")];
        let plan = rebalance_plan(&snap, &PlacementConfig::default(), "p", &all).unwrap();
        // c1 has overrides under ca1: it cannot move to other-ca, the only etcd DataStore with room.
        assert_eq!(moves(&plan), [("c2", "a", "other-ca"), ("c3", "a", "other-ca")]);
    }

    #[test]
    fn an_unknown_pool_is_an_error() {
        let snap = snapshot(vec![ds("a", Driver::Etcd, 0, 10, "ca1")]);
        assert_eq!(
            rebalance_plan(&snap, &PlacementConfig::default(), "nope", &[]),
            Err(PlacementError::UnknownPool { pool: "nope".into() })
        );
    }

    #[test]
    fn imbalance_is_per_driver_over_ready_uncordoned_stores() {
        let mut cordoned = ds("c", Driver::Etcd, 9, 10, "ca1");
        cordoned.cordoned = true;
        let snap = snapshot(vec![
            ds("a", Driver::Etcd, 3, 10, "ca1"),
            ds("b", Driver::Etcd, 1, 10, "ca1"),
            cordoned,
            ds("pg", Driver::PostgreSQL, 2, 10, "x"),
        ]);
        assert_eq!(imbalance(&snap, 0), [(Driver::Etcd, 2), (Driver::PostgreSQL, 0)]);
    }

    fn events(on: &str) -> Vec<OverrideDecision> {
        vec![OverrideDecision {
            resource: "/events".into(),
            data_store: on.into(),
        }]
    }

    #[test]
    fn overrides_follow_the_target_s_ca_and_never_land_on_the_target() {
        let snap = snapshot(vec![
            ds("src", Driver::Etcd, 1, 10, "ca1"),
            ds("ev1", Driver::Etcd, 1, 10, "ca1"),
            ds("dst", Driver::Etcd, 0, 10, "ca2"),
            ds("ev2", Driver::Etcd, 0, 10, "ca2"),
        ]);
        let config = PlacementConfig::default();
        let out = retarget_overrides(
            &snap,
            &config,
            "c1",
            SizeClass::Small,
            "src",
            "dst",
            &events("ev1"),
        )
        .unwrap();
        assert_eq!(out, events("ev2"));
        // The target itself held the override: it moves to another DataStore of the CA.
        let onto = snapshot(vec![
            ds("src", Driver::Etcd, 1, 10, "ca1"),
            ds("ev1", Driver::Etcd, 1, 10, "ca1"),
            ds("ev3", Driver::Etcd, 0, 10, "ca1"),
        ]);
        let moved = retarget_overrides(
            &onto,
            &config,
            "c1",
            SizeClass::Small,
            "src",
            "ev1",
            &events("ev1"),
        );
        assert_eq!(moved.unwrap(), events("ev3"));
        // Same CA: the override stays where it is.
        let kept = snapshot(vec![
            ds("src", Driver::Etcd, 1, 10, "ca1"),
            ds("ev1", Driver::Etcd, 1, 10, "ca1"),
            ds("dst", Driver::Etcd, 0, 10, "ca1"),
        ]);
        let out = retarget_overrides(
            &kept,
            &config,
            "c1",
            SizeClass::Small,
            "src",
            "dst",
            &events("ev1"),
        )
        .unwrap();
        assert_eq!(out, events("ev1"));
    }

    #[test]
    fn no_override_store_under_the_target_s_ca_is_an_error_naming_the_resource() {
        let snap = snapshot(vec![
            ds("src", Driver::Etcd, 1, 10, "ca1"),
            ds("ev1", Driver::Etcd, 1, 10, "ca1"),
            ds("dst", Driver::Etcd, 0, 10, "ca2"),
        ]);
        let err = retarget_overrides(
            &snap,
            &PlacementConfig::default(),
            "c1",
            SizeClass::Small,
            "src",
            "dst",
            &events("ev1"),
        )
        .unwrap_err();
        assert!(matches!(err, PlacementError::NoOverrideCandidate { resource, .. } if resource == "/events"));
    }
}

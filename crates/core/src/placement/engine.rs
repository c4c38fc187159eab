//! The decision itself: hard constraints, ranking within and across pools, and overrides.

use std::{cmp::Ordering, collections::BTreeMap, ops::Range};

use super::{
    decision::{CandidateReport, Choice, Decision, Offload, Outcome, OverrideDecision},
    model::{
        DataStoreSnapshot, EVENTS, LEASES, OffloadMode, PlacementConfig, PlacementRequest, Policy,
        PoolSnapshot, SizeClass, Slot, Snapshot,
    },
    reason::{PlacementError, Reason, Tally},
    score::{Key, cmp_fraction, cmp_rendezvous, combine, control_plane_hash, effective_capacity, fill},
};
use crate::k8s::crd::Driver;

/// An empty label selector.
pub(crate) static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// The hard constraints one DataStore must pass for one role.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Need<'a> {
    /// Allowed drivers; empty means any.
    pub drivers: &'a [Driver],
    /// When set, the driver must be etcd, and this is the reason otherwise.
    pub etcd: Option<Reason>,
    /// Required labels.
    pub labels: &'a BTreeMap<String, String>,
    /// DataStores the control plane already uses in another role.
    pub exclude: &'a [&'a str],
    /// When set, the DataStore's CA must be known and equal to this one (which must be known too).
    pub ca: Option<Option<&'a str>>,
    /// The tenant's byte estimate.
    pub bytes: u64,
}

impl Need<'_> {
    /// The first constraint `ds` fails, in [`Reason`] order.
    pub(crate) fn check(&self, ds: &DataStoreSnapshot, exclusive: bool) -> Result<(), Reason> {
        self.check_request(ds)?;
        self.check_state(ds, exclusive)
    }

    /// Whether only the DataStores' own state matters (no driver, label, exclusion or CA constraint).
    fn state_only(&self) -> bool {
        self.drivers.is_empty()
            && self.etcd.is_none()
            && self.labels.is_empty()
            && self.exclude.is_empty()
            && self.ca.is_none()
    }

    /// The constraints that come from the request: driver, etcd, labels, exclusion, CA.
    fn check_request(&self, ds: &DataStoreSnapshot) -> Result<(), Reason> {
        if !self.drivers.is_empty() && !self.drivers.contains(&ds.driver) {
            return Err(Reason::DriverNotAllowed);
        }
        if let Some(reason) = self.etcd
            && ds.driver != Driver::Etcd
        {
            return Err(reason);
        }
        if !self.labels.iter().all(|(k, v)| ds.labels.get(k) == Some(v)) {
            return Err(Reason::LabelMismatch);
        }
        if self.exclude.contains(&ds.name.as_str()) {
            return Err(Reason::AlreadyUsed);
        }
        if let Some(want) = self.ca {
            match (want, ds.ca_id.as_deref()) {
                (Some(a), Some(b)) if a == b => {}
                _ => return Err(Reason::CaMismatch),
            }
        }
        Ok(())
    }

    /// The constraints that come from the DataStore's state: ready, cordoned, exclusivity, capacity.
    fn check_state(&self, ds: &DataStoreSnapshot, exclusive: bool) -> Result<(), Reason> {
        if !ds.ready {
            return Err(Reason::NotReady);
        }
        if ds.cordoned {
            return Err(Reason::Cordoned);
        }
        if ds.load_tenants > 0 {
            if ds.driver == Driver::Nats {
                return Err(Reason::NatsInUse);
            }
            if exclusive {
                return Err(Reason::DedicatedInUse);
            }
        }
        if ds.load_tenants >= effective_capacity(ds, exclusive) {
            return Err(Reason::AtCapacity);
        }
        if let Some(cap) = ds.capacity_bytes
            && ds.load_bytes.saturating_add(self.bytes) > cap
        {
            return Err(Reason::AtByteCapacity);
        }
        Ok(())
    }
}

/// Whether a DataStore takes one tenant only: NATS always, anything in a `Dedicated` pool.
pub(crate) fn is_exclusive(policy: Policy, ds: &DataStoreSnapshot) -> bool {
    policy == Policy::Dedicated || ds.driver == Driver::Nats
}

/// A DataStore that fits, with what ranks it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ranked<'s> {
    /// Where it is.
    pub slot: Slot,
    /// Its policy key.
    pub key: Key,
    /// Its name, the tie-breaker.
    pub name: &'s str,
}

impl Ranked<'_> {
    /// `Less` when `self` ranks before `other`: earlier pool, then better key, then smaller name.
    pub(crate) fn rank(&self, other: &Ranked<'_>) -> Ordering {
        self.slot
            .pool
            .cmp(&other.slot.pool)
            .then_with(|| self.key.rank(other.key))
            .then_with(|| self.name.cmp(other.name))
    }
}

/// Calls `visit` with every DataStore of the pools in `pools` and its outcome under `need`.
pub(crate) fn evaluate<'s>(
    snapshot: &'s Snapshot,
    pools: Range<usize>,
    need: &Need<'_>,
    control_plane_id: &str,
    mut visit: impl FnMut(&'s PoolSnapshot, &'s DataStoreSnapshot, Result<Ranked<'s>, Reason>),
) {
    let cp_hash = control_plane_hash(control_plane_id);
    for (pool_index, pool) in snapshot
        .pools
        .iter()
        .enumerate()
        .take(pools.end)
        .skip(pools.start)
    {
        for (index, ds) in pool.datastores.iter().enumerate() {
            let exclusive = is_exclusive(pool.policy, ds);
            let outcome = need.check(ds, exclusive).map(|()| Ranked {
                slot: Slot {
                    pool: pool_index,
                    index,
                },
                key: Key::new(pool.policy, ds, exclusive, cp_hash),
                name: &ds.name,
            });
            visit(pool, ds, outcome);
        }
    }
}

/// The best DataStore of the first pool in `pools` that has one that fits; counts rejections in `tally`.
pub(crate) fn best<'s>(
    snapshot: &'s Snapshot,
    pools: Range<usize>,
    need: &Need<'_>,
    control_plane_id: &str,
    tally: &mut Tally,
) -> Option<Ranked<'s>> {
    let cp_hash = control_plane_hash(control_plane_id);
    for (pool_index, pool) in snapshot
        .pools
        .iter()
        .enumerate()
        .take(pools.end)
        .skip(pools.start)
    {
        // One monomorphic loop per policy: the hot path of the engine.
        let found = match pool.policy {
            Policy::Spread => best_in_pool(pool, need, tally, fill, cmp_fraction)
                .map(|(i, (used, capacity))| (i, Key::Spread { used, capacity })),
            Policy::Binpack => best_in_pool(pool, need, tally, fill, |a, b| cmp_fraction(b, a))
                .map(|(i, (used, capacity))| (i, Key::Binpack { used, capacity })),
            Policy::Rendezvous => best_in_pool(
                pool,
                need,
                tally,
                |ds, exclusive| (effective_capacity(ds, exclusive), combine(cp_hash, &ds.name)),
                cmp_rendezvous,
            )
            .map(|(i, (weight, hash))| (i, Key::Rendezvous { weight, hash })),
            Policy::Dedicated => best_in_pool(pool, need, tally, |_, _| (), |(), ()| Ordering::Equal)
                .map(|(i, ())| (i, Key::Dedicated)),
        };
        if let Some((index, key)) = found
            && let Some(ds) = pool.datastores.get(index)
        {
            return Some(Ranked {
                slot: Slot {
                    pool: pool_index,
                    index,
                },
                key,
                name: &ds.name,
            });
        }
    }
    None
}

/// The index and key of the best DataStore of one pool: best `key` by `cmp`, then smallest name.
fn best_in_pool<K: Copy>(
    pool: &PoolSnapshot,
    need: &Need<'_>,
    tally: &mut Tally,
    key: impl Fn(&DataStoreSnapshot, bool) -> K,
    cmp: impl Fn(K, K) -> Ordering,
) -> Option<(usize, K)> {
    // Unswitched by hand: most requests constrain nothing but the DataStores' state.
    if need.state_only() {
        scan_pool(
            pool,
            tally,
            |ds, exclusive| need.check_state(ds, exclusive),
            key,
            cmp,
        )
    } else {
        scan_pool(pool, tally, |ds, exclusive| need.check(ds, exclusive), key, cmp)
    }
}

/// [`best_in_pool`] with the constraint check given.
fn scan_pool<K: Copy>(
    pool: &PoolSnapshot,
    tally: &mut Tally,
    check: impl Fn(&DataStoreSnapshot, bool) -> Result<(), Reason>,
    key: impl Fn(&DataStoreSnapshot, bool) -> K,
    cmp: impl Fn(K, K) -> Ordering,
) -> Option<(usize, K)> {
    let mut best: Option<(usize, K, &str)> = None;
    for (index, ds) in pool.datastores.iter().enumerate() {
        let exclusive = is_exclusive(pool.policy, ds);
        if let Err(reason) = check(ds, exclusive) {
            tally.add(reason);
            continue;
        }
        let k = key(ds, exclusive);
        let better = best.is_none_or(|(_, bk, bn)| cmp(k, bk).then_with(|| ds.name.as_str().cmp(bn)).is_lt());
        if better {
            best = Some((index, k, &ds.name));
        }
    }
    best.map(|(index, k, _)| (index, k))
}

/// The pools the primary may come from.
fn scope(snapshot: &Snapshot, pool: Option<&str>) -> Result<Range<usize>, PlacementError> {
    match pool {
        None => Ok(0..snapshot.pools.len()),
        Some(name) => {
            snapshot
                .pool_index(name)
                .map(|i| i..i + 1)
                .ok_or_else(|| PlacementError::UnknownPool {
                    pool: name.to_owned(),
                })
        }
    }
}

/// The override pool and the resources to offload, or `None` when nothing is offloaded.
fn offload_plan(
    request: &PlacementRequest,
    snapshot: &Snapshot,
    config: &PlacementConfig,
) -> Result<Option<(usize, &'static [&'static str])>, PlacementError> {
    let (pool, explicit) = match &request.offload {
        OffloadMode::None => return Ok(None),
        OffloadMode::Auto => match &config.auto_override_pool {
            Some(pool) if request.size_class >= SizeClass::Medium => (pool, false),
            _ => return Ok(None),
        },
        OffloadMode::Pool(pool) => (pool, true),
    };
    let events = config.offloadable.contains(EVENTS);
    let leases = request.size_class == SizeClass::Large && config.offloadable.contains(LEASES);
    let resources: &'static [&'static str] = match (events, leases) {
        (true, true) => &[EVENTS, LEASES],
        (true, false) => &[EVENTS],
        (false, true) => &[LEASES],
        (false, false) if explicit => return Err(PlacementError::NothingToOffload { pool: pool.clone() }),
        (false, false) => return Ok(None),
    };
    let index = snapshot
        .pool_index(pool)
        .ok_or_else(|| PlacementError::UnknownPool { pool: pool.clone() })?;
    Ok(Some((index, resources)))
}

/// The constraints of the primary.
fn primary_need<'a>(request: &'a PlacementRequest, bytes: u64, offloads: bool) -> Need<'a> {
    Need {
        drivers: &request.allowed_drivers,
        etcd: offloads.then_some(Reason::PrimaryNotEtcd),
        labels: &request.label_selector,
        exclude: &[],
        ca: None,
        bytes,
    }
}

/// The constraints of an override target, given the primary.
fn override_need<'a>(primary: &'a DataStoreSnapshot, exclude: &'a [&'a str; 1], bytes: u64) -> Need<'a> {
    Need {
        drivers: &[],
        etcd: Some(Reason::OverrideNotEtcd),
        labels: &NO_LABELS,
        exclude,
        ca: Some(primary.ca_id.as_deref()),
        bytes,
    }
}

/// The override target for `primary` in `pool`, or the tally of why none fits.
fn override_for(
    snapshot: &Snapshot,
    pool: usize,
    primary: &DataStoreSnapshot,
    bytes: u64,
    control_plane_id: &str,
) -> Result<Slot, Tally> {
    let exclude = [primary.name.as_str()];
    let need = override_need(primary, &exclude, bytes);
    let mut tally = Tally::default();
    best(snapshot, pool..pool + 1, &need, control_plane_id, &mut tally)
        .map(|b| b.slot)
        .ok_or(tally)
}

/// Chooses the primary and override DataStores, without a report and without allocating on the usual path.
///
/// The primary comes from the first pool (in snapshot order, or the request's pool) that has a DataStore
/// passing every hard constraint, ranked by that pool's policy. When the request offloads, the primary must be
/// etcd, and one override DataStore is chosen from the override pool by its policy among etcd DataStores
/// under the primary's CA; every offloaded resource goes to it. If the best primary has no such override
/// DataStore, the next primaries are tried in rank order.
pub fn choose(
    request: &PlacementRequest,
    snapshot: &Snapshot,
    config: &PlacementConfig,
) -> Result<Choice, PlacementError> {
    let pools = scope(snapshot, request.pool.as_deref())?;
    let plan = offload_plan(request, snapshot, config)?;
    let bytes = config.bytes_for(request.size_class);
    let cp = request.control_plane_id.as_str();
    let need = primary_need(request, bytes, plan.is_some());
    let mut tally = Tally::default();
    let Some(first) = best(snapshot, pools.clone(), &need, cp, &mut tally) else {
        return Err(PlacementError::NoCandidate {
            summary: tally.summary(),
        });
    };
    let Some((override_pool, resources)) = plan else {
        return Ok(Choice {
            primary: first.slot,
            offload: None,
        });
    };
    let with = |primary: Slot, target: Slot| Choice {
        primary,
        offload: Some(Offload { target, resources }),
    };
    let first_ds = at(snapshot, first.slot)?;
    let first_failure = match override_for(snapshot, override_pool, first_ds, bytes, cp) {
        Ok(target) => return Ok(with(first.slot, target)),
        Err(tally) => tally,
    };

    // Rare path: the best primary has no override DataStore under its CA. Try the others in rank order,
    // skipping CAs already known to have none (those whose failure did not come from excluding the primary).
    let mut dead_cas: Vec<Option<&str>> = Vec::new();
    if first_failure.get(Reason::AlreadyUsed) == 0 {
        dead_cas.push(first_ds.ca_id.as_deref());
    }
    let mut ranked = Vec::new();
    evaluate(snapshot, pools, &need, cp, |_, _, outcome| {
        if let Ok(r) = outcome {
            ranked.push(r);
        }
    });
    ranked.sort_by(|a, b| a.rank(b));
    for candidate in ranked.iter().filter(|r| r.slot != first.slot) {
        let ds = at(snapshot, candidate.slot)?;
        let ca = ds.ca_id.as_deref();
        if dead_cas.contains(&ca) {
            continue;
        }
        match override_for(snapshot, override_pool, ds, bytes, cp) {
            Ok(target) => return Ok(with(candidate.slot, target)),
            Err(t) if t.get(Reason::AlreadyUsed) == 0 => dead_cas.push(ca),
            Err(_) => {}
        }
    }
    Err(PlacementError::NoOverrideCandidate {
        resource: resources.first().copied().unwrap_or(EVENTS).to_owned(),
        summary: first_failure.summary(),
    })
}

/// The DataStore in a slot the engine itself produced.
fn at(snapshot: &Snapshot, slot: Slot) -> Result<&DataStoreSnapshot, PlacementError> {
    // Slots come from iterating this very snapshot, so this never fails; an error beats a panic all the same.
    snapshot
        .data_store(slot)
        .ok_or_else(|| PlacementError::NoCandidate { summary: Vec::new() })
}

/// Places a control plane: [`choose`], then a report of every candidate's score or reason.
pub fn place(
    request: &PlacementRequest,
    snapshot: &Snapshot,
    config: &PlacementConfig,
) -> Result<Decision, PlacementError> {
    let choice = choose(request, snapshot, config)?;
    let pools = scope(snapshot, request.pool.as_deref())?;
    let bytes = config.bytes_for(request.size_class);
    let cp = request.control_plane_id.as_str();
    let primary = at(snapshot, choice.primary)?;
    let need = primary_need(request, bytes, choice.offload.is_some());

    let chosen = {
        let pool = &snapshot.pools[choice.primary.pool];
        let exclusive = is_exclusive(pool.policy, primary);
        Ranked {
            slot: choice.primary,
            key: Key::new(pool.policy, primary, exclusive, control_plane_hash(cp)),
            name: &primary.name,
        }
    };
    let mut candidates = Vec::new();
    evaluate(snapshot, pools, &need, cp, |pool, ds, outcome| {
        let outcome = match outcome {
            Err(reason) => Outcome::Rejected(reason),
            // Everything ranked above the chosen primary fits but was passed over for want of an override.
            Ok(r) if r.rank(&chosen) == Ordering::Less => Outcome::Rejected(Reason::NoOverrideOnCa),
            Ok(r) => Outcome::Scored(r.key.score()),
        };
        candidates.push(report(pool, ds, outcome));
    });

    let mut overrides = Vec::new();
    let mut override_candidates = Vec::new();
    if let Some(offload) = choice.offload {
        let target = at(snapshot, offload.target)?;
        overrides = offload
            .resources
            .iter()
            .map(|r| OverrideDecision {
                resource: (*r).to_owned(),
                data_store: target.name.clone(),
            })
            .collect();
        let exclude = [primary.name.as_str()];
        let need = override_need(primary, &exclude, bytes);
        let pool = offload.target.pool;
        evaluate(snapshot, pool..pool + 1, &need, cp, |pool, ds, outcome| {
            let outcome = match outcome {
                Err(reason) => Outcome::Rejected(reason),
                Ok(r) => Outcome::Scored(r.key.score()),
            };
            override_candidates.push(report(pool, ds, outcome));
        });
    }
    Ok(Decision {
        primary: primary.name.clone(),
        overrides,
        candidates,
        override_candidates,
    })
}

/// One line of the report.
fn report(pool: &PoolSnapshot, ds: &DataStoreSnapshot, outcome: Outcome) -> CandidateReport {
    CandidateReport {
        data_store: ds.name.clone(),
        pool: pool.name.clone(),
        outcome,
    }
}

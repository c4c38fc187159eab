//! Drain plans: where each tenant of a cordoned DataStore would go, under its pool's policy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    decision::OverrideDecision,
    engine::{NO_LABELS, Need, best},
    model::{PlacementConfig, SizeClass, Snapshot},
    reason::{PlacementError, Reason, Tally},
};

/// Where one control plane stands today, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The control plane's id.
    pub control_plane_id: String,
    /// Its size class.
    pub size_class: SizeClass,
    /// The label selector it was placed with, still honoured for its primary.
    #[serde(default)]
    pub label_selector: BTreeMap<String, String>,
    /// Its primary DataStore.
    pub primary: String,
    /// Its overrides.
    #[serde(default)]
    pub overrides: Vec<OverrideDecision>,
}

/// What a control plane keeps on the drained DataStore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Usage {
    /// Its primary state.
    Primary,
    /// These offloaded resources.
    Overrides(Vec<String>),
}

/// One step of a drain plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The control plane that moves.
    pub control_plane: String,
    /// What moves.
    pub usage: Usage,
    /// The drained DataStore.
    pub from: String,
    /// The DataStore it moves to; `None` when nothing fits.
    pub to: Option<String>,
    /// When nothing fits: how many DataStores each constraint removed, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<(Reason, u32)>,
}

/// Plans the moves that empty `drained`, without executing anything.
///
/// Every assignment that uses `drained` (as primary or override) gets one move, largest size class first, then
/// by control-plane id. Each target comes from the drained DataStore's own pool, under its policy and the
/// hard constraints: the same driver (a primary) or etcd (an override), the assignment's labels (a primary),
/// ready, not cordoned, capacity, NATS and `Dedicated` exclusivity, none of the control plane's other
/// DataStores, and, when the control plane has overrides, the drained DataStore's etcd CA. Loads are
/// simulated as the plan goes: each move frees the source and fills the target. `drained` is treated as
/// cordoned whatever the snapshot says. Assignments that do not use `drained` are ignored.
pub fn drain_plan(
    snapshot: &Snapshot,
    config: &PlacementConfig,
    drained: &str,
    assignments: &[Assignment],
) -> Result<Vec<Move>, PlacementError> {
    let unknown = || PlacementError::UnknownDataStore {
        data_store: drained.to_owned(),
    };
    let source_slot = snapshot.find(drained).ok_or_else(unknown)?;
    let source = snapshot.data_store(source_slot).ok_or_else(unknown)?;
    let mut sim = snapshot.clone();
    if let Some(ds) = sim.data_store_mut(source_slot) {
        ds.cordoned = true;
    }

    let mut order: Vec<&Assignment> = assignments
        .iter()
        .filter(|a| a.primary == drained || a.overrides.iter().any(|o| o.data_store == drained))
        .collect();
    order.sort_by(|a, b| {
        b.size_class
            .cmp(&a.size_class)
            .then_with(|| a.control_plane_id.cmp(&b.control_plane_id))
    });

    let pool = source_slot.pool;
    let same_driver = [source.driver];
    let mut moves = Vec::with_capacity(order.len());
    for a in order {
        let usage = if a.primary == drained {
            Usage::Primary
        } else {
            Usage::Overrides(
                a.overrides
                    .iter()
                    .filter(|o| o.data_store == drained)
                    .map(|o| o.resource.clone())
                    .collect(),
            )
        };
        let mut others: Vec<&str> = std::iter::once(a.primary.as_str())
            .chain(a.overrides.iter().map(|o| o.data_store.as_str()))
            .filter(|name| *name != drained)
            .collect();
        others.sort_unstable();
        others.dedup();
        let primary = usage == Usage::Primary;
        let need = Need {
            drivers: if primary { &same_driver } else { &[] },
            etcd: (!primary).then_some(Reason::OverrideNotEtcd),
            labels: if primary { &a.label_selector } else { &NO_LABELS },
            exclude: &others,
            ca: (!a.overrides.is_empty()).then_some(source.ca_id.as_deref()),
            bytes: config.bytes_for(a.size_class),
        };
        let mut tally = Tally::default();
        let target = best(&sim, pool..pool + 1, &need, &a.control_plane_id, &mut tally).map(|b| b.slot);
        let to = match target {
            Some(slot) => {
                sim.remove_load(source_slot, a.size_class, config);
                sim.add_load(slot, a.size_class, config);
                sim.data_store(slot).map(|ds| ds.name.clone())
            }
            None => None,
        };
        moves.push(Move {
            control_plane: a.control_plane_id.clone(),
            usage,
            from: drained.to_owned(),
            blocked_by: if to.is_none() { tally.summary() } else { Vec::new() },
            to,
        });
    }
    Ok(moves)
}

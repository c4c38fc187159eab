//! Which override spaces a migration with `overrides: move` carries to their new DataStores (pure).
//!
//! On an override DataStore the tenant has one space (its schema prefix) holding every resource it
//! overrides there, and the mover copies a space whole, deleting target keys the source lacks. So a
//! space can be carried only one to one: every moving resource of an old DataStore goes to the same new
//! DataStore, which takes nothing from another one, is not a DataStore the tenant's overrides use now,
//! and is neither primary. Anything else would mix or overwrite live data, and is refused.

use std::collections::BTreeMap;

use super::OverrideDecision;

/// One override space carried whole from one etcd DataStore to another.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CarriedOverride {
    /// The DataStore the tenant's override space is on now.
    pub from: String,
    /// The DataStore it moves to.
    pub to: String,
}

/// The carries that take the override data of `current` to `next`, for a migration from primary
/// `source` to `target`: one per old DataStore whose resources move (resources that stay, or are in
/// only one of the lists, carry nothing); `Err` says why the data cannot be carried.
pub fn carried_overrides(
    current: &[OverrideDecision],
    next: &[OverrideDecision],
    source: &str,
    target: &str,
) -> Result<Vec<CarriedOverride>, String> {
    let mut carries: BTreeMap<&str, &str> = BTreeMap::new();
    for old in current {
        let Some(new) = next.iter().find(|n| n.resource == old.resource) else {
            continue;
        };
        let (from, to) = (old.data_store.as_str(), new.data_store.as_str());
        if from == to {
            continue;
        }
        match carries.insert(from, to) {
            Some(other) if other != to => {
                return Err(format!(
                    "the overrides on {from} would be split between {other} and {to}: one override space moves whole to one DataStore; use `drop`"
                ));
            }
            _ => {}
        }
    }
    for (from, to) in &carries {
        if let Some(stays) = current.iter().find(|o| o.data_store == *from && !moves(o, next)) {
            return Err(format!(
                "{} stays on {from} while other overrides there move to {to}: one override space moves whole; use `drop`",
                stays.resource
            ));
        }
        if let Some((other, _)) = carries.iter().find(|(f, t)| t == &to && f != &from) {
            return Err(format!(
                "the overrides on {from} and on {other} would both move to {to}, mixing two override spaces; use `drop`"
            ));
        }
        if current.iter().any(|o| o.data_store == *to) {
            return Err(format!(
                "{to} already holds this control plane's overrides: moving {from} there would overwrite them; use `drop`"
            ));
        }
        if *to == source || *to == target {
            return Err(format!(
                "{to} is a primary DataStore of this migration: override data cannot move into a primary's space; use `drop`"
            ));
        }
    }
    Ok(carries
        .into_iter()
        .map(|(from, to)| CarriedOverride {
            from: from.to_owned(),
            to: to.to_owned(),
        })
        .collect())
}

/// Whether `old`'s resource leaves its DataStore in `next`: to another one, or dropped (nothing serves
/// a dropped resource, so it holds no space back).
fn moves(old: &OverrideDecision, next: &[OverrideDecision]) -> bool {
    next.iter()
        .find(|n| n.resource == old.resource)
        .is_none_or(|n| n.data_store != old.data_store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(resource: &str, data_store: &str) -> OverrideDecision {
        OverrideDecision {
            resource: resource.into(),
            data_store: data_store.into(),
        }
    }

    fn carry(from: &str, to: &str) -> CarriedOverride {
        CarriedOverride {
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn overrides_that_stay_carry_nothing() {
        let current = [o("/events", "ev-1"), o("coordination.k8s.io/leases", "ev-1")];
        assert_eq!(carried_overrides(&current, &current, "a", "b"), Ok(vec![]));
    }

    #[test]
    fn a_space_moving_whole_is_carried_once() {
        let current = [o("/events", "ev-1"), o("coordination.k8s.io/leases", "ev-1")];
        let next = [o("/events", "ev-2"), o("coordination.k8s.io/leases", "ev-2")];
        assert_eq!(
            carried_overrides(&current, &next, "a", "b"),
            Ok(vec![carry("ev-1", "ev-2")])
        );
    }

    #[test]
    fn two_spaces_moving_to_two_new_stores_are_both_carried() {
        let current = [o("/events", "ev-1"), o("coordination.k8s.io/leases", "le-1")];
        let next = [o("/events", "ev-2"), o("coordination.k8s.io/leases", "le-2")];
        assert_eq!(
            carried_overrides(&current, &next, "a", "b"),
            Ok(vec![carry("ev-1", "ev-2"), carry("le-1", "le-2")])
        );
    }

    #[test]
    fn a_split_a_merge_a_partial_move_and_a_move_into_a_used_or_primary_store_are_refused() {
        let split = carried_overrides(
            &[o("/events", "ev-1"), o("coordination.k8s.io/leases", "ev-1")],
            &[o("/events", "ev-2"), o("coordination.k8s.io/leases", "ev-3")],
            "a",
            "b",
        );
        assert!(split.unwrap_err().contains("split between ev-2 and ev-3"));
        let merge = carried_overrides(
            &[o("/events", "ev-1"), o("coordination.k8s.io/leases", "le-1")],
            &[o("/events", "ev-2"), o("coordination.k8s.io/leases", "ev-2")],
            "a",
            "b",
        );
        assert!(merge.unwrap_err().contains("both move to ev-2"));
        let partial = carried_overrides(
            &[o("/events", "ev-1"), o("coordination.k8s.io/leases", "ev-1")],
            &[o("/events", "ev-2"), o("coordination.k8s.io/leases", "ev-1")],
            "a",
            "b",
        );
        assert!(
            partial
                .unwrap_err()
                .contains("coordination.k8s.io/leases stays on ev-1")
        );
        let onto_used = carried_overrides(
            &[o("/events", "ev-1"), o("coordination.k8s.io/leases", "le-1")],
            &[o("/events", "le-1"), o("coordination.k8s.io/leases", "le-2")],
            "a",
            "b",
        );
        assert!(onto_used.unwrap_err().contains("le-1 already holds"));
        for primary in ["a", "b"] {
            let onto_primary = carried_overrides(&[o("/events", "ev-1")], &[o("/events", primary)], "a", "b");
            assert!(
                onto_primary.unwrap_err().contains("is a primary DataStore"),
                "{primary}"
            );
        }
    }

    #[test]
    fn a_dropped_or_added_resource_carries_nothing() {
        let current = [o("/events", "ev-1")];
        let next = [o("coordination.k8s.io/leases", "ev-2")];
        assert_eq!(carried_overrides(&current, &next, "a", "b"), Ok(vec![]));
    }
}

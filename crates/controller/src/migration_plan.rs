//! What a TenantControlPlane's spec and status say about its migration (pure): which DataStore the
//! datastore phase serves from, which overrides it uses, and what the migration manager does next.

use k8s_openapi::jiff::Timestamp;

use crate::k8s::crd::{
    DataStoreOverride, MigrationStage, MigrationStatus, OverridesPolicy, TenantControlPlane,
};

/// The lag (source changes not yet applied) under which catching up stops and the freeze starts.
pub const FREEZE_LAG: u64 = 200;

/// What the migration manager does next for one TenantControlPlane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing: no migration is wanted, or the last one ended.
    Idle,
    /// Start moving from `source` to `target`.
    Start {
        /// The DataStore the tenant serves from.
        source: String,
        /// The DataStore `spec.dataStore` names.
        target: String,
    },
    /// Stop the running migration before its switch (the spec no longer asks for its target).
    Abort,
    /// Run the current stage.
    Run(MigrationStage),
}

/// The migration in status, unless it ended.
pub fn active(tcp: &TenantControlPlane) -> Option<&MigrationStatus> {
    migration(tcp).filter(|m| !m.stage.ended())
}

/// The migration in status, running or ended.
pub fn migration(tcp: &TenantControlPlane) -> Option<&MigrationStatus> {
    tcp.status.as_ref()?.migration.as_ref()
}

/// The DataStore the tenant's data is recorded on (`status.storage.dataStoreName`).
pub fn recorded(tcp: &TenantControlPlane) -> Option<&str> {
    tcp.status
        .as_ref()?
        .storage
        .as_ref()?
        .data_store_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// `spec.dataStore`, if set.
pub fn wanted(tcp: &TenantControlPlane) -> Option<&str> {
    tcp.spec.data_store.as_deref().filter(|n| !n.is_empty())
}

/// The primary the datastore phase provisions and serves from: the target once a migration to the
/// wanted DataStore switched, the recorded DataStore while the tenant has not moved, else the spec's.
pub fn serving(tcp: &TenantControlPlane) -> Option<String> {
    let (recorded, wanted) = (recorded(tcp), wanted(tcp));
    match (recorded, wanted) {
        (Some(r), Some(w)) if r != w => {
            let switched = migration(tcp).is_some_and(|m| m.target == w && m.stage.switched());
            Some(if switched { w } else { r }.to_string())
        }
        (Some(r), _) => Some(r.to_string()),
        (None, w) => w.map(str::to_string),
    }
}

/// Whether the source of a running migration is frozen (or may be) and still served from: the
/// datastore phase must not provision it, which would give the tenant its write access back.
pub fn source_frozen(tcp: &TenantControlPlane) -> bool {
    active(tcp).is_some_and(|m| m.frozen_at.is_some() && !m.stage.switched())
}

/// Whether the tenant is moving: the spec names another DataStore than the one it serves from.
pub fn moving(tcp: &TenantControlPlane) -> bool {
    match (recorded(tcp), wanted(tcp)) {
        (Some(r), Some(w)) => r != w || active(tcp).is_some(),
        _ => active(tcp).is_some(),
    }
}

/// The overrides the datastore phase applies: the recorded ones until a migration switches (new
/// overrides may belong to the target's CA, which the source's apiserver flags cannot mix), then
/// the spec's.
pub fn overrides(tcp: &TenantControlPlane) -> Vec<DataStoreOverride> {
    let spec = tcp.spec.data_store_overrides.clone().unwrap_or_default();
    let before_switch = matches!((recorded(tcp), wanted(tcp)), (Some(r), Some(w)) if r != w)
        && !migration(tcp).is_some_and(|m| Some(m.target.as_str()) == wanted(tcp) && m.stage.switched());
    if !before_switch {
        return spec;
    }
    let recorded_overrides = tcp
        .status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .map(|s| s.overrides.as_slice())
        .unwrap_or_default();
    recorded_overrides
        .iter()
        .filter_map(|o| {
            Some(DataStoreOverride {
                resource: o.resource.clone(),
                data_store: o.data_store_name.clone()?,
            })
        })
        .collect()
}

/// What to do next, from the spec and the migration in status.
pub fn next(tcp: &TenantControlPlane) -> Next {
    let wanted = wanted(tcp);
    if let Some(m) = active(tcp) {
        if !m.stage.switched() && wanted != Some(m.target.as_str()) {
            return Next::Abort;
        }
        return Next::Run(m.stage);
    }
    match (recorded(tcp), wanted) {
        (Some(source), Some(target)) if source != target => {
            // An ended migration to this very target stays ended (Failed waits for a spec change).
            let ended_here = migration(tcp).is_some_and(|m| {
                m.target == target && m.source == source && m.stage == MigrationStage::Failed
            });
            if ended_here {
                Next::Idle
            } else {
                Next::Start {
                    source: source.to_string(),
                    target: target.to_string(),
                }
            }
        }
        _ => Next::Idle,
    }
}

/// The stage after `stage` succeeded.
pub fn after(stage: MigrationStage) -> MigrationStage {
    use MigrationStage::*;
    match stage {
        Copying => CatchingUp,
        CatchingUp => Frozen,
        Frozen => Switching,
        Switching => Verifying,
        Verifying | Done => Done,
        Aborted => Aborted,
        Failed => Failed,
    }
}

/// A new migration's status.
pub fn start(tcp: &TenantControlPlane, source: &str, target: &str, now: Timestamp) -> MigrationStatus {
    let setup = tcp
        .status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .and_then(|s| s.setup.as_ref());
    MigrationStatus {
        source: source.to_string(),
        target: target.to_string(),
        stage: MigrationStage::Copying,
        overrides: policy(tcp),
        started_at: now.to_string(),
        stage_started_at: now.to_string(),
        frozen_at: None,
        freeze_millis: None,
        finished_at: None,
        snapshot_revision: 0,
        cursor: None,
        applied_through: 0,
        copied: 0,
        lag: None,
        source_schema: setup.and_then(|s| s.schema.clone()),
        source_user: setup.and_then(|s| s.user.clone()),
        message: None,
        retries: 0,
        carried_overrides: Vec::new(),
    }
}

/// `spec.dataStoreMigration.overrides`, default `Drop`.
pub fn policy(tcp: &TenantControlPlane) -> OverridesPolicy {
    tcp.spec
        .data_store_migration
        .as_ref()
        .map(|p| p.overrides)
        .unwrap_or_default()
}

/// `m` moved on to `stage` at `now` (retries and message reset; end time when it ended).
pub fn advance(m: &MigrationStatus, stage: MigrationStage, now: Timestamp) -> MigrationStatus {
    let mut next = m.clone();
    next.stage = stage;
    next.stage_started_at = now.to_string();
    next.retries = 0;
    next.message = None;
    if stage.ended() {
        next.finished_at = Some(now.to_string());
    }
    next
}

/// Milliseconds from the RFC 3339 `since` to `now` (0 when unreadable).
pub fn millis_since(since: &str, now: Timestamp) -> i64 {
    since
        .parse::<Timestamp>()
        .map(|t| now.duration_since(t).as_millis() as i64)
        .unwrap_or(0)
}

/// The condition `Migrating` (type, status, reason, message) that `status.migration` implies.
pub fn condition(m: &MigrationStatus) -> (&'static str, String, String) {
    let status = if m.stage.ended() { "False" } else { "True" };
    let message = match (m.stage, &m.message) {
        (_, Some(message)) => format!("{} → {}: {message}", m.source, m.target),
        (MigrationStage::Done, None) => format!(
            "moved from {} to {}; writes were frozen for {} ms",
            m.source,
            m.target,
            m.freeze_millis.unwrap_or(0)
        ),
        (stage, None) => format!("{} → {}: {}", m.source, m.target, stage.as_str()),
    };
    (status, m.stage.as_str().to_string(), message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::k8s::crd::MigrationStage::*;
    use serde_json::json;

    fn tcp(spec: &str, recorded: Option<&str>, migration: Option<serde_json::Value>) -> TenantControlPlane {
        let mut status = json!({});
        if let Some(r) = recorded {
            status["storage"] =
                json!({"dataStoreName": r, "overrides": [{"resource": "/events", "dataStoreName": "ev-a"}]});
        }
        if let Some(m) = migration {
            status["migration"] = m;
        }
        serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": "cp", "namespace": "ns", "uid": "u-1"},
            "spec": {"dataStore": spec, "dataStoreOverrides": [{"resource": "/events", "dataStore": "ev-b"}],
                     "controlPlane": {"service": {"serviceType": "ClusterIP"}}, "kubernetes": {"version": "v1.34.4", "kubelet": {}}},
            "status": status,
        }))
        .unwrap()
    }

    fn m(source: &str, target: &str, stage: &str) -> serde_json::Value {
        json!({"source": source, "target": target, "stage": stage, "startedAt": "2026-12-03T00:00:00Z",
               "stageStartedAt": "2026-12-03T00:00:00Z"})
    }

    #[test]
    fn a_changed_spec_starts_a_migration_and_the_tenant_keeps_serving_from_the_source() {
        let t = tcp("b", Some("a"), None);
        assert_eq!(
            next(&t),
            Next::Start {
                source: "a".into(),
                target: "b".into()
            }
        );
        assert_eq!(serving(&t).as_deref(), Some("a"));
        assert_eq!(overrides(&t)[0].data_store, "ev-a");
        assert!(moving(&t));
    }

    #[test]
    fn the_target_serves_from_the_switch_on_with_the_spec_overrides() {
        for stage in ["Switching", "Verifying"] {
            let t = tcp("b", Some("a"), Some(m("a", "b", stage)));
            assert_eq!(serving(&t).as_deref(), Some("b"), "{stage}");
            assert_eq!(overrides(&t)[0].data_store, "ev-b", "{stage}");
        }
        let t = tcp("b", Some("a"), Some(m("a", "b", "Frozen")));
        assert_eq!(serving(&t).as_deref(), Some("a"));
        assert_eq!(next(&t), Next::Run(Frozen));
    }

    #[test]
    fn the_spec_going_back_before_the_switch_aborts_and_after_it_does_not() {
        let t = tcp("a", Some("a"), Some(m("a", "b", "CatchingUp")));
        assert_eq!(next(&t), Next::Abort);
        let t = tcp("c", Some("a"), Some(m("a", "b", "Copying")));
        assert_eq!(next(&t), Next::Abort);
        let t = tcp("a", Some("b"), Some(m("a", "b", "Verifying")));
        assert_eq!(next(&t), Next::Run(Verifying));
    }

    #[test]
    fn an_ended_migration_is_idle_and_a_failed_one_waits_for_a_spec_change() {
        let t = tcp("b", Some("b"), Some(m("a", "b", "Done")));
        assert_eq!(next(&t), Next::Idle);
        assert!(!moving(&t));
        let t = tcp("b", Some("a"), Some(m("a", "b", "Failed")));
        assert_eq!(next(&t), Next::Idle);
        assert_eq!(serving(&t).as_deref(), Some("a"));
        let t = tcp("c", Some("a"), Some(m("a", "b", "Failed")));
        assert_eq!(
            next(&t),
            Next::Start {
                source: "a".into(),
                target: "c".into()
            }
        );
    }

    #[test]
    fn stages_follow_the_documented_order() {
        let order = [Copying, CatchingUp, Frozen, Switching, Verifying, Done];
        for pair in order.windows(2) {
            assert_eq!(after(pair[0]), pair[1]);
            assert!(pair[0] < pair[1]);
        }
        assert!(!Frozen.switched() && Switching.switched());
    }
}

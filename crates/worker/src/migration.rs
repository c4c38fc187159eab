//! Migrations in the worker: the target (and its overrides) rendered while a migration is open, and what
//! the controller's migration record says about the `migrate` operation (pure).

use crate::{
    domain::OperationStage,
    k8s::crd::{DataStoreMigrationPolicy, MigrationStage, MigrationStatus, OverridesPolicy},
    translate::Placement,
};
use tenantplane_store::migrations::OpenMigration;

/// The placement to render: an open migration's target and overrides, else (also while an abort
/// unwinds it) the recorded one.
pub fn rendered(recorded: Placement, open: Option<&OpenMigration>) -> Placement {
    match open {
        Some(m) if !m.aborted => Placement {
            data_store: Some(m.target.clone()),
            overrides: m.overrides.clone(),
        },
        _ => recorded,
    }
}

/// `spec.dataStoreMigration` of an open migration (none otherwise).
pub fn policy(open: Option<&OpenMigration>) -> Option<DataStoreMigrationPolicy> {
    open.map(|m| DataStoreMigrationPolicy {
        overrides: if m.overrides_policy == "move" {
            OverridesPolicy::Move
        } else {
            OverridesPolicy::Drop
        },
    })
}

/// How a migration ended, as the operation records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// `Done`: the control plane serves from the target.
    Done,
    /// `Failed` or `Aborted` before the switch: `(reason, message)`.
    Failed(&'static str, String),
}

/// What a migration record says: the move it is about, the operation stages reached, and its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationProgress {
    /// The DataStore it moves from.
    pub source: String,
    /// The DataStore it moves to.
    pub target: String,
    /// The operation stages reached, in order (a prefix of [`OperationStage::MIGRATE`]).
    pub stages: Vec<OperationStage>,
    /// Its end, once it ended.
    pub ended: Option<Ended>,
}

/// The progress migration record `m` shows.
pub fn progress(m: &MigrationStatus) -> MigrationProgress {
    let reached = match m.stage {
        MigrationStage::Copying => 2,
        MigrationStage::CatchingUp => 3,
        MigrationStage::Frozen => 4,
        MigrationStage::Switching => 5,
        MigrationStage::Verifying => 6,
        MigrationStage::Done => 7,
        // Ended before the switch: the stages it reached were recorded as they came.
        MigrationStage::Aborted | MigrationStage::Failed => 1,
    };
    let message = || {
        m.message
            .clone()
            .unwrap_or_else(|| format!("the migration ended {}", m.stage.as_str()))
    };
    let ended = match m.stage {
        MigrationStage::Done => Some(Ended::Done),
        MigrationStage::Failed => Some(Ended::Failed("MigrationFailed", message())),
        MigrationStage::Aborted => Some(Ended::Failed("MigrationAborted", message())),
        _ => None,
    };
    MigrationProgress {
        source: m.source.clone(),
        target: m.target.clone(),
        stages: OperationStage::MIGRATE[..reached].to_vec(),
        ended,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::domain::OperationStage::*;

    fn record(stage: &str, message: Option<&str>) -> MigrationStatus {
        serde_json::from_value(serde_json::json!({
            "source": "etcd-a", "target": "etcd-b", "stage": stage, "startedAt": "2026-12-01T00:00:00Z",
            "stageStartedAt": "2026-12-01T00:00:05Z", "message": message}))
        .unwrap()
    }

    #[test]
    fn each_stage_implies_the_ones_before_it() {
        let seen = progress(&record("Frozen", None));
        assert_eq!(seen.stages, [Placed, Copying, CatchingUp, Frozen]);
        assert_eq!(
            (seen.source.as_str(), seen.target.as_str(), seen.ended),
            ("etcd-a", "etcd-b", None)
        );
    }

    #[test]
    fn done_ends_with_every_stage() {
        let seen = progress(&record("Done", None));
        assert_eq!(seen.stages, OperationStage::MIGRATE.to_vec());
        assert_eq!(seen.ended, Some(Ended::Done));
    }

    #[test]
    fn failed_and_aborted_end_with_the_controller_s_message() {
        assert_eq!(
            progress(&record("Failed", Some("target unreachable"))).ended,
            Some(Ended::Failed("MigrationFailed", "target unreachable".into()))
        );
        assert_eq!(
            progress(&record("Aborted", None)).ended,
            Some(Ended::Failed(
                "MigrationAborted",
                "the migration ended Aborted".into()
            ))
        );
    }

    fn open(aborted: bool) -> OpenMigration {
        OpenMigration {
            operation_id: uuid::Uuid::nil(),
            source: "etcd-a".into(),
            target: "etcd-b".into(),
            overrides_policy: "drop".into(),
            overrides: vec![("/events".into(), "etcd-ev2".into())],
            aborted,
        }
    }

    #[test]
    fn an_open_migration_renders_its_target_until_it_is_aborted() {
        let recorded = Placement {
            data_store: Some("etcd-a".into()),
            overrides: vec![("/events".into(), "etcd-ev".into())],
        };
        let moving = rendered(recorded.clone(), Some(&open(false)));
        assert_eq!(
            (moving.data_store.as_deref(), moving.overrides),
            (Some("etcd-b"), vec![("/events".into(), "etcd-ev2".into())])
        );
        assert_eq!(rendered(recorded.clone(), Some(&open(true))), recorded);
        assert_eq!(rendered(recorded.clone(), None), recorded);
    }
}

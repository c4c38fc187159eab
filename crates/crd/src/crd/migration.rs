//! Tenantplane's extension of the TenantControlPlane: moving a serving control plane to another
//! DataStore, live. Changing `spec.dataStore` starts a migration; `spec.dataStoreMigration` is its
//! policy and `status.migration` its state, which is all a restarted controller needs to resume.
//!
//! Upstream Kamaji does not know these fields; its CRD prunes them.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// How a migration treats the tenant's data.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataStoreMigrationPolicy {
    /// What happens to the data on the override DataStores (Events, Leases): `Drop` (default: the new
    /// override spaces start empty) or `Move` (copied like the primary). The tenant's space on an old
    /// override DataStore is removed either way.
    #[serde(default)]
    pub overrides: OverridesPolicy,
}

/// What a migration does with the override DataStores' data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum OverridesPolicy {
    /// Start the new override spaces empty (the data is disposable by nature).
    #[default]
    Drop,
    /// Copy the override data too.
    Move,
}

/// The stages of a migration, in order; `Aborted` and `Failed` end one before `Switching`.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub enum MigrationStage {
    /// The source's space, read at one revision, is copied page by page.
    Copying,
    /// Later changes on the source are applied until the lag is small.
    CatchingUp,
    /// The source is read-only for the tenant; the rest of its changes are applied.
    Frozen,
    /// The Deployment moves to the target; old pods serve reads until the new ones are ready.
    Switching,
    /// Both spaces are compared key by key.
    Verifying,
    /// The tenant serves from the target and its source space is gone.
    Done,
    /// Stopped before the switch on request: the tenant serves from the source, writable again.
    Aborted,
    /// Stopped before the switch by a permanent failure: the tenant serves from the source.
    Failed,
}

impl MigrationStage {
    /// Whether the tenant already serves, or is moving to serve, from the target.
    pub fn switched(self) -> bool {
        matches!(self, Self::Switching | Self::Verifying | Self::Done)
    }

    /// Whether the migration has ended (`Done`, `Aborted` or `Failed`).
    pub fn ended(self) -> bool {
        matches!(self, Self::Done | Self::Aborted | Self::Failed)
    }

    /// The stage's name as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "Copying",
            Self::CatchingUp => "CatchingUp",
            Self::Frozen => "Frozen",
            Self::Switching => "Switching",
            Self::Verifying => "Verifying",
            Self::Done => "Done",
            Self::Aborted => "Aborted",
            Self::Failed => "Failed",
        }
    }
}

/// Where a migration stands (`status.migration`), written by the controller's migration manager only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// The DataStore the tenant moves from.
    pub source: String,
    /// The DataStore the tenant moves to.
    pub target: String,
    /// The current stage.
    pub stage: MigrationStage,
    /// The override policy the migration runs with.
    #[serde(default)]
    pub overrides: OverridesPolicy,
    /// When the migration started (RFC 3339).
    pub started_at: String,
    /// When the current stage started (RFC 3339).
    pub stage_started_at: String,
    /// When the source was frozen (RFC 3339), once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_at: Option<String>,
    /// When writes worked again, on the target (or on the source after an abort), in milliseconds
    /// after `frozenAt`: the measured write freeze.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeze_millis: Option<i64>,
    /// When the migration ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The source revision (etcd) or kine row id the copy reads at.
    #[serde(default)]
    pub snapshot_revision: i64,
    /// The copy's position (the last key or row id copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The source revision or row id up to which changes are applied on the target.
    #[serde(default)]
    pub applied_through: i64,
    /// Keys or rows written to the target so far.
    #[serde(default)]
    pub copied: i64,
    /// Source changes not yet applied, at the last catch-up step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// The schema and user of the tenant's space on the source, removed after `Verifying`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_schema: Option<String>,
    /// The user on the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_user: Option<String>,
    /// Why the migration failed, was aborted, or is retrying (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Failed attempts of the current stage in a row.
    #[serde(default)]
    pub retries: i32,
    /// With `overrides: move`, the override spaces carried to new DataStores, recorded when the
    /// migration starts so that an abort removes exactly these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried_overrides: Vec<CarriedOverrideStatus>,
}

/// One override space carried whole from one etcd DataStore to another.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarriedOverrideStatus {
    /// The DataStore the space is on before the switch.
    pub from: String,
    /// The DataStore it moves to.
    pub to: String,
}

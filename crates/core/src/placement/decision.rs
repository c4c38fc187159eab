//! What the engine answers: the chosen DataStores and, for each candidate, its score or why it was turned down.

use serde::{Deserialize, Serialize};

use super::{model::Slot, reason::Reason};

/// The outcome of [`super::choose`]: slots into the snapshot, no strings, no report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// The primary DataStore (`spec.dataStore`).
    pub primary: Slot,
    /// The override DataStore and the resources it takes, if the request offloads any.
    pub offload: Option<Offload>,
}

/// The resources offloaded by one request and the DataStore that takes them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Offload {
    /// The override DataStore.
    pub target: Slot,
    /// The offloaded resources: `/events` first, then `coordination.k8s.io/leases`.
    pub resources: &'static [&'static str],
}

/// A placement with its reasons, ready for an API response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Name of the primary DataStore.
    pub primary: String,
    /// The offloaded resources and where they go: `/events` first, then `coordination.k8s.io/leases`.
    #[serde(default)]
    pub overrides: Vec<OverrideDecision>,
    /// Every DataStore considered for the primary, in snapshot order.
    pub candidates: Vec<CandidateReport>,
    /// Every DataStore of the override pool considered for the overrides, in snapshot order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub override_candidates: Vec<CandidateReport>,
}

impl Decision {
    /// The `(resource, dataStore)` pairs of `spec.dataStoreOverrides`, in order.
    pub fn data_store_overrides(&self) -> Vec<(&str, &str)> {
        self.overrides
            .iter()
            .map(|o| (o.resource.as_str(), o.data_store.as_str()))
            .collect()
    }
}

/// One resource stored in another etcd DataStore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideDecision {
    /// `<group>/<resource>`, core group empty: `/events`.
    pub resource: String,
    /// Name of the etcd DataStore that stores it.
    pub data_store: String,
}

/// One DataStore the engine looked at, and what it made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateReport {
    /// The DataStore's name.
    pub data_store: String,
    /// Its pool.
    pub pool: String,
    /// Its score under the pool's policy, or the first constraint it failed.
    pub outcome: Outcome,
}

/// A candidate's score (higher is better; see [`super::score`]) or the constraint it failed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It fits, with this score.
    Scored(f64),
    /// It does not fit, for this reason.
    Rejected(Reason),
}

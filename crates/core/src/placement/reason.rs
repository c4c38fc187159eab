//! Why a DataStore was turned down, and the errors of the engine.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The hard constraint a DataStore failed, in the order they are checked (the first failure is reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Its driver is not among the request's allowed drivers (or, in a drain, not the source's driver).
    DriverNotAllowed,
    /// Not etcd, while the request offloads resources: overrides need an etcd primary.
    PrimaryNotEtcd,
    /// Not etcd, so it cannot be an override target.
    OverrideNotEtcd,
    /// Its labels do not match the label selector.
    LabelMismatch,
    /// The control plane already uses it (an override cannot be the primary, nor the other way round).
    AlreadyUsed,
    /// Its etcd CA differs from the primary's (or is unknown): kube-apiserver has one etcd client certificate.
    CaMismatch,
    /// Not ready.
    NotReady,
    /// Cordoned.
    Cordoned,
    /// A NATS DataStore that already holds a tenant: NATS is always one tenant per DataStore.
    NatsInUse,
    /// In a `Dedicated` pool and already holds a tenant.
    DedicatedInUse,
    /// No tenant slot left.
    AtCapacity,
    /// The tenant's byte estimate does not fit.
    AtByteCapacity,
    /// Fits as primary, but no override DataStore fits under its etcd CA.
    NoOverrideOnCa,
}

impl utoipa::PartialSchema for Reason {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("The hard constraint a DataStore failed."))
            .enum_values(Some(Reason::ALL.map(Reason::as_str)))
            .into()
    }
}

impl utoipa::ToSchema for Reason {}

impl Reason {
    /// Every reason, in check order.
    pub const ALL: [Reason; 13] = [
        Reason::DriverNotAllowed,
        Reason::PrimaryNotEtcd,
        Reason::OverrideNotEtcd,
        Reason::LabelMismatch,
        Reason::AlreadyUsed,
        Reason::CaMismatch,
        Reason::NotReady,
        Reason::Cordoned,
        Reason::NatsInUse,
        Reason::DedicatedInUse,
        Reason::AtCapacity,
        Reason::AtByteCapacity,
        Reason::NoOverrideOnCa,
    ];

    /// The stable snake_case name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DriverNotAllowed => "driver_not_allowed",
            Reason::PrimaryNotEtcd => "primary_not_etcd",
            Reason::OverrideNotEtcd => "override_not_etcd",
            Reason::LabelMismatch => "label_mismatch",
            Reason::AlreadyUsed => "already_used",
            Reason::CaMismatch => "ca_mismatch",
            Reason::NotReady => "not_ready",
            Reason::Cordoned => "cordoned",
            Reason::NatsInUse => "nats_in_use",
            Reason::DedicatedInUse => "dedicated_in_use",
            Reason::AtCapacity => "at_capacity",
            Reason::AtByteCapacity => "at_byte_capacity",
            Reason::NoOverrideOnCa => "no_override_on_ca",
        }
    }

    /// How a count of DataStores turned down for this reason reads: "3 at capacity".
    pub fn phrase(self) -> &'static str {
        match self {
            Reason::DriverNotAllowed => "with a driver that is not allowed",
            Reason::PrimaryNotEtcd => "not etcd (overrides need an etcd primary)",
            Reason::OverrideNotEtcd => "not etcd",
            Reason::LabelMismatch => "not matching the label selector",
            Reason::AlreadyUsed => "already used by this control plane",
            Reason::CaMismatch => "under another etcd CA",
            Reason::NotReady => "not ready",
            Reason::Cordoned => "cordoned",
            Reason::NatsInUse => "NATS already in use",
            Reason::DedicatedInUse => "dedicated and already in use",
            Reason::AtCapacity => "at capacity",
            Reason::AtByteCapacity => "at byte capacity",
            Reason::NoOverrideOnCa => "without a fitting override DataStore under their etcd CA",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts of turned-down DataStores per reason, without allocating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally([u32; Reason::ALL.len()]);

impl Tally {
    /// Counts one more DataStore turned down for `reason`.
    pub(crate) fn add(&mut self, reason: Reason) {
        self.0[reason.index()] += 1;
    }

    /// How many were turned down for `reason`.
    pub(crate) fn get(&self, reason: Reason) -> u32 {
        self.0[reason.index()]
    }

    /// The non-zero counts, most frequent first, ties in check order.
    pub(crate) fn summary(&self) -> Vec<(Reason, u32)> {
        let mut out: Vec<(Reason, u32)> = Reason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// Renders a summary as "3 at capacity, 2 cordoned, 1 not ready".
#[derive(Debug, Clone, Copy)]
pub struct SummaryText<'a>(pub &'a [(Reason, u32)]);

impl fmt::Display for SummaryText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("there is no DataStore to consider");
        }
        for (i, (reason, count)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{count} {}", reason.phrase())?;
        }
        Ok(())
    }
}

/// Why the engine made no decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "error")]
pub enum PlacementError {
    /// The request or the configuration names a pool the snapshot does not have.
    #[error("there is no pool named {pool:?}")]
    UnknownPool {
        /// The missing pool.
        pool: String,
    },
    /// A drain names a DataStore the snapshot does not have.
    #[error("there is no DataStore named {data_store:?}")]
    UnknownDataStore {
        /// The missing DataStore.
        data_store: String,
    },
    /// The request offloads to a pool, but the allow-list takes none of the resources it would offload.
    #[error("offload to pool {pool:?} was asked for, but none of its resources is on the offload allow-list")]
    NothingToOffload {
        /// The requested override pool.
        pool: String,
    },
    /// No DataStore passes every hard constraint for the primary.
    #[error("no DataStore fits: {}", SummaryText(summary))]
    NoCandidate {
        /// How many DataStores each constraint removed, most first.
        summary: Vec<(Reason, u32)>,
    },
    /// A primary fits, but no override DataStore does (reported for the best primary).
    #[error("no override DataStore fits {resource}: {}", SummaryText(summary))]
    NoOverrideCandidate {
        /// The first resource that could not be offloaded.
        resource: String,
        /// How many override DataStores each constraint removed, most first.
        summary: Vec<(Reason, u32)>,
    },
}

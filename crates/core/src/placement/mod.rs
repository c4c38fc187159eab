//! The placement engine: which DataStore (and which override DataStore) a tenant control plane goes to.
//!
//! It is pure: [`place`] and [`choose`] read a [`PlacementRequest`], a [`Snapshot`] of pools and DataStores
//! and a [`PlacementConfig`], and return a decision; nothing is read or written elsewhere. The store makes a
//! decision atomic (capacity never oversubscribed, NATS never shared) by re-checking it when it commits.
//!
//! A DataStore is a candidate only if it passes every hard constraint ([`Reason`] lists them in check order);
//! the pool's [`Policy`] ranks the candidates ([`score`] says how). [`place`] explains itself: every
//! candidate's score or reason, and, when nothing fits, an error that counts what removed the candidates.
//! [`choose`] is the same decision without the report, for hot loops. [`drain_plan`] plans how to empty a
//! cordoned DataStore.

mod carry;
mod decision;
mod drain;
mod engine;
mod model;
mod reason;
mod rebalance;
pub mod score;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use carry::{CarriedOverride, carried_overrides};
pub use decision::{CandidateReport, Choice, Decision, Offload, Outcome, OverrideDecision};
pub use drain::{Assignment, Move, Usage, drain_plan};
pub use engine::{choose, place};
pub use model::{
    AllowListError, BUILTIN_GROUPS, BytesPerSize, DataStoreSnapshot, EVENTS, LEASES, OffloadAllowList,
    OffloadMode, PlacementConfig, PlacementRequest, Policy, PoolSnapshot, SizeClass, Slot, Snapshot,
};
pub use reason::{PlacementError, Reason, SummaryText};
pub use rebalance::{imbalance, rebalance_plan, retarget_overrides};
pub use score::rendezvous_hash;

impl Snapshot {
    /// Adds a choice's tenant to the load of every DataStore it uses, as the store does on commit.
    pub fn record(&mut self, choice: &Choice, size: SizeClass, config: &PlacementConfig) {
        self.add_load(choice.primary, size, config);
        if let Some(offload) = choice.offload {
            self.add_load(offload.target, size, config);
        }
    }
}

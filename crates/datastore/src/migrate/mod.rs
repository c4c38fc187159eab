//! Live migration of one tenant's space from a source datastore to a target datastore of the same
//! driver, in resumable steps: the caller (the controller) persists the [`Checkpoint`] after every
//! step, in the TenantControlPlane's status, so a restart at any stage resumes where it stopped.
//!
//! The stages, in order, and the step that drives each:
//! - `Copying`: [`Mover::copy_step`] copies one page of the source's space, read at one point in time,
//!   until it reports [`Step::Done`];
//! - `CatchingUp`: [`Mover::catch_up_step`] applies the source's later changes and reports the lag;
//! - `Frozen`: [`Mover::freeze`] stops the tenant's writes on the source (a datastore-level freeze the
//!   tenant cannot lift: etcd refuses them, kine's make them wait), then [`Mover::finish_step`] applies
//!   everything up to the source's final state and makes the target safe to serve (revisions, see each
//!   driver);
//! - `Switching` is the controller's (the Deployment moves to the target);
//! - `Verifying`: [`Mover::verify`] compares the two spaces key by key.
//!
//! Before the switch, [`Mover::thaw`] lifts the freeze (abort, or a failure: the tenant keeps serving
//! on the source). Both spaces are provisioned and removed with the drivers' own
//! [`crate::Driver::provision`]/[`crate::Driver::deprovision`]; a mover writes only inside them.

pub mod etcd;
pub mod sql;

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::DatastoreError;

/// Where a migration's data movement stands; opaque to the caller, which stores and returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The source revision the copy reads at (etcd: a revision; kine: the highest row id then).
    #[serde(default)]
    pub snapshot_revision: i64,
    /// The copy's position: the last key (etcd) or row id (kine) copied; `None` before the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The source revision (etcd) or kine row id up to which changes are applied on the target.
    #[serde(default)]
    pub applied_through: i64,
    /// Keys or rows written to the target so far (for progress).
    #[serde(default)]
    pub copied: u64,
}

/// The outcome of one bounded step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Call the step again.
    More,
    /// The stage's work is done.
    Done,
}

/// The result of comparing the two spaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// Keys compared.
    pub keys: u64,
    /// Up to 10 keys that differ (missing on one side, or another value), for the condition message.
    pub mismatches: Vec<String>,
    /// How many keys differ in all.
    pub mismatch_count: u64,
}

impl Verification {
    /// Whether both spaces hold exactly the same keys and values.
    pub fn equal(&self) -> bool {
        self.mismatch_count == 0
    }
}

/// Moves one tenant's space between two datastores of one driver. Every method is idempotent given
/// the same checkpoint, so a step interrupted by a crash can be run again.
pub trait Mover: Send + Sync {
    /// Copying: one page (bounded in keys and bytes) of the source's space; [`Step::Done`] when the
    /// whole space as of `checkpoint.snapshot_revision` is on the target.
    fn copy_step(
        &self,
        checkpoint: &mut Checkpoint,
    ) -> impl Future<Output = Result<Step, DatastoreError>> + Send;

    /// CatchingUp: applies source changes after `checkpoint.applied_through` for a bounded time;
    /// returns how many source changes are still not applied (the lag).
    fn catch_up_step(
        &self,
        checkpoint: &mut Checkpoint,
    ) -> impl Future<Output = Result<u64, DatastoreError>> + Send;

    /// Stops the tenant's writes on the source (refused or waiting, see each driver) and returns once
    /// none that could still commit is in flight; the tenant's reads keep working.
    fn freeze(&self) -> impl Future<Output = Result<(), DatastoreError>> + Send;

    /// After [`Mover::freeze`]: makes the tenant's reads of the source fail too, so that a write of
    /// the tenant that fails while frozen can never be answered as a success by a read finding its
    /// key absent (kine, see `sql`). Idempotent; [`Mover::thaw`] undoes it. Nothing to do by default.
    fn seal(&self) -> impl Future<Output = Result<(), DatastoreError>> + Send {
        async { Ok(()) }
    }

    /// Lifts [`Mover::freeze`] and [`Mover::seal`] (abort or failure before the switch).
    fn thaw(&self) -> impl Future<Output = Result<(), DatastoreError>> + Send;

    /// Frozen: applies the rest of the source's changes and makes the target safe to serve from;
    /// [`Step::Done`] when the target holds the source's final state.
    fn finish_step(
        &self,
        checkpoint: &mut Checkpoint,
    ) -> impl Future<Output = Result<Step, DatastoreError>> + Send;

    /// Verifying: compares both spaces key by key (latest value of each key).
    fn verify(&self) -> impl Future<Output = Result<Verification, DatastoreError>> + Send;
}

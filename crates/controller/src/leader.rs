//! Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! only the holder of the Lease runs the controllers.
//!
//! - The holder renews `renewTime` every `retry_period`. Writes are `replace`s carrying the Lease's
//!   `resourceVersion`, so two candidates can never both win the same round (the loser gets a 409).
//! - A candidate takes the Lease over when it is free (no holder) or when its record (holder, renew time,
//!   transitions) has not changed for `lease_duration` **by the candidate's own clock**: expiry never
//!   compares timestamps written by another machine, so clock skew does not matter.
//! - A holder that cannot renew for `renew_deadline`, or finds someone else holding the Lease, stops its
//!   work ([`LeaderElector::run`] returns [`LeaderError::Lost`]); the process should exit and restart.
//! - On a clean stop the holder releases the Lease (no holder, duration 1 s) so a standby takes over at once.

use std::{
    future::Future,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{PostParams, ResourceExt as _},
};

/// Where the Lease lives and how it is timed.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This candidate's identity (`holderIdentity`).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long the holder keeps working while renewals fail.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why [`LeaderElector::run`] stopped the work.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Another candidate holds the Lease now, or renewals failed for longer than the renew deadline.
    #[error("lost the leader lease {namespace}/{name}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
    },
}

/// The Lease record as last seen, and when it was first seen in that state (local clock).
#[derive(Debug)]
struct Observed {
    record: (Option<String>, Option<MicroTime>, Option<i32>),
    since: Instant,
}

/// A candidate for the Lease.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Mutex<Option<Observed>>,
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl LeaderElector {
    /// A candidate using `client`.
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: Mutex::new(None),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    /// One round: creates, renews or takes over the Lease. `Ok(true)` when this candidate holds it now.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let me = self.settings.identity.clone();
        let Some(lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds(self.settings.lease_duration)),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(err) if is_conflict(&err) => Ok(false),
                Err(err) => Err(err),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let held_by_me = holder.as_deref() == Some(me.as_str());
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.settings.lease_duration);
        let expired = {
            let record = (holder.clone(), spec.renew_time.clone(), spec.lease_transitions);
            let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
            match observed.as_ref() {
                Some(o) if o.record == record => {}
                _ => {
                    *observed = Some(Observed {
                        record,
                        since: Instant::now(),
                    })
                }
            }
            observed.as_ref().is_some_and(|o| o.since.elapsed() >= duration)
        };
        if holder.is_some() && !held_by_me && !expired {
            return Ok(false);
        }
        let mut updated = lease.clone();
        updated.spec = Some(LeaseSpec {
            holder_identity: Some(me),
            lease_duration_seconds: Some(seconds(self.settings.lease_duration)),
            acquire_time: if held_by_me {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: if held_by_me {
                spec.lease_transitions
            } else {
                Some(spec.lease_transitions.unwrap_or(0) + 1)
            },
            ..spec
        });
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if is_conflict(&err) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Gives the Lease up if this candidate holds it, so a standby takes over without waiting.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if is_conflict(&err) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(
                        lease = %self.settings.name,
                        identity = %self.settings.identity,
                        "became leader"
                    );
                    return;
                }
                Ok(false) => {}
                Err(err) => tracing::warn!(lease = %self.settings.name, "acquiring the lease failed: {err}"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Keeps renewing; returns when leadership is lost.
    async fn keep_renewing(&self) -> LeaderError {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = Instant::now(),
                Ok(false) => break,
                Err(err) => {
                    tracing::warn!(lease = %self.settings.name, "renewing the lease failed: {err}");
                    if last_renewal.elapsed() >= self.settings.renew_deadline {
                        break;
                    }
                }
            }
        }
        tracing::error!(lease = %self.settings.name, identity = %self.settings.identity, "lost the lease");
        LeaderError::Lost {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
        }
    }

    /// Acquires the Lease, then runs `work` while renewing it. Returns `work`'s output (after releasing
    /// the Lease) or [`LeaderError::Lost`] (after dropping `work`).
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output, LeaderError> {
        self.acquire().await;
        tokio::select! {
            output = work => {
                if let Err(err) = self.release().await {
                    tracing::warn!(lease = %self.settings.name, "releasing the lease failed: {err}");
                }
                Ok(output)
            }
            lost = self.keep_renewing() => Err(lost),
        }
    }
}

//! Live control-plane events for subscriptions.
//!
//! The worker writes a control plane's status and sends `NOTIFY control_plane_status, '<tenant>:<id>'` in
//! the same statement (`store::outbox::write_status`), and `'<tenant>:<id>:deleted'` in the transaction
//! that records it gone (`store::outbox::mark_deleted`), so a notification arrives only after the change
//! is committed. One `LISTEN` per process (started by the first subscriber) loads the changed control
//! plane once, when its tenant has subscribers, and fans it out through that tenant's bounded broadcast
//! channel: a burst in one tenant never makes another tenant's subscribers lag. A subscriber that falls
//! more than the channel's capacity behind its own tenant's events gets
//! [`Lagged`](tokio::sync::broadcast::error::RecvError::Lagged) and is dropped by the surface: memory
//! never grows with a slow client.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sqlx::postgres::PgListener;
use tokio::sync::{OnceCell, broadcast};
use uuid::Uuid;

use super::{
    Ctx, Result, ServiceError,
    model::{ControlPlane, Operation},
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::Role;

/// The channel the worker notifies on.
pub const CHANNEL: &str = "control_plane_status";
/// The channel a token's revocation is announced on (payload: its `jti`).
pub const REVOKED_CHANNEL: &str = "token_revoked";

/// What happened to a control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Its observed phase, status or conditions changed.
    Changed,
    /// It is gone, with its datastore space: the last event about it.
    Deleted,
}

/// A control plane whose status or conditions changed, or that is gone, as committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Its tenant.
    pub tenant_id: Uuid,
    /// The control plane after the change.
    pub control_plane: ControlPlane,
}

/// An operation that changed (a stage, its state), as committed.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationEvent {
    /// Its tenant.
    pub tenant_id: Uuid,
    /// The operation after the change.
    pub operation: Operation,
}

/// The process-wide fan-out of [`Event`]s and [`OperationEvent`]s, one channel per tenant; cheap to clone.
#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

#[derive(Debug)]
struct HubInner {
    /// Control-plane events, once their `LISTEN` runs.
    control_planes: OnceCell<()>,
    control_plane_channels: Channels<Event>,
    /// Operation events, once their `LISTEN` runs.
    operations: OnceCell<()>,
    operation_channels: Channels<OperationEvent>,
    capacity: usize,
    revoked: OnceCell<broadcast::Sender<Uuid>>,
}

/// One bounded broadcast channel per tenant with subscribers, so a tenant's burst of events fills only
/// its own subscribers' buffers: another tenant's subscribers neither see it nor lag behind it.
#[derive(Debug)]
struct Channels<T> {
    capacity: usize,
    by_tenant: std::sync::Mutex<HashMap<Uuid, broadcast::Sender<Arc<T>>>>,
}

impl<T> Channels<T> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            by_tenant: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, broadcast::Sender<Arc<T>>>> {
        self.by_tenant
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver of `tenant`'s events (forgets the channels nobody listens to any more).
    fn subscribe(&self, tenant: Uuid) -> broadcast::Receiver<Arc<T>> {
        let mut channels = self.lock();
        channels.retain(|_, sender| sender.receiver_count() > 0);
        channels
            .entry(tenant)
            .or_insert_with(|| broadcast::channel(self.capacity).0)
            .subscribe()
    }

    /// Whether anyone listens to `tenant`'s events (nothing is loaded for a tenant nobody listens to).
    fn wanted(&self, tenant: Uuid) -> bool {
        self.lock()
            .get(&tenant)
            .is_some_and(|sender| sender.receiver_count() > 0)
    }

    /// Sends `event` to `tenant`'s subscribers, if it has any.
    fn send(&self, tenant: Uuid, event: T) {
        if let Some(sender) = self.lock().get(&tenant) {
            // No receivers is fine: the last one left since `wanted`.
            let _ = sender.send(Arc::new(event));
        }
    }
}

impl Hub {
    /// A hub whose subscribers may fall at most `capacity` events of their own tenant behind.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Arc::new(HubInner {
                control_planes: OnceCell::new(),
                control_plane_channels: Channels::new(capacity),
                operations: OnceCell::new(),
                operation_channels: Channels::new(capacity),
                capacity,
                revoked: OnceCell::new(),
            }),
        }
    }

    /// The control-plane events of `tenant` as they are committed; the first call starts the `LISTEN` and
    /// returns once it is active.
    pub async fn control_planes(
        &self,
        db: &sqlx::PgPool,
        tenant: Uuid,
    ) -> Result<broadcast::Receiver<Arc<Event>>> {
        self.inner
            .control_planes
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(db).await?;
                listener.listen(CHANNEL).await?;
                tokio::spawn(relay(listener, db.clone(), self.clone()));
                Ok::<_, ServiceError>(())
            })
            .await?;
        Ok(self.inner.control_plane_channels.subscribe(tenant))
    }

    /// The operation changes of `tenant` as they are committed; the first call starts the `LISTEN` and
    /// returns once it is active.
    pub async fn operations(
        &self,
        db: &sqlx::PgPool,
        tenant: Uuid,
    ) -> Result<broadcast::Receiver<Arc<OperationEvent>>> {
        self.inner
            .operations
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(db).await?;
                listener.listen(tenantplane_store::operations::CHANNEL).await?;
                tokio::spawn(relay_operations(listener, db.clone(), self.clone()));
                Ok::<_, ServiceError>(())
            })
            .await?;
        Ok(self.inner.operation_channels.subscribe(tenant))
    }

    /// Revoked token ids as they are announced; the first call starts the `LISTEN` and returns once it is
    /// active. A receiver that lags has missed some: its owner re-checks its token.
    pub async fn revocations(&self, db: &sqlx::PgPool) -> Result<broadcast::Receiver<Uuid>> {
        let sender = self
            .inner
            .revoked
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(db).await?;
                listener.listen(REVOKED_CHANNEL).await?;
                let (sender, _) = broadcast::channel(self.inner.capacity);
                tokio::spawn(relay_revocations(listener, sender.clone()));
                Ok::<_, ServiceError>(sender)
            })
            .await?;
        Ok(sender.subscribe())
    }
}

/// Broadcasts each announced revocation.
async fn relay_revocations(mut listener: PgListener, sender: broadcast::Sender<Uuid>) {
    loop {
        match listener.recv().await {
            Ok(n) => {
                if let Ok(jti) = Uuid::parse_str(n.payload()) {
                    let _ = sender.send(jti);
                }
            }
            Err(err) => {
                // Revocations announced meanwhile are missed; the periodic re-check still catches them.
                tracing::warn!(error = %err, "token revocation listener failed; reconnecting");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Loads each notified operation once and broadcasts it.
async fn relay_operations(mut listener: PgListener, db: sqlx::PgPool, hub: Hub) {
    let channels = &hub.inner.operation_channels;
    loop {
        let notification = match listener.recv().await {
            Ok(n) => n,
            Err(err) => {
                // A long poll that misses a change answers at its timeout with the state as it is then.
                tracing::warn!(error = %err, "operation event listener failed; reconnecting");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some((Ok(tenant), Ok(id))) = notification
            .payload()
            .split_once(':')
            .map(|(t, i)| (Uuid::parse_str(t), Uuid::parse_str(i)))
        else {
            continue;
        };
        if !channels.wanted(tenant) {
            continue;
        }
        match super::stored::load_operation(&db, tenant, id).await {
            Ok(operation) => channels.send(
                tenant,
                OperationEvent {
                    tenant_id: tenant,
                    operation,
                },
            ),
            Err(err) => {
                tracing::warn!(error = %err, operation.id = %id, "loading a changed operation failed")
            }
        }
    }
}

/// Loads each notified control plane once, if its tenant has subscribers, and sends it to them.
async fn relay(mut listener: PgListener, db: sqlx::PgPool, hub: Hub) {
    let channels = &hub.inner.control_plane_channels;
    loop {
        let notification = match listener.recv().await {
            Ok(n) => n,
            Err(err) => {
                // PgListener reconnects on the next recv; changes made meanwhile are not replayed.
                tracing::warn!(error = %err, "control-plane event listener failed; reconnecting");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some((tenant, id, kind)) = parse_payload(notification.payload()) else {
            continue;
        };
        if !channels.wanted(tenant) {
            continue;
        }
        let loaded = match kind {
            EventKind::Changed => super::stored::load_control_plane(&db, tenant, id).await,
            EventKind::Deleted => super::stored::load_gone_control_plane(&db, tenant, id).await,
        };
        match loaded {
            Ok(Some(control_plane)) => channels.send(
                tenant,
                Event {
                    kind,
                    tenant_id: tenant,
                    control_plane,
                },
            ),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(error = %err, control_plane.id = %id, "loading a changed control plane failed")
            }
        }
    }
}

/// The tenant, control plane and kind of a `control_plane_status` payload (`<tenant>:<id>[:deleted]`).
fn parse_payload(payload: &str) -> Option<(Uuid, Uuid, EventKind)> {
    let mut parts = payload.split(':');
    let tenant = Uuid::parse_str(parts.next()?).ok()?;
    let id = Uuid::parse_str(parts.next()?).ok()?;
    let kind = match parts.next() {
        None => EventKind::Changed,
        Some("deleted") => EventKind::Deleted,
        Some(_) => return None,
    };
    parts.next().is_none().then_some((tenant, id, kind))
}

/// Subscribes `who` to the events of tenant `slug` (tenant-viewer or higher; another tenant is not
/// found). Returns the tenant's id and the receiver of its events.
pub async fn subscribe(
    ctx: &Ctx,
    hub: &Hub,
    who: &Principal,
    slug: &str,
) -> Result<(Uuid, broadcast::Receiver<Arc<Event>>)> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    let receiver = hub.control_planes(&ctx.db, tenant.id).await?;
    Ok((tenant.id, receiver))
}

#[cfg(test)]
mod payload_tests {
    use super::{EventKind, parse_payload};

    #[test]
    fn a_payload_names_tenant_control_plane_and_kind() {
        let (t, c) = (
            "6f1f8c3e-2c1a-4a57-9a57-3c2d1e0f4b5a",
            "0b7e5a9e-9d2f-4d0b-8a3c-1e2f3a4b5c6d",
        );
        let ids = (t.parse().unwrap(), c.parse().unwrap());
        assert_eq!(
            parse_payload(&format!("{t}:{c}")),
            Some((ids.0, ids.1, EventKind::Changed))
        );
        assert_eq!(
            parse_payload(&format!("{t}:{c}:deleted")),
            Some((ids.0, ids.1, EventKind::Deleted))
        );
        assert_eq!(parse_payload(&format!("{t}:{c}:other")), None);
        assert_eq!(parse_payload(&format!("{t}:{c}:deleted:x")), None);
        assert_eq!(parse_payload(t), None);
    }
}

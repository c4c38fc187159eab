//! Subscription root: live control-plane and operation events from PostgreSQL `LISTEN/NOTIFY` (see `service::events`).

use std::sync::Arc;

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt, stream};
use tokio::sync::broadcast::error::RecvError;

use super::{
    SlowConsumer, caller, gql_error,
    types::{ControlPlane, ControlPlaneEvent, ControlPlaneEventKind, OperationEvent, OperationEventKind},
};
use tenantplane_service::{self as service, events::Hub};

/// Subscriptions.
#[derive(Debug, Default)]
pub struct Subscription;

#[Subscription]
impl Subscription {
    /// Status and condition changes of a tenant's control planes, as committed, and each one's end
    /// (`kind: DELETED`, once its data is gone) (tenant-viewer). Ends when the token expires; a client that falls too far behind is disconnected (close code 4008).
    async fn control_plane_events(
        &self,
        ctx: &Context<'_>,
        tenant: String,
    ) -> Result<impl Stream<Item = ControlPlaneEvent> + use<>> {
        let (c, who) = caller(ctx)?;
        let hub = ctx.data::<Hub>()?;
        let (tenant_id, receiver) = service::events::subscribe(c, hub, who, &tenant)
            .await
            .map_err(gql_error)?;
        let slow = ctx.data_opt::<SlowConsumer>().cloned();
        let events = wanted_until(receiver, slow, who.expires_at, move |event| {
            event.tenant_id == tenant_id
        });
        Ok(
            events.map(move |event: Arc<service::events::Event>| ControlPlaneEvent {
                kind: match event.kind {
                    service::events::EventKind::Changed => ControlPlaneEventKind::Changed,
                    service::events::EventKind::Deleted => ControlPlaneEventKind::Deleted,
                },
                control_plane: ControlPlane {
                    slug: tenant.clone(),
                    tenant_id: event.tenant_id,
                    cp: event.control_plane.clone(),
                },
            }),
        )
    }

    /// Changes of a tenant's operations as they are committed (tenant-viewer): each new stage and the
    /// end. `operation` or `controlPlane` (ids) narrow it to one operation or one control plane's. Ends
    /// when the token expires; a client that falls too far behind is disconnected (close code 4008).
    async fn operation_events(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        operation: Option<async_graphql::ID>,
        control_plane: Option<async_graphql::ID>,
    ) -> Result<impl Stream<Item = OperationEvent> + use<>> {
        let (c, who) = caller(ctx)?;
        let hub = ctx.data::<Hub>()?;
        let (tenant_id, receiver) = service::operations::subscribe(c, hub, who, &tenant)
            .await
            .map_err(gql_error)?;
        let wanted = move |event: &service::events::OperationEvent| {
            event.tenant_id == tenant_id
                && operation
                    .as_ref()
                    .is_none_or(|id| event.operation.id.to_string() == id.as_str())
                && control_plane
                    .as_ref()
                    .is_none_or(|id| event.operation.control_plane_id.to_string() == id.as_str())
        };
        let slow = ctx.data_opt::<SlowConsumer>().cloned();
        Ok(wanted_until(receiver, slow, who.expires_at, wanted).map(
            |event: Arc<service::events::OperationEvent>| OperationEvent {
                kind: OperationEventKind::of(&event.operation),
                operation: event.operation.clone().into(),
            },
        ))
    }
}

/// The events of `receiver` that `wanted` keeps, until `expires`; a receiver that lags ends the stream
/// and tells `slow` (the connection closes with 4008).
fn wanted_until<T: Send + Sync + 'static>(
    receiver: tokio::sync::broadcast::Receiver<Arc<T>>,
    slow: Option<SlowConsumer>,
    expires: chrono::DateTime<chrono::Utc>,
    wanted: impl Fn(&T) -> bool + Clone + Send + 'static,
) -> impl Stream<Item = Arc<T>> {
    let events = stream::unfold(receiver, move |mut receiver| {
        let slow = slow.clone();
        let wanted = wanted.clone();
        async move {
            loop {
                match receiver.recv().await {
                    Ok(event) if wanted(&event) => return Some((event, receiver)),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "dropping a subscriber that fell behind");
                        if let Some(slow) = slow {
                            slow.0.notify_one();
                        }
                        return None;
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        }
    });
    let until = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
    events.take_until(tokio::time::sleep(until))
}

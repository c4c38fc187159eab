//! Subscription root: live control-plane events from PostgreSQL `LISTEN/NOTIFY` (see `service::events`).

use std::sync::Arc;

use async_graphql::{Context, Result, Subscription};
use futures_util::{Stream, StreamExt, stream};
use tokio::sync::broadcast::error::RecvError;

use super::{
    SlowConsumer, caller, gql_error,
    types::{ControlPlane, ControlPlaneEvent},
};
use crate::service::{self, events::Hub};

/// Subscriptions.
#[derive(Debug, Default)]
pub struct Subscription;

#[Subscription]
impl Subscription {
    /// Status and condition changes of a tenant's control planes, as committed (tenant-viewer). Ends when
    /// the token expires; a client that falls too far behind is disconnected (close code 4008).
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
        let expires = who.expires_at;
        let events = stream::unfold(receiver, move |mut receiver| {
            let slow = slow.clone();
            async move {
                loop {
                    match receiver.recv().await {
                        Ok(event) if event.tenant_id == tenant_id => return Some((event, receiver)),
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
        Ok(events
            .take_until(tokio::time::sleep(until))
            .map(move |event: Arc<service::events::Event>| ControlPlaneEvent {
                control_plane: ControlPlane {
                    slug: tenant.clone(),
                    tenant_id: event.tenant_id,
                    cp: event.control_plane.clone(),
                },
            }))
    }
}

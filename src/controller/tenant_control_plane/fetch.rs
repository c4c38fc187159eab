//! Reads of the TenantControlPlane reconciler (the shared reads are in [`crate::controller::fetch`]).

use std::sync::Arc;

use crate::{
    controller::{Context, Error, build::ResolvedDataStore, fetch},
    datastore::AnyDriver,
};

pub async fn ready_datastore(
    ctx: &Context,
    name: &str,
) -> Result<(ResolvedDataStore, Arc<AnyDriver>), Error> {
    let Some(ds) = fetch::datastore(ctx, name).await? else {
        return Err(Error::Invalid {
            reason: "DataStoreNotFound",
            message: format!("DataStore {name} not found"),
        });
    };
    let ready = ds.status.as_ref().is_some_and(|s| s.ready);
    if !ready {
        let why = ds
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.message.clone())
            .unwrap_or_else(|| "not checked yet".into());
        return Err(Error::NotReady {
            reason: "DataStoreNotReady",
            message: format!("DataStore {name} is not ready: {why}"),
        });
    }
    fetch::driver(ctx, &ds).await
}

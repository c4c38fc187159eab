//! The controller's own records: ConfigMaps in its state namespace (`--state-namespace`), which only
//! the controller writes (the migration journal, the served record).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::{Context, Error};

/// The ConfigMaps of the state namespace.
pub fn api(ctx: &Context) -> Api<ConfigMap> {
    Api::namespaced(ctx.client.clone(), &ctx.settings.state_namespace)
}

/// Deletes record `name`; one already gone is no error.
pub async fn delete(ctx: &Context, name: &str) -> Result<(), Error> {
    match api(ctx).delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A write's `error`, made clear when the state namespace is missing (a setup mistake, not an
/// outage); `consequence` says what waits for it.
pub fn missing_namespace(ctx: &Context, error: kube::Error, consequence: &str) -> Error {
    match &error {
        kube::Error::Api(status) if status.code == 404 => Error::NotReady {
            reason: "StateNamespaceMissing",
            message: format!(
                "the controller's state namespace {} does not exist (--state-namespace); {consequence}",
                ctx.settings.state_namespace
            ),
        },
        _ => error.into(),
    }
}

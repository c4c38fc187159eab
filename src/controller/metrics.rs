//! Prometheus metrics of the controllers: reconciles and reconcile errors by controller and reason.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// Labels of the reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `datastore` or `tenantcontrolplane`.
    pub controller: String,
}

/// Labels of the reconcile error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `datastore` or `tenantcontrolplane`.
    pub controller: String,
    /// The error's stable CamelCase reason (also the Event reason).
    pub reason: String,
}

/// The controller metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tenantplane_controller");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register("reconciles", "Reconciles by controller", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller and reason",
            reconcile_errors.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
        }
    }
}

impl Metrics {
    /// Counts one reconcile.
    pub fn reconciled(&self, controller: &str) {
        self.reconciles
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
    }

    /// Counts one failed reconcile.
    pub fn failed(&self, controller: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// How many reconciles of `controller` ran so far.
    pub fn reconciles(&self, controller: &str) -> u64 {
        self.reconciles
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .get()
    }

    /// How many reconciles of `controller` failed with `reason` so far.
    pub fn errors(&self, controller: &str, reason: &str) -> u64 {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .get()
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_controller_and_reason() {
        let metrics = Metrics::default();
        metrics.failed("datastore", "DataStoreUnreachable");
        metrics.failed("datastore", "DataStoreUnreachable");
        metrics.reconciled("datastore");
        assert_eq!(metrics.errors("datastore", "DataStoreUnreachable"), 2);
        assert_eq!(metrics.errors("tenantcontrolplane", "DataStoreUnreachable"), 0);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"tenantplane_controller_reconcile_errors_total{controller="datastore",reason="DataStoreUnreachable"} 2"#
            ),
            "{text}"
        );
    }
}

//! Prometheus metrics of the controllers: reconciles and reconcile errors by controller and reason.

use std::{collections::HashMap, sync::Mutex};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// Labels of the per-phase metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// `datastore`, `service`, `certificates`, `deployment`, `status`, or `total`.
    pub phase: String,
}

/// Labels of the per-phase error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseErrorLabels {
    /// The phase that failed.
    pub phase: String,
    /// The error's reason.
    pub reason: String,
}

/// Labels of the TenantControlPlanes-by-status gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// `status.kubernetesResources.version.status`.
    pub status: String,
}

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
    phase_duration: Family<PhaseLabels, Histogram>,
    phase_errors: Family<PhaseErrorLabels, Counter>,
    by_status: Family<StatusLabels, Gauge>,
    in_flight: Family<ControllerLabels, Gauge>,
    /// Last known status of each TenantControlPlane (`ns/name`), so the gauge is updated
    /// incrementally instead of re-listing every object.
    statuses: Mutex<HashMap<String, String>>,
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
        let phase_duration = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let phase_errors = Family::<PhaseErrorLabels, Counter>::default();
        let by_status = Family::<StatusLabels, Gauge>::default();
        let in_flight = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "tcp_phase_duration_seconds",
            "Duration of each TenantControlPlane reconcile phase (total = the whole reconcile)",
            phase_duration.clone(),
        );
        registry.register(
            "tcp_phase_errors",
            "Failed TenantControlPlane reconcile phases by phase and reason",
            phase_errors.clone(),
        );
        registry.register(
            "tenant_control_planes",
            "TenantControlPlanes by status.kubernetesResources.version.status",
            by_status.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now, by controller",
            in_flight.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
            phase_duration,
            phase_errors,
            by_status,
            in_flight,
            statuses: Mutex::new(HashMap::new()),
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

    /// Records how long `phase` took.
    pub fn phase(&self, phase: &str, seconds: f64) {
        self.phase_duration
            .get_or_create(&PhaseLabels { phase: phase.into() })
            .observe(seconds);
    }

    /// Counts a failed phase.
    pub fn phase_failed(&self, phase: &str, reason: &str) {
        self.phase_errors
            .get_or_create(&PhaseErrorLabels {
                phase: phase.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// How many times `phase` failed with `reason`.
    pub fn phase_errors(&self, phase: &str, reason: &str) -> u64 {
        self.phase_errors
            .get_or_create(&PhaseErrorLabels {
                phase: phase.into(),
                reason: reason.into(),
            })
            .get()
    }

    /// Marks a reconcile of `controller` as started (`+1`) or finished (`-1`).
    pub fn in_flight(&self, controller: &str, delta: i64) {
        self.in_flight
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc_by(delta);
    }

    /// Records the status of TenantControlPlane `key` (`None`: deleted), moving it between gauges.
    pub fn set_status(&self, key: &str, status: Option<&str>) {
        let mut statuses = self.statuses.lock().unwrap_or_else(|e| e.into_inner());
        let old = match status {
            Some(s) => statuses.insert(key.to_string(), s.to_string()),
            None => statuses.remove(key),
        };
        if old.as_deref() == status {
            return;
        }
        if let Some(old) = old {
            self.by_status.get_or_create(&StatusLabels { status: old }).dec();
        }
        if let Some(new) = status {
            self.by_status
                .get_or_create(&StatusLabels { status: new.into() })
                .inc();
        }
    }

    /// How many TenantControlPlanes have `status`.
    pub fn with_status(&self, status: &str) -> i64 {
        self.by_status
            .get_or_create(&StatusLabels {
                status: status.into(),
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

    #[test]
    fn status_gauge_moves_without_relisting() {
        let metrics = Metrics::default();
        metrics.set_status("ns/a", Some("Provisioning"));
        metrics.set_status("ns/b", Some("Provisioning"));
        metrics.set_status("ns/a", Some("Ready"));
        metrics.set_status("ns/a", Some("Ready"));
        assert_eq!(metrics.with_status("Provisioning"), 1);
        assert_eq!(metrics.with_status("Ready"), 1);
        metrics.set_status("ns/b", None);
        assert_eq!(metrics.with_status("Provisioning"), 0);
        metrics.phase("deployment", 0.01);
        assert!(
            metrics
                .encode()
                .contains("tenantplane_controller_tcp_phase_duration_seconds_count{phase=\"deployment\"} 1")
        );
    }
}

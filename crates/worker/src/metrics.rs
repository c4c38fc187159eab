//! Prometheus metrics of the worker (registered on any `prometheus_client` registry).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels of a refused status write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// `unknown` (no such live row), `namespace`, `name` or `uid`: what did not match the row's TCP.
    pub reason: String,
}

/// Labels of purged rows.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    /// `idempotency_keys`, `outbox` or `audit_log`.
    pub table: String,
}

/// The worker's metrics; clones share the same values.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    /// Unprocessed outbox rows, sampled after every pass.
    pub outbox_depth: Gauge,
    /// Seconds per server-side apply of a TenantControlPlane (namespace included).
    pub apply_latency: Histogram,
    /// Failed outbox attempts (retried or given up).
    pub failures: Counter,
    /// Outbox rows applied and committed.
    pub applies: Counter,
    /// Re-applies made by the drift resync.
    pub resync_applies: Counter,
    /// Status changes written back to PostgreSQL.
    pub status_updates: Counter,
    /// Statuses ignored because the TCP is not the one the worker made for the row its labels name.
    pub status_rejected: Family<RejectLabels, Counter>,
    /// Rows deleted past their retention, by table.
    pub purged: Family<TableLabels, Counter>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self {
            outbox_depth: Gauge::default(),
            apply_latency: Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            failures: Counter::default(),
            applies: Counter::default(),
            resync_applies: Counter::default(),
            status_updates: Counter::default(),
            status_rejected: Family::default(),
            purged: Family::default(),
        }
    }
}

impl WorkerMetrics {
    /// Registers every metric under `worker_*` (the registry adds its own prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "worker_outbox_depth",
            "Unprocessed outbox rows",
            self.outbox_depth.clone(),
        );
        registry.register(
            "worker_apply_duration_seconds",
            "Server-side apply latency of a TenantControlPlane",
            self.apply_latency.clone(),
        );
        registry.register("worker_failures", "Failed outbox attempts", self.failures.clone());
        registry.register("worker_applies", "Outbox rows applied", self.applies.clone());
        registry.register(
            "worker_resync_applies",
            "Re-applies by the drift resync",
            self.resync_applies.clone(),
        );
        registry.register(
            "worker_status_updates",
            "Status changes written back to PostgreSQL",
            self.status_updates.clone(),
        );
        registry.register(
            "worker_status_rejected",
            "Statuses ignored: the TCP is not the one the worker made for the row its labels name",
            self.status_rejected.clone(),
        );
        registry.register(
            "worker_retention_purged",
            "Rows deleted past their retention, by table",
            self.purged.clone(),
        );
    }

    /// Counts `rows` purged from `table`.
    pub fn purged(&self, table: &str, rows: u64) {
        self.purged
            .get_or_create(&TableLabels {
                table: table.to_string(),
            })
            .inc_by(rows);
    }

    /// Counts one refused status write.
    pub fn reject(&self, reason: &str) {
        self.status_rejected
            .get_or_create(&RejectLabels {
                reason: reason.to_string(),
            })
            .inc();
    }
}

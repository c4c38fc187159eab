//! The TenantControlPlane fixture builder.

use crate::k8s::crd::TenantControlPlane;
use serde_json::{Value, json};

/// The Kubernetes version fixtures run unless [`TcpFixture::version`] says otherwise.
pub const DEFAULT_VERSION: &str = "v1.34.0";

/// A TenantControlPlane under construction: a ClusterIP control plane of [`DEFAULT_VERSION`] with an
/// empty kubelet section and nothing else, until the builder methods add fields. Kept as JSON, so a
/// field is either set exactly as given or absent (`dataStoreOverrides: []` differs from no overrides).
#[derive(Debug, Clone, PartialEq)]
pub struct TcpFixture {
    value: Value,
}

/// TenantControlPlane `namespace/name` (see [`TcpFixture`]).
pub fn tcp(namespace: &str, name: &str) -> TcpFixture {
    TcpFixture {
        value: json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "controlPlane": {"service": {"serviceType": "ClusterIP"}},
                "kubernetes": {"version": DEFAULT_VERSION, "kubelet": {}},
            },
        }),
    }
}

impl TcpFixture {
    /// Sets `spec.<field>` to `value` (any field without a method of its own).
    pub fn spec(mut self, field: &str, value: Value) -> Self {
        self.value["spec"][field] = value;
        self
    }

    /// Sets `metadata.<field>` to `value`.
    pub fn metadata(mut self, field: &str, value: Value) -> Self {
        self.value["metadata"][field] = value;
        self
    }

    /// `spec.dataStore`: the primary DataStore.
    pub fn datastore(self, name: &str) -> Self {
        self.spec("dataStore", json!(name))
    }

    /// `spec.dataStoreOverrides`, exactly as given (e.g. `json!([])`).
    pub fn overrides(self, overrides: Value) -> Self {
        self.spec("dataStoreOverrides", overrides)
    }

    /// `spec.dataStoreOverrides` offloading `/events` to each of `datastores`, in order (an empty list
    /// sets `[]`).
    pub fn events_on(self, datastores: &[&str]) -> Self {
        let overrides: Vec<Value> = datastores
            .iter()
            .map(|ds| json!({"resource": "/events", "dataStore": ds}))
            .collect();
        self.overrides(Value::Array(overrides))
    }

    /// `spec.dataStoreSchema`.
    pub fn schema(self, schema: &str) -> Self {
        self.spec("dataStoreSchema", json!(schema))
    }

    /// `spec.dataStoreUsername`.
    pub fn username(self, user: &str) -> Self {
        self.spec("dataStoreUsername", json!(user))
    }

    /// `spec.kubernetes.version`.
    pub fn version(mut self, version: &str) -> Self {
        self.value["spec"]["kubernetes"]["version"] = json!(version);
        self
    }

    /// `metadata.uid`.
    pub fn uid(self, uid: &str) -> Self {
        self.metadata("uid", json!(uid))
    }

    /// `metadata.generation`.
    pub fn generation(self, generation: i64) -> Self {
        self.metadata("generation", json!(generation))
    }

    /// `metadata.creationTimestamp` (RFC 3339).
    pub fn created(self, timestamp: &str) -> Self {
        self.metadata("creationTimestamp", json!(timestamp))
    }

    /// Adds the label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["labels"][key] = json!(value);
        self
    }

    /// Adds the annotation `key=value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["annotations"][key] = json!(value);
        self
    }

    /// `status`, exactly as given.
    pub fn status(mut self, status: Value) -> Self {
        self.value["status"] = status;
        self
    }

    /// The object as JSON (what unit tests inside `src/` deserialize into their own types).
    pub fn json(&self) -> Value {
        self.value.clone()
    }

    /// The typed object; panics if the builder was given fields the type refuses.
    pub fn build(self) -> TenantControlPlane {
        match serde_json::from_value(self.value) {
            Ok(tcp) => tcp,
            Err(err) => panic!("the TenantControlPlane fixture does not deserialize: {err}"),
        }
    }
}

impl From<TcpFixture> for TenantControlPlane {
    fn from(fixture: TcpFixture) -> Self {
        fixture.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_a_cluster_ip_control_plane_without_datastore_fields() {
        assert_eq!(
            tcp("ns", "a").json(),
            json!({
                "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
                "metadata": {"name": "a", "namespace": "ns"},
                "spec": {"controlPlane": {"service": {"serviceType": "ClusterIP"}},
                         "kubernetes": {"version": "v1.34.0", "kubelet": {}}},
            })
        );
    }

    #[test]
    fn builder_fields_land_where_the_copies_had_them() {
        let t = tcp("ns", "a")
            .datastore("primary")
            .events_on(&["b"])
            .schema("s")
            .username("u")
            .version("v1.33.2")
            .uid("u-1")
            .generation(2)
            .created("2026-01-01T00:00:00Z")
            .label("k", "v")
            .status(json!({"phase": "x"}))
            .json();
        assert_eq!(t["spec"]["dataStore"], "primary");
        assert_eq!(
            t["spec"]["dataStoreOverrides"],
            json!([{"resource": "/events", "dataStore": "b"}])
        );
        assert_eq!(t["spec"]["dataStoreSchema"], "s");
        assert_eq!(t["spec"]["dataStoreUsername"], "u");
        assert_eq!(
            t["spec"]["kubernetes"],
            json!({"version": "v1.33.2", "kubelet": {}})
        );
        assert_eq!(t["metadata"]["uid"], "u-1");
        assert_eq!(t["metadata"]["generation"], 2);
        assert_eq!(t["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(t["metadata"]["labels"], json!({"k": "v"}));
        assert_eq!(t["status"], json!({"phase": "x"}));
        assert_eq!(
            tcp("ns", "a").events_on(&[]).json()["spec"]["dataStoreOverrides"],
            json!([])
        );
    }

    #[test]
    fn it_builds_the_typed_object() {
        let t = tcp("ns", "a").datastore("ds").events_on(&["b"]).build();
        assert_eq!(t.metadata.name.as_deref(), Some("a"));
        assert_eq!(t.spec.data_store.as_deref(), Some("ds"));
        assert_eq!(t.spec.data_store_overrides.map(|o| o.len()), Some(1));
    }
}

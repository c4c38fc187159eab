//! What the engine reads: the request, the snapshot of pools and DataStores, and the configuration.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::domain::SizeClass;
use crate::k8s::crd::Driver;

/// `/events`: core-group Events, the first resource to offload.
pub const EVENTS: &str = "/events";
/// `coordination.k8s.io/leases`: node heartbeats and leader election, offloaded for `Large` tenants.
pub const LEASES: &str = "coordination.k8s.io/leases";

/// Where a tenant's events and leases are stored.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffloadMode {
    /// Everything stays on the primary DataStore.
    #[default]
    None,
    /// `Medium` and up: `/events` (and leases for `Large`) go to the configured override pool, if there is one.
    Auto,
    /// `/events` (and leases for `Large`) go to the named pool, whatever the size class.
    Pool(String),
}

/// One request to place a tenant control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRequest {
    /// The tenant that owns the control plane.
    pub tenant_id: Uuid,
    /// The control plane's id: the key of `Rendezvous` hashing.
    pub control_plane_id: String,
    /// Expected size, which decides offloading under `Auto` and the byte estimate.
    pub size_class: SizeClass,
    /// Drivers the primary may use; empty means any.
    #[serde(default)]
    pub allowed_drivers: Vec<Driver>,
    /// Labels the primary must carry, each with exactly this value.
    #[serde(default)]
    pub label_selector: BTreeMap<String, String>,
    /// Restricts the primary to one pool; `None` considers every pool, in snapshot order.
    #[serde(default)]
    pub pool: Option<String>,
    /// Where events and leases go.
    #[serde(default)]
    pub offload: OffloadMode,
}

impl PlacementRequest {
    /// A request with no driver, label or pool restriction and no offload.
    pub fn new(tenant_id: Uuid, control_plane_id: impl Into<String>, size_class: SizeClass) -> Self {
        Self {
            tenant_id,
            control_plane_id: control_plane_id.into(),
            size_class,
            allowed_drivers: Vec::new(),
            label_selector: BTreeMap::new(),
            pool: None,
            offload: OffloadMode::None,
        }
    }
}

/// How a pool picks among the DataStores that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Least loaded after placement (load / capacity), ties by name.
    Spread,
    /// Most loaded after placement that still fits, ties by name.
    Binpack,
    /// Highest random weight of (control plane, DataStore), scaled by capacity: sticky placement.
    Rendezvous,
    /// One tenant per DataStore: only empty DataStores qualify, first by name.
    Dedicated,
}

/// The state of every pool at one instant, as read from the store.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// The pools, in priority order: without a pool in the request, the first pool that fits wins.
    pub pools: Vec<PoolSnapshot>,
}

/// One pool and its DataStores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSnapshot {
    /// The pool's name.
    pub name: String,
    /// How the pool picks among its DataStores.
    pub policy: Policy,
    /// The DataStores of the pool, in any order.
    pub datastores: Vec<DataStoreSnapshot>,
}

/// One DataStore and its load.
///
/// The fields every decision reads come first and `repr(C)` keeps that order, so they share a cache line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[repr(C)]
pub struct DataStoreSnapshot {
    /// Its driver.
    pub driver: Driver,
    /// Whether it is validated and reachable.
    pub ready: bool,
    /// Whether new tenants are kept off it.
    pub cordoned: bool,
    /// How many tenants it may hold (NATS and `Dedicated` pools: at most 1 whatever this says).
    pub capacity_tenants: u32,
    /// How many tenants use it now, as primary or as override.
    pub load_tenants: u32,
    /// How many bytes it may hold, if limited.
    pub capacity_bytes: Option<u64>,
    /// Bytes estimated in use now.
    pub load_bytes: u64,
    /// The DataStore's name (cluster-scoped, unique).
    pub name: String,
    /// Identity of its etcd CA (e.g. a fingerprint); a missing id never matches another.
    pub ca_id: Option<String>,
    /// Its labels, matched by the request's label selector.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The pool it belongs to; the enclosing [`PoolSnapshot`] is what the engine goes by.
    pub pool: String,
}

/// Where a DataStore sits in a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Slot {
    /// Index into [`Snapshot::pools`].
    pub pool: usize,
    /// Index into that pool's [`PoolSnapshot::datastores`].
    pub index: usize,
}

impl Snapshot {
    /// The index of the pool with this name.
    pub fn pool_index(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| p.name == name)
    }

    /// The slot of the DataStore with this name.
    pub fn find(&self, name: &str) -> Option<Slot> {
        self.pools.iter().enumerate().find_map(|(pool, p)| {
            let index = p.datastores.iter().position(|d| d.name == name)?;
            Some(Slot { pool, index })
        })
    }

    /// The DataStore in a slot.
    pub fn data_store(&self, slot: Slot) -> Option<&DataStoreSnapshot> {
        self.pools.get(slot.pool)?.datastores.get(slot.index)
    }

    /// The DataStore in a slot, to change.
    pub fn data_store_mut(&mut self, slot: Slot) -> Option<&mut DataStoreSnapshot> {
        self.pools.get_mut(slot.pool)?.datastores.get_mut(slot.index)
    }

    /// Adds one tenant of this size to a DataStore's load, as the store does when it commits a placement.
    pub fn add_load(&mut self, slot: Slot, size: SizeClass, config: &PlacementConfig) {
        let bytes = config.bytes_for(size);
        if let Some(ds) = self.data_store_mut(slot) {
            ds.load_tenants = ds.load_tenants.saturating_add(1);
            ds.load_bytes = ds.load_bytes.saturating_add(bytes);
        }
    }

    /// Takes one tenant of this size off a DataStore's load.
    pub fn remove_load(&mut self, slot: Slot, size: SizeClass, config: &PlacementConfig) {
        let bytes = config.bytes_for(size);
        if let Some(ds) = self.data_store_mut(slot) {
            ds.load_tenants = ds.load_tenants.saturating_sub(1);
            ds.load_bytes = ds.load_bytes.saturating_sub(bytes);
        }
    }
}

/// Bytes a tenant of each size class is expected to use on each DataStore it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BytesPerSize {
    /// Estimate for `Small`.
    pub small: u64,
    /// Estimate for `Medium`.
    pub medium: u64,
    /// Estimate for `Large`.
    pub large: u64,
}

/// Operator settings of the engine.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlacementConfig {
    /// The pool that `Auto` offloads to; `None` turns `Auto` into no offload.
    #[serde(default)]
    pub auto_override_pool: Option<String>,
    /// Resources that may be offloaded at all.
    #[serde(default)]
    pub offloadable: OffloadAllowList,
    /// Byte estimates, checked only against DataStores that set `capacity_bytes`; `None` counts 0 bytes.
    #[serde(default)]
    pub bytes_per_tenant: Option<BytesPerSize>,
}

impl PlacementConfig {
    /// The byte estimate of one tenant of this size (0 without estimates).
    pub fn bytes_for(&self, size: SizeClass) -> u64 {
        match (self.bytes_per_tenant, size) {
            (None, _) => 0,
            (Some(b), SizeClass::Small) => b.small,
            (Some(b), SizeClass::Medium) => b.medium,
            (Some(b), SizeClass::Large) => b.large,
        }
    }
}

/// API groups whose resources kube-apiserver stores itself, so `--etcd-servers-overrides` applies to them.
///
/// Custom resources are served by the apiextensions server and ignore overrides, and a CRD's group may end in
/// `.k8s.io` (Gateway API does), so the list is explicit rather than a suffix rule. `apiextensions.k8s.io` and
/// `apiregistration.k8s.io` are left out on purpose.
pub const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apps",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Why a resource cannot be on the offload allow-list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowListError {
    /// Not of the form `<group>/<resource>`.
    #[error("{0:?} is not <group>/<resource> (core group empty, e.g. /events)")]
    Malformed(String),
    /// Its group is not one kube-apiserver stores itself (a CRD, or an aggregated API).
    #[error("{0:?} is not a built-in resource: custom resources cannot be offloaded")]
    NotBuiltIn(String),
    /// Listed twice.
    #[error("{0:?} is listed twice")]
    Duplicate(String),
}

/// The resources that may be offloaded: built-in `<group>/<resource>` names, each once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct OffloadAllowList(Vec<String>);

impl OffloadAllowList {
    /// Whether a resource may be offloaded.
    pub fn contains(&self, resource: &str) -> bool {
        self.0.iter().any(|r| r == resource)
    }

    /// The resources, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl Default for OffloadAllowList {
    fn default() -> Self {
        Self(vec![EVENTS.to_owned(), LEASES.to_owned()])
    }
}

impl TryFrom<Vec<String>> for OffloadAllowList {
    type Error = AllowListError;

    fn try_from(resources: Vec<String>) -> Result<Self, Self::Error> {
        for (i, r) in resources.iter().enumerate() {
            let Some((group, resource)) = r.split_once('/') else {
                return Err(AllowListError::Malformed(r.clone()));
            };
            let name_ok = |s: &str| {
                s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            };
            if resource.is_empty() || !name_ok(resource) {
                return Err(AllowListError::Malformed(r.clone()));
            }
            if !BUILTIN_GROUPS.contains(&group) {
                return Err(AllowListError::NotBuiltIn(r.clone()));
            }
            if resources[..i].contains(r) {
                return Err(AllowListError::Duplicate(r.clone()));
            }
        }
        Ok(Self(resources))
    }
}

impl From<OffloadAllowList> for Vec<String> {
    fn from(list: OffloadAllowList) -> Self {
        list.0
    }
}

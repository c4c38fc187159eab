//! What the controllers read without a request: the watch caches of the Secrets, ConfigMaps,
//! Deployments, Services and NetworkPolicies they own and of DataStores, the controller's own Secret writes until its watch delivers
//! them, DataStores' resolved credentials, and what the controller last applied of each workload.
//!
//! A cache can lag. Every reader is written so that lagging is safe: a cached *miss* of a Secret is
//! only ever followed by a create (which fails, instead of overwriting, when the Secret exists after
//! all) or by a live read; a stale hit only costs one more reconcile, which the watch event that
//! updates the cache triggers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret, Service},
    networking::v1::NetworkPolicy,
};
use kube::{
    Resource, ResourceExt as _,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use super::build::ResolvedDataStore;
use crate::datastore::AnyDriver;
use crate::k8s::crd::{DataStore, TenantControlPlane};

/// How long a reader waits for a cache's first list before it reads live instead.
const READY_WAIT: Duration = Duration::from_secs(5);

/// What a cache knows about an object.
#[derive(Debug, Clone)]
pub enum Lookup<K> {
    /// The cache has it.
    Found(Arc<K>),
    /// The cache has synced and does not have it (it may lag behind a create).
    Missing,
    /// No synced cache: read live.
    Unknown,
}

/// What the controller last applied of one TenantControlPlane's workload object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Hash of the desired object that was applied.
    pub desired: u64,
    /// `metadata.generation` (Deployment) or `metadata.resourceVersion` (Service, ConfigMap,
    /// NetworkPolicy) the apply returned.
    pub version: String,
    /// When.
    pub at: Instant,
}

/// Resolved DataStores by name, valid for one `(uid, generation)`; an epoch counter keeps a resolve
/// that raced a Secret change from being stored.
#[derive(Default)]
struct Resolved {
    epoch: u64,
    by_name: HashMap<String, (Option<String>, Option<i64>, ResolvedEntry)>,
}

/// A DataStore's resolved credentials and, once built, its driver (which keeps its connection open
/// for the next reconcile).
#[derive(Clone, Debug)]
pub struct ResolvedEntry {
    /// The resolved spec and credentials.
    pub resolved: ResolvedDataStore,
    /// The driver built from them, if one was.
    pub driver: Option<Arc<AnyDriver>>,
}

/// Objects this controller wrote, by `(namespace, name)`, as the API server answered, until the watch
/// delivers that version (or a later one, or the deletion).
struct Written<K> {
    by_key: Mutex<HashMap<(String, String), Arc<K>>>,
}

impl<K> Default for Written<K> {
    fn default() -> Self {
        Self {
            by_key: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Resource> Written<K> {
    /// Remembers a write (one without a numeric resourceVersion cannot be compared, so is not kept).
    fn insert(&self, obj: K) {
        if revision(&obj).is_none() {
            return;
        }
        let key = (obj.namespace().unwrap_or_default(), obj.name_any());
        self.by_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::new(obj));
    }

    /// The write of `namespace/name` if it is newer than `seen` (the watch's object, `None`: absent);
    /// a write the watch has caught up with is forgotten.
    fn newer(&self, namespace: &str, name: &str, seen: Option<&Arc<K>>) -> Option<Arc<K>> {
        let key = (namespace.to_string(), name.to_string());
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let mine = by_key.get(&key)?;
        if seen.is_some_and(|seen| revision(&**seen) >= revision(&**mine)) {
            by_key.remove(&key);
            return None;
        }
        Some(mine.clone())
    }

    /// Forgets the write an event delivers (or a later version, or the deletion). An `InitApply` is
    /// not in the cache until the relist completes: the next read settles it.
    fn observe(&self, event: &watcher::Event<K>) {
        let (watcher::Event::Apply(obj) | watcher::Event::Delete(obj)) = event else {
            return;
        };
        let key = (obj.namespace().unwrap_or_default(), obj.name_any());
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mine) = by_key.get(&key)
            && (matches!(event, watcher::Event::Delete(_)) || revision(obj) >= revision(&**mine))
        {
            by_key.remove(&key);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The caches; see the module documentation.
#[derive(Default)]
pub struct Caches {
    secrets: OnceLock<Store<Secret>>,
    deployments: OnceLock<Store<Deployment>>,
    services: OnceLock<Store<Service>>,
    config_maps: OnceLock<Store<ConfigMap>>,
    network_policies: OnceLock<Store<NetworkPolicy>>,
    datastores: OnceLock<Store<DataStore>>,
    written_secrets: Written<Secret>,
    /// A reconcile right after a status write must not start from the status before it.
    written_control_planes: Written<TenantControlPlane>,
    resolved: Mutex<Resolved>,
    applied: Mutex<HashMap<(&'static str, String), Applied>>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

/// A resourceVersion as a number. The API server's are etcd revisions, so a larger one is newer; a
/// version that is not a number compares as unknown.
fn revision<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

async fn lookup<K>(store: Option<&Store<K>>, key: &ObjectRef<K>) -> Lookup<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let Some(store) = store else {
        return Lookup::Unknown;
    };
    if !tokio::time::timeout(READY_WAIT, store.wait_until_ready())
        .await
        .is_ok_and(|r| r.is_ok())
    {
        return Lookup::Unknown;
    }
    match store.get(key) {
        Some(obj) => Lookup::Found(obj),
        None => Lookup::Missing,
    }
}

impl Caches {
    /// Registers the owned-Secret cache.
    pub fn set_secrets(&self, store: Store<Secret>) {
        let _ = self.secrets.set(store);
    }

    /// Registers the owned-Deployment cache.
    pub fn set_deployments(&self, store: Store<Deployment>) {
        let _ = self.deployments.set(store);
    }

    /// Registers the owned-Service cache.
    pub fn set_services(&self, store: Store<Service>) {
        let _ = self.services.set(store);
    }

    /// Registers the owned-ConfigMap cache.
    pub fn set_config_maps(&self, store: Store<ConfigMap>) {
        let _ = self.config_maps.set(store);
    }

    /// Registers the owned-NetworkPolicy cache.
    pub fn set_network_policies(&self, store: Store<NetworkPolicy>) {
        let _ = self.network_policies.set(store);
    }

    /// Registers the DataStore cache.
    pub fn set_datastores(&self, store: Store<DataStore>) {
        let _ = self.datastores.set(store);
    }

    /// An owned Secret: the newer of the cached one and this controller's last write of it.
    pub async fn secret(&self, namespace: &str, name: &str) -> Lookup<Secret> {
        let cached = lookup(
            self.secrets.get(),
            &ObjectRef::<Secret>::new(name).within(namespace),
        )
        .await;
        let seen = match &cached {
            Lookup::Found(seen) => Some(seen),
            Lookup::Missing => None,
            Lookup::Unknown => return cached,
        };
        match self.written_secrets.newer(namespace, name, seen) {
            Some(mine) => Lookup::Found(mine),
            None => cached,
        }
    }

    /// Remembers a Secret this controller just wrote (the API server's answer); only while a watch
    /// cache runs to deliver it.
    pub fn wrote_secret(&self, secret: &Secret) {
        if self.secrets.get().is_some() {
            self.written_secrets.insert(secret.clone());
        }
    }

    /// Called with every event of the owned-Secret watch, after the cache has applied it.
    pub fn observe_secret(&self, event: &watcher::Event<Secret>) {
        self.written_secrets.observe(event);
    }

    /// Remembers a TenantControlPlane as this controller's status write returned it.
    pub fn wrote_control_plane(&self, mut tcp: TenantControlPlane) {
        tcp.managed_fields_mut().clear();
        self.written_control_planes.insert(tcp);
    }

    /// The newer of `tcp` (from the watch) and this controller's last status write of it.
    pub fn newer_control_plane(&self, tcp: Arc<TenantControlPlane>) -> Arc<TenantControlPlane> {
        let (namespace, name) = (tcp.namespace().unwrap_or_default(), tcp.name_any());
        self.written_control_planes
            .newer(&namespace, &name, Some(&tcp))
            .unwrap_or(tcp)
    }

    /// Called with every event of the TenantControlPlane watch, after the cache has applied it.
    pub fn observe_control_plane(&self, event: &watcher::Event<TenantControlPlane>) {
        self.written_control_planes.observe(event);
    }

    /// An owned Deployment: metadata, replicas, selector and status (the cache drops the pod template).
    pub async fn deployment(&self, namespace: &str, name: &str) -> Lookup<Deployment> {
        lookup(
            self.deployments.get(),
            &ObjectRef::<Deployment>::new(name).within(namespace),
        )
        .await
    }

    /// An owned Service.
    pub async fn service(&self, namespace: &str, name: &str) -> Lookup<Service> {
        lookup(
            self.services.get(),
            &ObjectRef::<Service>::new(name).within(namespace),
        )
        .await
    }

    /// An owned ConfigMap.
    pub async fn config_map(&self, namespace: &str, name: &str) -> Lookup<ConfigMap> {
        lookup(
            self.config_maps.get(),
            &ObjectRef::<ConfigMap>::new(name).within(namespace),
        )
        .await
    }

    /// An owned NetworkPolicy.
    pub async fn network_policy(&self, namespace: &str, name: &str) -> Lookup<NetworkPolicy> {
        lookup(
            self.network_policies.get(),
            &ObjectRef::<NetworkPolicy>::new(name).within(namespace),
        )
        .await
    }

    /// A DataStore.
    pub async fn datastore(&self, name: &str) -> Lookup<DataStore> {
        lookup(self.datastores.get(), &ObjectRef::<DataStore>::new(name)).await
    }

    /// The resolved credentials of `ds`, if they were resolved for its current uid and generation
    /// and no Secret it references changed since. Returns the epoch to pass to [`Self::store_resolved`].
    pub fn resolved(&self, ds: &DataStore) -> (u64, Option<ResolvedEntry>) {
        let resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        let hit = resolved
            .by_name
            .get(&ds.name_any())
            .filter(|(uid, generation, _)| *uid == ds.metadata.uid && *generation == ds.metadata.generation)
            .map(|(_, _, r)| r.clone());
        (resolved.epoch, hit)
    }

    /// Stores what [`Self::resolved`] missed, unless a referenced Secret changed since `epoch`.
    pub fn store_resolved(&self, ds: &DataStore, epoch: u64, value: ResolvedEntry) {
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        if resolved.epoch == epoch {
            resolved.by_name.insert(
                ds.name_any(),
                (ds.metadata.uid.clone(), ds.metadata.generation, value),
            );
        }
    }

    /// Forgets the resolved credentials of DataStore `name` (a Secret it references changed).
    pub fn forget_resolved(&self, name: &str) {
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        resolved.epoch += 1;
        resolved.by_name.remove(name);
    }

    /// What was last applied of `kind` for the TenantControlPlane `key`.
    pub fn applied(&self, kind: &'static str, key: &str) -> Option<Applied> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(kind, key.to_string()))
            .cloned()
    }

    /// Records an apply of `kind` for the TenantControlPlane `key` (or forgets it with `None`).
    pub fn record_applied(&self, kind: &'static str, key: &str, applied: Option<Applied>) {
        let mut map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        match applied {
            Some(a) => {
                map.insert((kind, key.to_string()), a);
            }
            None => {
                map.remove(&(kind, key.to_string()));
            }
        }
    }

    /// Forgets everything recorded for the TenantControlPlane `key` (it is being deleted).
    pub fn forget_control_plane(&self, key: &str) {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, k), _| k != key);
    }
}

/// A stable hash of a desired object (its JSON form).
pub fn desired_hash<T: serde::Serialize>(obj: &T) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(obj).unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;

    use super::*;

    fn secret(version: &str, value: &str) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": version},
            "stringData": {"k": value},
        }))
        .unwrap()
    }

    fn value(found: Lookup<Secret>) -> Option<String> {
        match found {
            Lookup::Found(s) => Some(s.string_data.as_ref()?["k"].clone()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn own_writes_win_until_the_watch_delivers_them_or_a_deletion() {
        let caches = Caches::default();
        assert!(matches!(caches.secret("ns", "s").await, Lookup::Unknown));
        let (store, mut writer) = reflector::store::<Secret>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(secret("5", "old")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        caches.set_secrets(store);
        assert_eq!(value(caches.secret("ns", "s").await).as_deref(), Some("old"));

        // The controller writes version 7; the watch has not delivered it.
        caches.wrote_secret(&secret("7", "mine"));
        assert_eq!(value(caches.secret("ns", "s").await).as_deref(), Some("mine"));
        assert_eq!(caches.written_secrets.len(), 1);
        // An older event does not end it; the event of version 7 does.
        let older = watcher::Event::Apply(secret("6", "other"));
        writer.apply_watcher_event(&older);
        caches.observe_secret(&older);
        assert_eq!(value(caches.secret("ns", "s").await).as_deref(), Some("mine"));
        let delivered = watcher::Event::Apply(secret("7", "mine"));
        writer.apply_watcher_event(&delivered);
        caches.observe_secret(&delivered);
        assert_eq!(caches.written_secrets.len(), 0);
        assert_eq!(value(caches.secret("ns", "s").await).as_deref(), Some("mine"));

        // A deletion after a write shows at once.
        caches.wrote_secret(&secret("9", "again"));
        let deleted = watcher::Event::Delete(secret("10", "again"));
        writer.apply_watcher_event(&deleted);
        caches.observe_secret(&deleted);
        assert!(matches!(caches.secret("ns", "s").await, Lookup::Missing));
    }

    #[test]
    fn a_reconcile_right_after_a_status_write_starts_from_that_write() {
        let tcp = |version: &str| -> Arc<TenantControlPlane> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
                    "metadata": {"name": "cp", "namespace": "ns", "resourceVersion": version},
                    "spec": {
                        "controlPlane": {"service": {"serviceType": "ClusterIP"}},
                        "kubernetes": {"version": "v1.34.0", "kubelet": {}},
                    },
                }))
                .unwrap(),
            )
        };
        let caches = Caches::default();
        assert_eq!(
            caches.newer_control_plane(tcp("4")).resource_version().unwrap(),
            "4"
        );
        caches.wrote_control_plane((*tcp("5")).clone());
        // The watch still has version 4: the reconcile gets the written 5.
        assert_eq!(
            caches.newer_control_plane(tcp("4")).resource_version().unwrap(),
            "5"
        );
        // The watch delivers 5, then someone else's 6 arrives: the watch's object wins.
        caches.observe_control_plane(&watcher::Event::Apply((*tcp("5")).clone()));
        assert_eq!(
            caches.newer_control_plane(tcp("6")).resource_version().unwrap(),
            "6"
        );
        caches.wrote_control_plane((*tcp("7")).clone());
        assert_eq!(
            caches.newer_control_plane(tcp("8")).resource_version().unwrap(),
            "8"
        );
    }
}

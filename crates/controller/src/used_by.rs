//! Which TenantControlPlanes use each DataStore, kept current from the TenantControlPlane watch and
//! the watch of the controller's served records ([`crate::served`]). It gives the DataStore controller
//! its `usedBy` without scanning every tenant, and triggers a DataStore's reconcile exactly when its
//! users change (not on every tenant's status write). A TenantControlPlane uses what its spec and a
//! running migration name, plus what its record lists ([`build::users_of`]: status names only while it
//! has no record).

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{ResourceExt as _, runtime::watcher};

use super::build;
use crate::k8s::crd::TenantControlPlane;

/// The index; see the module documentation.
#[derive(Debug, Default)]
pub struct UsedBy {
    inner: std::sync::Mutex<Inner>,
}

/// What one TenantControlPlane names.
#[derive(Debug, Default)]
struct Named {
    /// Its UID (the key of its record).
    uid: String,
    /// Spec and running migration ([`build::named_datastores`]).
    named: BTreeSet<String>,
    /// `status.storage` ([`build::status_datastores`]).
    status: BTreeSet<String>,
}

/// A watch's list in progress and whether one completed.
#[derive(Debug, Default)]
struct Listing {
    /// Keys listed since the watch (re)started its list, until the list is complete.
    listing: Option<HashSet<String>>,
    /// Whether one list has completed.
    synced: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// What each TenantControlPlane (`namespace/name`) names.
    control_planes: HashMap<String, Named>,
    /// The TenantControlPlane (`namespace/name`) of each UID.
    keys: HashMap<String, String>,
    /// The DataStores each UID's record lists.
    records: HashMap<String, BTreeSet<String>>,
    /// DataStores each TenantControlPlane (`namespace/name`) uses.
    by_control_plane: HashMap<String, BTreeSet<String>>,
    /// TenantControlPlanes using each DataStore.
    by_datastore: HashMap<String, BTreeSet<String>>,
    /// The TenantControlPlane watch's list.
    tcp_list: Listing,
    /// The record watch's list.
    record_list: Listing,
}

fn key(tcp: &TenantControlPlane) -> String {
    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any())
}

impl Listing {
    fn start(&mut self) {
        self.listing = Some(HashSet::new());
    }

    fn listed(&mut self, key: &str) {
        if let Some(listing) = self.listing.as_mut() {
            listing.insert(key.to_string());
        }
    }

    /// Ends the list; returns the keys listed.
    fn done(&mut self) -> HashSet<String> {
        self.synced = true;
        self.listing.take().unwrap_or_default()
    }
}

impl Inner {
    /// Records that `control_plane` uses `now`; returns the DataStores gained or lost.
    fn set(&mut self, control_plane: &str, now: BTreeSet<String>) -> Vec<String> {
        let before = if now.is_empty() {
            self.by_control_plane.remove(control_plane)
        } else {
            self.by_control_plane
                .insert(control_plane.to_string(), now.clone())
        }
        .unwrap_or_default();
        for ds in before.difference(&now) {
            if let Some(users) = self.by_datastore.get_mut(ds) {
                users.remove(control_plane);
                if users.is_empty() {
                    self.by_datastore.remove(ds);
                }
            }
        }
        for ds in now.difference(&before) {
            self.by_datastore
                .entry(ds.clone())
                .or_default()
                .insert(control_plane.to_string());
        }
        before.symmetric_difference(&now).cloned().collect()
    }

    /// Recomputes what `control_plane` uses from what it names and its record.
    fn refresh(&mut self, control_plane: &str) -> Vec<String> {
        let now = match self.control_planes.get(control_plane) {
            Some(n) => build::users_of(&n.named, self.records.get(&n.uid), &n.status),
            None => BTreeSet::new(),
        };
        self.set(control_plane, now)
    }

    fn apply_control_plane(&mut self, tcp: &TenantControlPlane) -> Vec<String> {
        let key = key(tcp);
        let named = Named {
            uid: tcp.uid().unwrap_or_default(),
            named: build::named_datastores(tcp),
            status: build::status_datastores(tcp),
        };
        if !named.uid.is_empty() {
            self.keys.insert(named.uid.clone(), key.clone());
        }
        self.control_planes.insert(key.clone(), named);
        self.refresh(&key)
    }

    fn delete_control_plane(&mut self, key: &str) -> Vec<String> {
        if let Some(named) = self.control_planes.remove(key) {
            self.keys.remove(&named.uid);
        }
        self.refresh(key)
    }

    /// Records that `uid`'s record lists `data_stores` (`None`: it has no record).
    fn set_record(&mut self, uid: &str, data_stores: Option<BTreeSet<String>>) -> Vec<String> {
        match data_stores {
            Some(d) => self.records.insert(uid.to_string(), d),
            None => self.records.remove(uid),
        };
        match self.keys.get(uid).cloned() {
            Some(key) => self.refresh(&key),
            None => Vec::new(),
        }
    }
}

impl UsedBy {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one TenantControlPlane watch event; returns the DataStores whose users changed.
    pub fn observe(&self, event: &watcher::Event<TenantControlPlane>) -> Vec<String> {
        let mut inner = self.lock();
        match event {
            watcher::Event::Apply(tcp) => inner.apply_control_plane(tcp),
            watcher::Event::InitApply(tcp) => {
                inner.tcp_list.listed(&key(tcp));
                inner.apply_control_plane(tcp)
            }
            watcher::Event::Delete(tcp) => inner.delete_control_plane(&key(tcp)),
            watcher::Event::Init => {
                inner.tcp_list.start();
                Vec::new()
            }
            watcher::Event::InitDone => {
                // A tenant deleted while the watch was down is absent from the new list.
                let listed = inner.tcp_list.done();
                let gone: Vec<String> = inner
                    .control_planes
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                gone.iter().flat_map(|k| inner.delete_control_plane(k)).collect()
            }
        }
    }

    /// Applies one event of the served records' watch; returns the DataStores whose users changed.
    pub fn observe_record(&self, event: &watcher::Event<ConfigMap>) -> Vec<String> {
        let mut inner = self.lock();
        let record = |map: &ConfigMap| crate::served::of_config_map(map);
        match event {
            watcher::Event::Apply(map) | watcher::Event::InitApply(map) => {
                let Some((uid, served)) = record(map) else {
                    return Vec::new();
                };
                if matches!(event, watcher::Event::InitApply(_)) {
                    inner.record_list.listed(&uid);
                }
                inner.set_record(&uid, Some(served.data_stores()))
            }
            watcher::Event::Delete(map) => match record(map) {
                Some((uid, _)) => inner.set_record(&uid, None),
                None => Vec::new(),
            },
            watcher::Event::Init => {
                inner.record_list.start();
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = inner.record_list.done();
                let gone: Vec<String> = inner
                    .records
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                gone.iter().flat_map(|uid| inner.set_record(uid, None)).collect()
            }
        }
    }

    /// `namespace/name` of every TenantControlPlane using DataStore `name`, sorted; `None` until both
    /// watches have listed once (a record not seen yet could be a DataStore's only user).
    pub fn used_by(&self, name: &str) -> Option<Vec<String>> {
        let inner = self.lock();
        (inner.tcp_list.synced && inner.record_list.synced).then(|| {
            inner
                .by_datastore
                .get(name)
                .map(|users| users.iter().cloned().collect())
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(name: &str, primary: &str, overrides: &[&str]) -> TenantControlPlane {
        tenantplane_testkit::tcp("ns", name)
            .datastore(primary)
            .events_on(overrides)
            .build()
    }

    #[test]
    fn follows_applies_deletes_and_a_relist_and_names_only_the_datastores_that_changed() {
        use watcher::Event::*;
        let index = UsedBy::default();
        assert_eq!(index.used_by("a"), None, "not listed yet");
        assert_eq!(index.observe(&Init), Vec::<String>::new());
        assert_eq!(index.observe(&InitApply(tcp("one", "a", &[]))), ["a"]);
        assert_eq!(index.observe(&InitDone), Vec::<String>::new());
        assert_eq!(index.used_by("a"), None, "the records are not listed yet");
        index.observe_record(&Init);
        assert_eq!(index.observe_record(&InitDone), Vec::<String>::new());
        assert_eq!(index.used_by("a").unwrap(), ["ns/one"]);
        assert_eq!(index.used_by("b").unwrap(), Vec::<String>::new());

        // A status write that changes nothing it references names no DataStore.
        assert_eq!(index.observe(&Apply(tcp("one", "a", &[]))), Vec::<String>::new());
        assert_eq!(index.observe(&Apply(tcp("two", "a", &["b"]))), ["a", "b"]);
        assert_eq!(index.used_by("a").unwrap(), ["ns/one", "ns/two"]);
        // The override is removed: only its DataStore changes.
        assert_eq!(index.observe(&Apply(tcp("two", "a", &[]))), ["b"]);
        assert_eq!(index.used_by("b").unwrap(), Vec::<String>::new());
        assert_eq!(index.observe(&Delete(tcp("one", "a", &[]))), ["a"]);
        assert_eq!(index.used_by("a").unwrap(), ["ns/two"]);

        // The watch restarts; "two" was deleted meanwhile and "three" created.
        index.observe(&Init);
        assert_eq!(index.observe(&InitApply(tcp("three", "c", &[]))), ["c"]);
        assert_eq!(index.observe(&InitDone), ["a"]);
        assert_eq!(index.used_by("a").unwrap(), Vec::<String>::new());
        assert_eq!(index.used_by("c").unwrap(), ["ns/three"]);
    }

    /// TenantControlPlane `name` (UID `uid`) with spec primary `spec` and `status.storage.dataStoreName`
    /// `status`.
    fn forger(name: &str, uid: &str, spec: &str, status: &str) -> TenantControlPlane {
        let mut tcp = tcp(name, spec, &[]);
        tcp.metadata.uid = Some(uid.to_string());
        tcp.status =
            Some(serde_json::from_value(serde_json::json!({"storage": {"dataStoreName": status}})).unwrap());
        tcp
    }

    /// The record ConfigMap of `uid` listing `spaces` (DataStore names).
    fn record(uid: &str, data_stores: &[&str]) -> ConfigMap {
        let spaces: Vec<serde_json::Value> = data_stores
            .iter()
            .map(|d| serde_json::json!({"dataStore": d, "schema": uid, "user": uid}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": crate::served::name(uid), "labels": {crate::served::UID_LABEL: uid}},
            "data": {"spaces": serde_json::to_string(&spaces).unwrap()},
        }))
        .unwrap()
    }

    fn listed(index: &UsedBy) {
        use watcher::Event::*;
        index.observe(&Init);
        index.observe(&InitDone);
        index.observe_record(&Init);
        index.observe_record(&InitDone);
    }

    #[test]
    fn a_status_name_counts_only_until_the_record_exists_and_then_only_the_record_and_spec_count() {
        use watcher::Event::*;
        let index = UsedBy::default();
        listed(&index);
        // Provisioned before records existed: the status name still counts.
        assert_eq!(
            index.observe(&Apply(forger("f", "u1", "home", "victim"))),
            ["home", "victim"]
        );
        assert_eq!(index.used_by("victim").unwrap(), ["ns/f"]);
        // The first provisioning records home: the forged name no longer counts.
        assert_eq!(index.observe_record(&Apply(record("u1", &["home"]))), ["victim"]);
        assert_eq!(index.used_by("victim").unwrap(), Vec::<String>::new());
        assert_eq!(index.used_by("home").unwrap(), ["ns/f"]);
        // A status write naming yet another DataStore changes nothing.
        assert_eq!(
            index.observe(&Apply(forger("f", "u1", "home", "other"))),
            Vec::<String>::new()
        );
        // A recorded space off the spec (an override being removed) counts until deprovisioned.
        assert_eq!(
            index.observe_record(&Apply(record("u1", &["home", "old"]))),
            ["old"]
        );
        assert_eq!(index.used_by("old").unwrap(), ["ns/f"]);
        // The record goes (the TCP is deleted): back to what the TCP itself names.
        assert_eq!(index.observe_record(&Delete(record("u1", &[]))), ["old", "other"]);
        assert_eq!(
            index.observe(&Delete(forger("f", "u1", "home", "other"))),
            ["home", "other"]
        );
        assert_eq!(index.used_by("home").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_record_listed_before_its_tenant_applies_when_the_tenant_arrives_and_a_relist_drops_gone_records() {
        use watcher::Event::*;
        let index = UsedBy::default();
        index.observe_record(&Init);
        assert_eq!(
            index.observe_record(&InitApply(record("u1", &["a"]))),
            Vec::<String>::new()
        );
        index.observe_record(&InitDone);
        assert_eq!(index.used_by("a"), None, "the tenants are not listed yet");
        index.observe(&Init);
        assert_eq!(index.observe(&InitApply(forger("f", "u1", "a", "forged"))), ["a"]);
        index.observe(&InitDone);
        assert_eq!(index.used_by("forged").unwrap(), Vec::<String>::new());
        // The record watch restarts and the record is gone: status counts again (no record yet).
        index.observe_record(&Init);
        assert_eq!(index.observe_record(&InitDone), ["forged"]);
        assert_eq!(index.used_by("forged").unwrap(), ["ns/f"]);
    }

    #[test]
    fn users_of_merges_the_named_with_the_record_or_else_status() {
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        let (named, status) = (set(&["spec", "source"]), set(&["forged", ""]));
        assert_eq!(
            build::users_of(&named, None, &status),
            set(&["forged", "source", "spec"])
        );
        assert_eq!(
            build::users_of(&named, Some(&set(&["served"])), &status),
            set(&["served", "source", "spec"])
        );
        assert_eq!(build::users_of(&named, Some(&set(&[])), &status), named);
    }
}

//! Which TenantControlPlanes use each DataStore, kept current from the TenantControlPlane watch. It
//! gives the DataStore controller its `usedBy` without scanning every tenant, and triggers a
//! DataStore's reconcile exactly when its users change (not on every tenant's status write).

use std::collections::{BTreeSet, HashMap, HashSet};

use kube::{ResourceExt as _, runtime::watcher};

use super::build;
use crate::k8s::crd::TenantControlPlane;

/// The index; see the module documentation.
#[derive(Debug, Default)]
pub struct UsedBy {
    inner: std::sync::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// DataStores each TenantControlPlane (`namespace/name`) references.
    by_control_plane: HashMap<String, BTreeSet<String>>,
    /// TenantControlPlanes referencing each DataStore.
    by_datastore: HashMap<String, BTreeSet<String>>,
    /// Keys listed since the watch (re)started its list, until the list is complete.
    listing: Option<HashSet<String>>,
    /// Whether one list has completed.
    synced: bool,
}

fn key(tcp: &TenantControlPlane) -> String {
    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any())
}

impl Inner {
    /// Records that `control_plane` references `now`; returns the DataStores gained or lost.
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
}

impl UsedBy {
    /// Applies one watch event; returns the DataStores whose users changed.
    pub fn observe(&self, event: &watcher::Event<TenantControlPlane>) -> Vec<String> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(tcp) => inner.set(&key(tcp), build::referenced_datastores(tcp)),
            watcher::Event::InitApply(tcp) => {
                let key = key(tcp);
                if let Some(listing) = inner.listing.as_mut() {
                    listing.insert(key.clone());
                }
                inner.set(&key, build::referenced_datastores(tcp))
            }
            watcher::Event::Delete(tcp) => inner.set(&key(tcp), BTreeSet::new()),
            watcher::Event::Init => {
                inner.listing = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                // A tenant deleted while the watch was down is absent from the new list.
                let listed = inner.listing.take().unwrap_or_default();
                let gone: Vec<String> = inner
                    .by_control_plane
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                let mut changed = Vec::new();
                for control_plane in gone {
                    changed.extend(inner.set(&control_plane, BTreeSet::new()));
                }
                inner.synced = true;
                changed
            }
        }
    }

    /// `namespace/name` of every TenantControlPlane using DataStore `name`, sorted; `None` until the
    /// watch has listed once.
    pub fn used_by(&self, name: &str) -> Option<Vec<String>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.synced.then(|| {
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
}

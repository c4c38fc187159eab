//! I/O: a watch of a tenant cluster's namespaces (metadata only) that wakes the in-tenant phase when a
//! namespace appears, so that members and viewers get their role bindings in it on that event rather
//! than at the next periodic check. Changes of known namespaces and deletions wake nothing.

use std::collections::HashSet;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, ResourceExt as _,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt as _, reflector::ObjectRef, watcher},
};
use tokio::sync::mpsc::UnboundedSender;

use crate::k8s::crd::TenantControlPlane;

/// A running namespace watch; dropping it stops the watch.
#[derive(Debug)]
pub struct NamespaceWatch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for NamespaceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the namespaces of `client`'s cluster and sends `tcp` to `wake` whenever one appears that
/// is not in `known` (the namespaces the pass starting it already read) and was not seen since.
pub fn start(
    client: kube::Client,
    tcp: ObjectRef<TenantControlPlane>,
    known: &[String],
    wake: UnboundedSender<ObjectRef<TenantControlPlane>>,
) -> NamespaceWatch {
    let mut seen = Seen::new(known);
    let task = tokio::spawn(async move {
        let namespaces = Api::<PartialObjectMeta<Namespace>>::all(client);
        let events = watcher(namespaces, watcher::Config::default()).default_backoff();
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if seen.appeared(&event) && wake.send(tcp.clone()).is_err() {
                        return;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, tenant = %tcp, "the tenant's namespace watch failed; it starts again");
                }
            }
        }
    });
    NamespaceWatch { task }
}

/// The namespaces a watch has seen, to tell a new one from a changed one.
#[derive(Debug, Default)]
pub struct Seen {
    known: HashSet<String>,
    /// The names listed since the watch (re)started its list, while it lists.
    listing: Option<HashSet<String>>,
}

impl Seen {
    /// Having seen `known`.
    pub fn new(known: &[String]) -> Self {
        Self {
            known: known.iter().cloned().collect(),
            listing: None,
        }
    }

    /// Whether `event` brings a namespace not seen before (from a (re)list: when the list is done).
    pub fn appeared<K: kube::Resource>(&mut self, event: &watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(ns) => self.known.insert(ns.name_any()),
            watcher::Event::Delete(ns) => {
                self.known.remove(&ns.name_any());
                false
            }
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                false
            }
            watcher::Event::InitApply(ns) => {
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(ns.name_any());
                }
                false
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let new = !listed.is_subset(&self.known);
                self.known = listed;
                new
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::runtime::watcher::Event;

    use super::Seen;

    fn ns(name: &str) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        ns
    }

    #[test]
    fn only_a_namespace_not_seen_before_wakes_the_phase() {
        let mut seen = Seen::new(&["default".into(), "kube-system".into()]);
        assert!(
            !seen.appeared(&Event::Apply(ns("default"))),
            "a known one changed"
        );
        assert!(seen.appeared(&Event::Apply(ns("team-a"))), "a new one");
        assert!(!seen.appeared(&Event::Apply(ns("team-a"))), "the new one changed");
        assert!(!seen.appeared(&Event::Delete(ns("team-a"))), "a deletion");
        assert!(seen.appeared(&Event::Apply(ns("team-a"))), "created again");
    }

    #[test]
    fn a_relist_wakes_the_phase_once_when_done_and_only_for_a_new_namespace() {
        let mut seen = Seen::new(&["default".into(), "kube-system".into()]);
        let relist = |seen: &mut Seen, names: &[&str]| {
            let mut woken = vec![seen.appeared(&Event::<Namespace>::Init)];
            woken.extend(names.iter().map(|n| seen.appeared(&Event::InitApply(ns(n)))));
            woken.push(seen.appeared(&Event::<Namespace>::InitDone));
            woken
        };
        assert_eq!(relist(&mut seen, &["default", "kube-system"]), [false; 4]);
        assert_eq!(relist(&mut seen, &["default"]), [false; 3], "one gone");
        assert_eq!(
            relist(&mut seen, &["default", "team-a"]),
            [false, false, false, true],
            "one new"
        );
        assert!(
            !seen.appeared(&Event::Apply(ns("team-a"))),
            "known after the relist"
        );
    }
}

//! I/O: server-side apply of the in-tenant objects, skipping those the tenant still holds as last
//! applied. An object that was deleted, or whose applied fields someone changed, is restored and
//! reported.

use std::collections::HashMap;

use kube::{
    Api, ResourceExt as _,
    api::{DynamicObject, Patch, PatchParams},
};

use super::build::{Desired, ObjectKey, TenantObject};
use crate::{Error, FIELD_MANAGER, cache::desired_hash};

/// What was last applied of one object: the body's hash, and the `resourceVersion` and the time of the
/// controller's managed-fields entry that the apply returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// [`desired_hash`] of the body.
    pub hash: u64,
    /// The object's `resourceVersion` after the apply.
    pub resource_version: String,
    /// When the API server last changed the controller's fields (its managed-fields entry): a later
    /// time after an apply of the same body means someone else had changed them. (The
    /// `resourceVersion` also moves for others' writes, e.g. a Deployment's status or the
    /// bootstrapsigner's signatures in cluster-info.)
    pub fields_changed_at: Option<String>,
}

/// Why an object was restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// It was gone.
    Deleted,
    /// Someone changed what the controller applies.
    Changed,
}

/// What a pass wrote.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Objects applied (new, changed inputs, or restored).
    pub applied: usize,
    /// The objects restored, and why.
    pub restored: Vec<(ObjectKey, Restored)>,
}

/// Applies each of `objects` that `present` (key → resourceVersion in the tenant) does not hold as
/// `memo` last applied it, and updates `memo`.
pub async fn objects(
    client: &kube::Client,
    objects: &[&TenantObject],
    present: &HashMap<ObjectKey, String>,
    memo: &mut HashMap<ObjectKey, Applied>,
) -> Result<Outcome, Error> {
    let due: Vec<(&TenantObject, u64)> = objects
        .iter()
        .map(|o| (*o, desired_hash(&o.body)))
        .filter(|(o, hash)| {
            let last = memo.get(&o.key);
            !(last.is_some_and(|l| l.hash == *hash && present.get(&o.key) == Some(&l.resource_version)))
        })
        .collect();
    let writes = due.iter().map(|(o, _)| apply(client, o));
    let written = futures_util::future::try_join_all(writes).await?;
    let mut outcome = Outcome::default();
    for ((object, hash), (resource_version, fields_changed_at)) in due.into_iter().zip(written) {
        let last = memo.get(&object.key);
        let restored = match (last, present.contains_key(&object.key)) {
            (Some(_), false) => Some(Restored::Deleted),
            (Some(l), true) if l.hash == hash && l.fields_changed_at != fields_changed_at => {
                Some(Restored::Changed)
            }
            _ => None,
        };
        if let Some(why) = restored {
            outcome.restored.push((object.key.clone(), why));
        }
        outcome.applied += 1;
        let applied = Applied {
            hash,
            resource_version,
            fields_changed_at,
        };
        memo.insert(object.key.clone(), applied);
    }
    Ok(outcome)
}

/// Deletes what the tenant holds of the phase's objects that no phase wants now (an addon removed from
/// the spec), except what `desired` keeps, and forgets what was applied of objects no longer wanted (a
/// binding whose namespace is gone).
pub async fn prune(
    client: &kube::Client,
    desired: &Desired,
    present: &HashMap<ObjectKey, String>,
    memo: &mut HashMap<ObjectKey, Applied>,
) -> Result<(), Error> {
    let wanted: std::collections::HashSet<&ObjectKey> = desired.objects().map(|o| &o.key).collect();
    let stale: Vec<&ObjectKey> = present
        .keys()
        .filter(|k| !wanted.contains(k) && !desired.keeps(k))
        .collect();
    let deletes = stale.iter().map(|key| async move {
        match api(client, key).delete(&key.name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(Error::from(e)),
        }
    });
    futures_util::future::try_join_all(deletes).await?;
    memo.retain(|key, _| wanted.contains(key) || desired.keeps(key));
    Ok(())
}

/// The API of `key`'s kind, in its namespace if it has one.
fn api(client: &kube::Client, key: &ObjectKey) -> Api<DynamicObject> {
    let ar = key.kind.api_resource();
    if key.kind.namespaced() {
        Api::namespaced_with(client.clone(), &key.namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

/// Server-side apply of one object (forcing: the controller owns what it applies); its new
/// `resourceVersion` and the time of the controller's managed-fields entry.
async fn apply(client: &kube::Client, object: &TenantObject) -> Result<(String, Option<String>), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api(client, &object.key)
        .patch(&object.key.name, &params, &Patch::Apply(&object.body))
        .await?;
    let mine = written
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply"))
        .and_then(|m| m.time.as_ref())
        .map(|t| t.0.to_string());
    Ok((written.resource_version().unwrap_or_default(), mine))
}

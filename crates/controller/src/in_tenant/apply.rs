//! I/O: server-side apply of the in-tenant objects, skipping those the tenant still holds as last
//! applied. An object that was deleted, or whose applied fields someone changed, is restored and
//! reported.

use std::collections::HashMap;

use kube::{
    Api, ResourceExt as _,
    api::{DynamicObject, Patch, PatchParams},
};

use super::build::{ObjectKey, TenantObject};
use crate::{Error, FIELD_MANAGER, cache::desired_hash};

/// What was last applied of one object: the body's hash and the `resourceVersion` the apply returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// [`desired_hash`] of the body.
    pub hash: u64,
    /// The object's `resourceVersion` after the apply.
    pub resource_version: String,
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
    for ((object, hash), resource_version) in due.into_iter().zip(written) {
        let before = present.get(&object.key);
        let last = memo.get(&object.key);
        let restored = match (last, before) {
            (Some(_), None) => Some(Restored::Deleted),
            (Some(l), Some(rv)) if l.hash == hash && *rv != resource_version => Some(Restored::Changed),
            _ => None,
        };
        if let Some(why) = restored {
            outcome.restored.push((object.key.clone(), why));
        }
        outcome.applied += 1;
        memo.insert(
            object.key.clone(),
            Applied {
                hash,
                resource_version,
            },
        );
    }
    Ok(outcome)
}

/// Server-side apply of one object (forcing: the controller owns what it applies); its new
/// `resourceVersion`.
async fn apply(client: &kube::Client, object: &TenantObject) -> Result<String, Error> {
    let ar = object.key.kind.api_resource();
    let api: Api<DynamicObject> = if object.key.kind.namespaced() {
        Api::namespaced_with(client.clone(), &object.key.namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&object.key.name, &params, &Patch::Apply(&object.body))
        .await?;
    Ok(written.resource_version().unwrap_or_default())
}

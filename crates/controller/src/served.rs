//! The controller's own record of the DataStores each TenantControlPlane is served by: one ConfigMap
//! `tenantplane-served-<uid>` per TenantControlPlane UID in the controller's state namespace
//! (`ControllerSettings::state_namespace`), which no TenantControlPlane writer may write. It lists every
//! space the controller provisioned (DataStore, schema, user) and has not deprovisioned since: written
//! right after a driver provisioned a space (so its owner marker names this UID there), entry removed
//! right after the driver deprovisioned it. `usedBy` and deletion's cleanup follow it, not
//! `status.storage` (which anyone who may patch `tenantcontrolplanes/status` can write).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    ResourceExt as _,
    api::{ObjectMeta, PostParams},
};
use serde::{Deserialize, Serialize};

use crate::{
    Context, Error, MANAGED_BY_LABEL, datastore::TenantSpace, k8s::crd::TenantControlPlane, state_records,
};

/// The label every record carries (the watch that feeds `usedBy` selects it).
pub const RECORD_LABEL: (&str, &str) = ("tenantplane.io/record", "served");
/// The label naming the TenantControlPlane UID a record belongs to.
pub const UID_LABEL: &str = "tenantplane.io/control-plane-uid";
/// The data key holding the spaces (JSON).
const SPACES: &str = "spaces";

/// One space the controller provisioned: where, and its names there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Space {
    /// The DataStore.
    pub data_store: String,
    /// The schema (etcd prefix, database, bucket).
    pub schema: String,
    /// The user.
    pub user: String,
}

/// What the record holds for one TenantControlPlane (a set: sorted, no duplicates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The spaces.
    pub spaces: BTreeSet<Space>,
}

impl Served {
    /// Every DataStore the record names.
    pub fn data_stores(&self) -> BTreeSet<String> {
        self.spaces.iter().map(|s| s.data_store.clone()).collect()
    }
}

/// The record's ConfigMap name for the TenantControlPlane with UID `uid`.
pub fn name(uid: &str) -> String {
    format!("tenantplane-served-{uid}")
}

/// Parses a record's data (pure); an error names what is wrong.
pub fn parse(data: &BTreeMap<String, String>) -> Result<Served, String> {
    let Some(text) = data.get(SPACES) else {
        return Ok(Served::default());
    };
    let spaces: Vec<Space> = serde_json::from_str(text)
        .map_err(|e| format!("the controller's record of served DataStores is unreadable: {e}"))?;
    Ok(Served {
        spaces: spaces.into_iter().collect(),
    })
}

/// The UID and record of a record ConfigMap (pure); `None` for a ConfigMap that is not one, or is
/// unreadable (its TenantControlPlane then counts as having no record).
pub fn of_config_map(map: &ConfigMap) -> Option<(String, Served)> {
    let uid = map.labels().get(UID_LABEL)?.clone();
    let served = parse(map.data.as_ref()?).ok()?;
    Some((uid, served))
}

/// The record's data (pure).
fn data(served: &Served) -> Result<BTreeMap<String, String>, Error> {
    let spaces: Vec<&Space> = served.spaces.iter().collect();
    let text = serde_json::to_string(&spaces).map_err(|e| Error::Invalid {
        reason: "ServedRecordUnwritable",
        message: format!("the record of served DataStores cannot be serialized: {e}"),
    })?;
    Ok(BTreeMap::from([(SPACES.to_string(), text)]))
}

/// The entry for `space` on DataStore `data_store`.
fn entry(data_store: &str, space: &TenantSpace) -> Space {
    Space {
        data_store: data_store.to_string(),
        schema: space.schema().to_string(),
        user: space.user().to_string(),
    }
}

/// `tcp`'s UID.
fn uid(tcp: &TenantControlPlane) -> Result<String, Error> {
    tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))
}

/// The error of a record that does not parse.
fn unreadable(message: String) -> Error {
    Error::Invalid {
        reason: "ServedRecordUnreadable",
        message,
    }
}

/// Reads `tcp`'s record live; `None` when the controller never wrote one (a TenantControlPlane that
/// was not provisioned since this record was introduced).
pub async fn read(ctx: &Context, tcp: &TenantControlPlane) -> Result<Option<Served>, Error> {
    let Some(map) = state_records::api(ctx).get_opt(&name(&uid(tcp)?)).await? else {
        return Ok(None);
    };
    let served = parse(&map.data.unwrap_or_default()).map_err(unreadable)?;
    Ok(Some(served))
}

/// Records that the driver provisioned `space` on DataStore `data_store` for `tcp` (after
/// `ctx.owners` learns it too).
pub async fn provisioned(
    ctx: &Context,
    tcp: &TenantControlPlane,
    data_store: &str,
    space: &TenantSpace,
) -> Result<(), Error> {
    ctx.owners.record(data_store, space);
    let entry = entry(data_store, space);
    change(ctx, tcp, |served| served.spaces.insert(entry.clone())).await
}

/// Records that the driver deprovisioned `space` on DataStore `data_store` (or that nothing of it can
/// be there); forgets it in `ctx.owners` too.
pub async fn deprovisioned(
    ctx: &Context,
    tcp: &TenantControlPlane,
    data_store: &str,
    space: &TenantSpace,
) -> Result<(), Error> {
    ctx.owners.forget(data_store, space);
    let entry = entry(data_store, space);
    change(ctx, tcp, |served| served.spaces.remove(&entry)).await
}

/// `existing` (the record's ConfigMap, if any) after `edit`; `None` when `edit` changes nothing (in
/// particular a removal never creates a record: that would stop `usedBy` from counting the status
/// names of a TenantControlPlane provisioned before it). An unreadable record is refused, as [`read`]
/// refuses it: rewriting it from nothing would forget the spaces it lists.
fn edited(existing: Option<&ConfigMap>, edit: impl Fn(&mut Served) -> bool) -> Result<Option<Served>, Error> {
    let mut served = match existing {
        Some(map) => parse(map.data.as_ref().unwrap_or(&BTreeMap::new())).map_err(unreadable)?,
        None => Served::default(),
    };
    Ok(edit(&mut served).then_some(served))
}

/// Applies `edit` to `tcp`'s record (creating it) when it changes something: read, then create or
/// replace at the read's resourceVersion, again on a conflict (a migration task and the reconcile may
/// write at once).
async fn change(
    ctx: &Context,
    tcp: &TenantControlPlane,
    edit: impl Fn(&mut Served) -> bool,
) -> Result<(), Error> {
    let uid = uid(tcp)?;
    let name = name(&uid);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let existing = state_records::api(ctx).get_opt(&name).await?;
        let Some(served) = edited(existing.as_ref(), &edit)? else {
            return Ok(());
        };
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ctx.settings.state_namespace.clone()),
                resource_version: existing.as_ref().and_then(|m| m.resource_version()),
                labels: Some(BTreeMap::from([
                    (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
                    (RECORD_LABEL.0.to_string(), RECORD_LABEL.1.to_string()),
                    (UID_LABEL.to_string(), uid.clone()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "tenantplane.io/control-plane".to_string(),
                    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any()),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(data(&served)?),
            ..ConfigMap::default()
        };
        let written = match existing {
            Some(_) => {
                state_records::api(ctx)
                    .replace(&name, &PostParams::default(), &map)
                    .await
            }
            None => state_records::api(ctx).create(&PostParams::default(), &map).await,
        };
        match written {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 5 => continue,
            Err(e) => {
                let consequence = "the DataStores a TenantControlPlane is served by are recorded there";
                return Err(state_records::missing_namespace(ctx, e, consequence));
            }
        }
    }
}

/// Removes `tcp`'s record (the TenantControlPlane is gone, and so is everything it listed).
pub async fn forget(ctx: &Context, tcp: &TenantControlPlane) -> Result<(), Error> {
    state_records::delete(ctx, &name(&uid(tcp)?)).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::datastore::Owner;

    fn space(schema: &str, user: &str) -> TenantSpace {
        TenantSpace::new(schema, user, Owner::new("uid-1", "ns", "tcp").unwrap()).unwrap()
    }

    #[test]
    fn a_record_round_trips_through_its_config_map_data_and_names_its_datastores_once() {
        let mut served = Served::default();
        served.spaces.insert(entry("b", &space("s", "u")));
        served.spaces.insert(entry("a", &space("s", "u")));
        served.spaces.insert(entry("a", &space("s2", "u2")));
        let data = data(&served).unwrap();
        assert_eq!(
            data[SPACES],
            r#"[{"dataStore":"a","schema":"s","user":"u"},{"dataStore":"a","schema":"s2","user":"u2"},{"dataStore":"b","schema":"s","user":"u"}]"#
        );
        assert_eq!(parse(&data).unwrap(), served);
        assert_eq!(served.data_stores(), BTreeSet::from(["a".into(), "b".into()]));
        assert_eq!(parse(&BTreeMap::new()).unwrap(), Served::default());
    }

    #[test]
    fn an_unreadable_record_or_a_config_map_without_the_uid_label_is_no_record() {
        let mut map = ConfigMap {
            data: Some(BTreeMap::from([(SPACES.to_string(), "[{".to_string())])),
            ..ConfigMap::default()
        };
        assert!(parse(map.data.as_ref().unwrap()).is_err());
        map.metadata.labels = Some(BTreeMap::from([(UID_LABEL.to_string(), "u".to_string())]));
        assert_eq!(of_config_map(&map), None);
        map.data = Some(BTreeMap::from([(SPACES.to_string(), "[]".to_string())]));
        assert_eq!(of_config_map(&map), Some(("u".to_string(), Served::default())));
        map.metadata.labels = None;
        assert_eq!(of_config_map(&map), None);
    }

    #[test]
    fn an_edit_refuses_an_unreadable_record_instead_of_rewriting_it_from_nothing() {
        let unreadable = ConfigMap {
            data: Some(BTreeMap::from([(SPACES.to_string(), "[{".to_string())])),
            ..ConfigMap::default()
        };
        let add = |served: &mut Served| served.spaces.insert(entry("a", &space("s", "u")));
        match edited(Some(&unreadable), add) {
            Err(Error::Invalid { reason, .. }) => assert_eq!(reason, "ServedRecordUnreadable"),
            other => panic!("expected ServedRecordUnreadable, got {other:?}"),
        }
        let mut served = Served::default();
        served.spaces.insert(entry("a", &space("s", "u")));
        let current = ConfigMap {
            data: Some(data(&served).unwrap()),
            ..ConfigMap::default()
        };
        assert_eq!(edited(Some(&current), add).unwrap(), None, "nothing to change");
        assert_eq!(edited(None, add).unwrap(), Some(served));
        let remove = |served: &mut Served| served.spaces.remove(&entry("a", &space("s", "u")));
        assert_eq!(edited(None, remove).unwrap(), None, "a removal creates no record");
    }
}

//! The controller's index of datastore names whose owner the datastore confirmed:
//! `(DataStore, schema|user, name)` → owning TenantControlPlane. Successful provisioning fills it and
//! deprovisioning empties it; before any datastore write, a name the index knows to be another UID's is
//! refused without asking the datastore. The datastore's own marker stays the authority: a name the
//! index does not know is always decided there.

use std::collections::HashMap;

use crate::{
    datastore::{DatastoreError, Owner, TenantSpace},
    k8s::crd::Driver,
};

/// The index; cheap to query, one lock.
#[derive(Debug, Default)]
pub struct Owners {
    names: std::sync::Mutex<HashMap<(String, &'static str, String), Owner>>,
}

impl Owners {
    /// Refuses `space` on DataStore `data_store` when the index knows its schema or user to be owned by
    /// another UID.
    pub fn check(
        &self,
        data_store: &str,
        driver: Driver,
        endpoint: &str,
        space: &TenantSpace,
    ) -> Result<(), DatastoreError> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for (field, name) in [("schema", space.schema()), ("user", space.user())] {
            let key = (data_store.to_string(), field, name.to_string());
            if let Some(owner) = names.get(&key)
                && owner.uid() != space.owner().uid()
            {
                return Err(DatastoreError::NameTaken {
                    driver,
                    endpoint: endpoint.to_string(),
                    field,
                    name: name.to_string(),
                    owner: owner.tcp().to_string(),
                });
            }
        }
        Ok(())
    }

    /// Records that the datastore confirmed `space`'s owner for both names.
    pub fn record(&self, data_store: &str, space: &TenantSpace) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for (field, name) in [("schema", space.schema()), ("user", space.user())] {
            names.insert(
                (data_store.to_string(), field, name.to_string()),
                space.owner().clone(),
            );
        }
    }

    /// Forgets the names of `space` that the index attributes to `space`'s owner (after deprovisioning).
    pub fn forget(&self, data_store: &str, space: &TenantSpace) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for (field, name) in [("schema", space.schema()), ("user", space.user())] {
            let key = (data_store.to_string(), field, name.to_string());
            if names.get(&key).is_some_and(|o| o.uid() == space.owner().uid()) {
                names.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(uid: &str, schema: &str, user: &str) -> TenantSpace {
        TenantSpace::new(schema, user, Owner::new(uid, "ns", uid).unwrap()).unwrap()
    }

    #[test]
    fn a_name_confirmed_for_one_uid_is_refused_to_another_on_the_same_datastore_only() {
        let owners = Owners::default();
        owners.record("ds-a", &space("victim", "s1", "u1"));
        owners
            .check("ds-a", Driver::Etcd, "e:1", &space("victim", "s1", "u1"))
            .unwrap();
        let err = owners
            .check("ds-a", Driver::Etcd, "e:1", &space("thief", "s1", "u2"))
            .unwrap_err();
        assert_eq!(err.reason(), "DataStoreNameTaken");
        assert!(
            err.to_string()
                .contains("schema \"s1\" belongs to another TenantControlPlane"),
            "{err}"
        );
        let err = owners
            .check("ds-a", Driver::Etcd, "e:1", &space("thief", "s2", "u1"))
            .unwrap_err();
        assert!(err.to_string().contains("user \"u1\""), "{err}");
        owners
            .check("ds-b", Driver::Etcd, "e:1", &space("thief", "s1", "u1"))
            .unwrap();
    }

    #[test]
    fn forgetting_removes_only_the_owners_own_entries() {
        let owners = Owners::default();
        owners.record("ds", &space("victim", "s1", "u1"));
        owners.forget("ds", &space("thief", "s1", "u1"));
        assert!(
            owners
                .check("ds", Driver::Etcd, "e", &space("thief", "s1", "u9"))
                .is_err()
        );
        owners.forget("ds", &space("victim", "s1", "u1"));
        owners
            .check("ds", Driver::Etcd, "e", &space("thief", "s1", "u1"))
            .unwrap();
    }
}

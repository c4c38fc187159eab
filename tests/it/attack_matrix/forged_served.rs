//! Forged served DataStores: a TenantControlPlane on a PostgreSQL DataStore (`home`) patches its own
//! `status.storage.dataStoreName` and `status.storage.overrides[].dataStoreName` to name a MariaDB
//! DataStore (`other`) it never used. The controller keeps its own record of the DataStores each
//! TenantControlPlane is served by (ConfigMap `tenantplane-served-<uid>` in its state namespace), so:
//! - the forged name is not counted in `other`'s `usedBy`, and `other` can be deleted;
//! - deleting the forger removes its space from `home`, the DataStore it really holds a space on.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use super::datastore::Backend;
use crate::controller::{Env, env};

/// Creates TenantControlPlane `name` on `home`, waits until it is provisioned, then forges its status
/// to record `other` as its primary and as the DataStore of an `/events` override, and waits until the
/// controller saw the forgery (`RecordedDataStoreNotHeld`). Returns its UID.
async fn forged_elsewhere(env: &Env, name: &str, home: &str, other: &str) -> String {
    let uid = env.tcp(name, home, json!([])).await.uid().unwrap();
    env.provisioned(name).await;
    let forged = json!({"status": {"storage": {
        "dataStoreName": other,
        "overrides": [{"resource": "/events", "dataStoreName": other}],
    }}});
    let api = env.tcps();
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    // An annotation wakes the datastore phase (a status write alone does not). Its condition comes
    // from the watch event after the forged status, which the usedBy index has applied by then.
    let poke = json!({"metadata": {"annotations": {"test.tenantplane.io/poke": "1"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&poke))
        .await
        .unwrap();
    let (tcp, condition) = env.tcp_condition(name, "DataStoreReady", "False").await;
    assert_eq!(
        condition.reason, "RecordedDataStoreNotHeld",
        "{}",
        condition.message
    );
    let storage = tcp.status.unwrap().storage.unwrap();
    assert_eq!(
        storage.data_store_name.as_deref(),
        Some(other),
        "the forgery stands"
    );
    uid
}

/// The controller's record of the DataStores the TenantControlPlane with UID `uid` is served by.
async fn served_record(env: &Env, uid: &str) -> Option<Value> {
    let state = tenantplane::controller::settings::DEFAULT_STATE_NAMESPACE;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), state);
    let map = maps
        .get_opt(&format!("tenantplane-served-{uid}"))
        .await
        .unwrap()?;
    Some(serde_json::from_str(&map.data.unwrap()["spaces"]).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_datastore_name_is_not_in_that_datastores_used_by_and_it_can_be_deleted() {
    let env = env("fsv-use").await;
    let home = Backend::Postgres.datastore(&env).await;
    let other = Backend::MariaDb.datastore(&env).await;
    let uid = forged_elsewhere(&env, "forger", &home, &other).await;
    let forger = format!("{}/forger", env.ns);
    env.used_by(&home, &[&forger]).await;
    // Counted in `other`'s usedBy, the forger would hold its deletion (DataStoreStillUsed) forever.
    env.delete_datastore_and_wait(&other).await;
    env.used_by(&home, &[&forger]).await;
    assert_eq!(
        served_record(&env, &uid).await,
        Some(json!([{"dataStore": home, "schema": uid, "user": uid}]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_tcp_whose_status_forges_its_datastore_removes_its_space_from_the_real_one() {
    let env = env("fsv-del").await;
    let home = Backend::Postgres.datastore(&env).await;
    let other = Backend::MariaDb.datastore(&env).await;
    let uid = forged_elsewhere(&env, "drifter", &home, &other).await;
    // Default names: the role and the database are both named after the UID.
    assert_eq!(Backend::Postgres.traces(&uid).await, "2 role(s)/database(s)");
    env.delete_tcp_and_wait("drifter").await;
    assert_eq!(
        Backend::Postgres.traces(&uid).await,
        "",
        "the space on {home} leaked"
    );
    assert_eq!(Backend::MariaDb.traces(&uid).await, "", "made on {other}");
    assert_eq!(
        served_record(&env, &uid).await,
        None,
        "the record outlived its TCP"
    );
}

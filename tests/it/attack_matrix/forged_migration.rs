//! Forged migrations: an attacker's TenantControlPlane on the victim's DataStore patches its own
//! status subresource with a migration the controller never recorded, aimed at the victim's space.
//! Per driver, each attack at each point of a migration:
//! - attacks: write into the victim (target = the victim's names through `status.storage.setup`),
//!   wipe it (the same, from an empty source on another DataStore), read it (source = the victim's
//!   names: copied out, or frozen/sealed at `Frozen`), grant on a foreign database (source = the
//!   victim's database with the attacker's own user: a thaw would grant it);
//! - points: `Copying`, `CatchingUp`, `Frozen`, `Switching`, an abort (the spec no longer names the
//!   target after the freeze) and a failure unwind (a permanent failure after the freeze).
//!
//! Each asserts that the victim's data and grants, read by the DataStore's admin, are byte-identical
//! afterwards, that the victim still writes with its own credentials, and that the attacker carries
//! `MigrationStatusRefused` naming the refusal. A forged `status.storage.dataStoreName` gets the forger no
//! space on the DataStore it names.

use futures::future::join_all;
use kube::{
    ResourceExt as _,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane::pki::Ca;
use tenantplane_devenv::localenv::{self, nats::LocalNats};

use super::datastore::Backend;
use crate::{
    controller::{Env, WAIT, env, etcd_auth, tls_etcd, wait_for_event},
    support::{self, eventually},
};

/// Where in a migration the forged status puts the attacker.
#[derive(Debug, Clone, Copy)]
enum Point {
    Stage(&'static str),
    /// `Frozen` with the spec naming another DataStore than the target: the manager aborts.
    Abort,
    /// `Copying` after a freeze whose carry is refused (permanent): the manager unwinds.
    Unwind,
}

const POINTS: [Point; 6] = [
    Point::Stage("Copying"),
    Point::Stage("CatchingUp"),
    Point::Stage("Frozen"),
    Point::Stage("Switching"),
    Point::Abort,
    Point::Unwind,
];

/// Which space the forged status aims at the victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// Target: the victim's names on its own DataStore; source: the attacker's own space.
    Write,
    /// Target: the victim's names; source: an empty space on the other DataStore.
    Wipe,
    /// Source: the victim's space; target: the attacker's own names on the other DataStore.
    Read,
    /// Source: the victim's database with the attacker's own user.
    Grant,
}

const ATTACKS: [Attack; 4] = [Attack::Write, Attack::Wipe, Attack::Read, Attack::Grant];

/// The two DataStores of a case: the victim's (`home`) and another of the same driver (`other`).
struct Stores<'a> {
    home: &'a str,
    other: &'a str,
}

/// The forged `status` and spec changes of one case, given the victim's and the attacker's names.
fn forgery(point: Point, attack: Attack, stores: &Stores<'_>, victim: &str, own: &str) -> (Value, Value) {
    let (source, target, source_names, setup) = match attack {
        Attack::Write => (stores.home, stores.home, (own, own), Some(victim)),
        Attack::Wipe => (stores.other, stores.home, (own, own), Some(victim)),
        Attack::Read => (stores.home, stores.other, (victim, victim), None),
        Attack::Grant => (stores.home, stores.other, (victim, own), None),
    };
    let stage = match point {
        Point::Stage(stage) => stage,
        Point::Abort => "Frozen",
        Point::Unwind => "Copying",
    };
    let mut migration = json!({
        "source": source, "target": target, "stage": stage, "overrides": "Drop",
        "startedAt": "2026-12-06T00:00:00Z", "stageStartedAt": "2026-12-06T00:00:00Z",
        "sourceSchema": source_names.0, "sourceUser": source_names.1,
    });
    if matches!(
        point,
        Point::Stage("Frozen" | "Switching") | Point::Abort | Point::Unwind
    ) {
        migration["frozenAt"] = json!("2026-12-06T00:00:01Z");
    }
    let mut spec = json!({"dataStore": target});
    match point {
        Point::Abort => {
            spec["dataStore"] = json!(if target == stores.home {
                stores.other
            } else {
                stores.home
            })
        }
        Point::Unwind => {
            // Carrying one override space into two is refused before copying: a permanent failure,
            // so the manager unwinds.
            migration["overrides"] = json!("Move");
            spec["dataStoreOverrides"] = json!([
                {"resource": "/events", "dataStore": "ghost-a"},
                {"resource": "coordination.k8s.io/leases", "dataStore": "ghost-b"},
            ]);
        }
        Point::Stage(_) => {}
    }
    let mut status = json!({"migration": migration, "storage": {}});
    if let Some(names) = setup {
        status["storage"]["setup"] = json!({"schema": names, "user": names});
    }
    if matches!(point, Point::Unwind) {
        status["storage"]["overrides"] = json!([
            {"resource": "/events", "dataStoreName": "ghost-old"},
            {"resource": "coordination.k8s.io/leases", "dataStoreName": "ghost-old"},
        ]);
    }
    (json!({"status": status}), json!({"spec": spec}))
}

/// Everything about the victim an attack could change, read with the DataStore's admin identity.
async fn victim_state(backend: &Backend, env: &Env, victim: &str) -> String {
    let datum = backend.read(env, "victim").await;
    let admin_view = match backend {
        Backend::Etcd(etcd) => {
            let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
            let keys = root.run(&["get", &format!("/{victim}/"), "--prefix"]).unwrap();
            let (role, user) = etcd_auth(etcd, victim);
            format!("{keys}|{role:?}|{user:?}")
        }
        Backend::Postgres => {
            let mut admin = PgConnection::connect(&support::postgres().admin_url())
                .await
                .unwrap();
            let row: (Option<String>, Option<String>, String, bool, i32) = sqlx::query_as(
                "select d.datacl::text, r.rolpassword, pg_get_userbyid(d.datdba)::text, r.rolcanlogin, \
                 d.datconnlimit from pg_database d, pg_authid r where d.datname = $1 and r.rolname = $1",
            )
            .bind(victim)
            .fetch_one(&mut admin)
            .await
            .unwrap();
            format!("{row:?}")
        }
        Backend::MariaDb => {
            let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
                .await
                .unwrap();
            let pattern = tenantplane::datastore::mysql::grant_pattern(victim);
            let grants: Vec<String> = sqlx::query_scalar(
                "select concat(User, '@', Host, ' on ', cast(Db as char)) from mysql.db \
                 where Db = ? or Db in ('mysql', 'tenantplane') or User = ? order by 1",
            )
            .bind(&pattern)
            .bind(victim)
            .fetch_all(&mut admin)
            .await
            .unwrap();
            let shown: Vec<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("show grants for '{victim}'@'%'")))
                    .fetch_all(&mut admin)
                    .await
                    .unwrap();
            format!("{grants:?}|{shown:?}")
        }
        Backend::Nats(nats) => {
            let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
            let bucket = env.secret_data("victim-datastore-config").await["DB_SCHEMA"].clone();
            let mut stream = js.get_stream(format!("KV_{bucket}")).await.unwrap();
            let info = stream.info().await.unwrap();
            format!(
                "{:?}|{}|{}|{}",
                info.config.description, info.state.messages, info.config.deny_delete, info.config.sealed
            )
        }
    };
    format!("{datum}|{admin_view}")
}

/// Creates one attacker per case on the victim's DataStore, forges each one's status, and checks
/// every outcome.
async fn forged_migrations(prefix: &str, backend: Backend, other: &str, env: Env, home: &str) {
    let victim = victim_schema(&env, &backend, home).await;
    let before = victim_state(&backend, &env, &victim).await;
    let stores = Stores { home, other };
    let cases: Vec<(Point, Attack, String)> = POINTS
        .iter()
        .flat_map(|p| ATTACKS.iter().map(move |a| (*p, *a)))
        .enumerate()
        .map(|(i, (p, a))| (p, a, format!("hijack-{i}")))
        .collect();
    let attackers = join_all(cases.iter().map(|(_, _, name)| env.tcp(name, home, json!([])))).await;
    // The controller's first status write lands before the forgery (a NATS DataStore serves one
    // tenant: attackers there are refused, and forge all the same).
    let (nats, env_ref) = (matches!(backend, Backend::Nats(_)), &env);
    join_all(cases.iter().map(|(_, _, name)| async move {
        let env = env_ref;
        if nats {
            env.tcp_condition(name, "DataStoreExclusive", "False").await;
        } else {
            env.provisioned(name).await;
        }
    }))
    .await;
    join_all(cases.iter().zip(&attackers).map(|((point, attack, name), tcp)| {
        // An attacker's own names are its UID.
        let own = tcp.uid().unwrap();
        let (status, spec) = forgery(*point, *attack, &stores, &victim, &own);
        let api = env.tcps();
        async move {
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
            api.patch(name, &PatchParams::default(), &Patch::Merge(&spec))
                .await
                .unwrap();
        }
    }))
    .await;
    for (point, attack, name) in &cases {
        let (_, condition) = env.tcp_condition(name, "MigrationStatusRefused", "True").await;
        assert_eq!(
            condition.reason, "ForgedMigrationStatus",
            "{prefix} {point:?} {attack:?}"
        );
        assert!(
            condition
                .message
                .contains("but the controller recorded no migration"),
            "{prefix} {point:?} {attack:?}: {}",
            condition.message
        );
        assert!(!condition.message.contains("victim"), "{}", condition.message);
        wait_for_event(&env.client, &env.ns, name, "MigrationStatusRefused").await;
    }
    // Whatever the manager then runs for the attackers (their own migrations), it never reaches the
    // victim: wait until each attacker's forged record is gone from status, then compare.
    for (_, _, name) in &cases {
        let api = env.tcps();
        let victim = victim.as_str();
        eventually(&format!("{name}'s forged record gone"), WAIT, || {
            let api = api.clone();
            async move {
                let tcp = api.get(name).await.ok()?;
                let m = tcp.status.as_ref().and_then(|s| s.migration.as_ref());
                m.is_none_or(|m| m.source_schema.as_deref() != Some(victim) || m.stage.ended())
                    .then_some(())
            }
        })
        .await;
    }
    assert_eq!(
        victim_state(&backend, &env, &victim).await,
        before,
        "{prefix}: the victim changed"
    );
    env.provisioned("victim").await;
    backend.overwrite(&env, "victim", "written-after").await;
    assert_eq!(backend.read(&env, "victim").await, "written-after", "{prefix}");
}

/// Creates the victim on `home` with a datum; its schema (= its user: its UID).
async fn victim_schema(env: &Env, backend: &Backend, home: &str) -> String {
    let uid = env.tcp("victim", home, json!([])).await.uid().unwrap();
    env.provisioned("victim").await;
    backend.write(env, "victim", "victims-datum").await;
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_migration_status_reaches_no_etcd_victim_at_any_stage() {
    let ca = Ca::new("forged-etcd-ca").unwrap();
    let (home_etcd, other_etcd) = (tls_etcd("fm-etcd-a", &ca).await, tls_etcd("fm-etcd-b", &ca).await);
    let env = env("fm-etcd").await;
    let home = env.etcd_datastore(&home_etcd).await;
    let other = env.etcd_datastore(&other_etcd).await;
    for ds in [&home, &other] {
        env.ds_condition(ds, "Ready", "True").await;
    }
    let backend = Backend::Etcd(Box::new(home_etcd));
    forged_migrations("etcd", backend, &other, env, &home).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_migration_status_reaches_no_postgres_victim_at_any_stage() {
    let env = env("fm-pg").await;
    let backend = Backend::Postgres;
    let home = backend.datastore(&env).await;
    let other = backend.datastore(&env).await;
    forged_migrations("postgres", backend, &other, env, &home).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_migration_status_reaches_no_mariadb_victim_at_any_stage() {
    let env = env("fm-my").await;
    let backend = Backend::MariaDb;
    let home = backend.datastore(&env).await;
    let other = backend.datastore(&env).await;
    forged_migrations("mariadb", backend, &other, env, &home).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_migration_status_reaches_no_nats_victim_at_any_stage() {
    let nats = LocalNats::start(localenv::scratch_dir("fm-nats").unwrap())
        .await
        .unwrap();
    let other_nats = LocalNats::start(localenv::scratch_dir("fm-nats-b").unwrap())
        .await
        .unwrap();
    let env = env("fm-nats").await;
    let other_backend = Backend::Nats(other_nats);
    let other = other_backend.datastore(&env).await;
    let backend = Backend::Nats(nats);
    let home = backend.datastore(&env).await;
    forged_migrations("nats", backend, &other, env, &home).await;
    drop(other_backend);
}

/// A TCP on `home` whose status is patched to record `other` (a ready DataStore its spec never
/// named): the datastore phase provisions nothing there (`RecordedDataStoreNotHeld`), and its
/// datastore Secret keeps pointing at `home`.
async fn recorded_elsewhere(env: &Env, home: &str, other: &str) -> String {
    let uid = env.tcp("drifter", home, json!([])).await.uid().unwrap();
    env.provisioned("drifter").await;
    let forged = json!({"status": {"storage": {"dataStoreName": other}}});
    let api = env.tcps();
    api.patch_status("drifter", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    // An annotation wakes the datastore phase (a status write alone does not).
    let poke = json!({"metadata": {"annotations": {"test.tenantplane.io/poke": "1"}}});
    api.patch("drifter", &PatchParams::default(), &Patch::Merge(&poke))
        .await
        .unwrap();
    let (_, condition) = env.tcp_condition("drifter", "DataStoreReady", "False").await;
    assert_eq!(
        condition.reason, "RecordedDataStoreNotHeld",
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains(&format!("names DataStore {other}")),
        "{}",
        condition.message
    );
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_recorded_etcd_datastore_gets_no_space_of_the_forger() {
    let ca = Ca::new("recorded-etcd-ca").unwrap();
    let (home_etcd, other_etcd) = (tls_etcd("rd-etcd-a", &ca).await, tls_etcd("rd-etcd-b", &ca).await);
    let env = env("rd-etcd").await;
    let home = env.etcd_datastore(&home_etcd).await;
    let other = env.etcd_datastore(&other_etcd).await;
    env.ds_condition(&other, "Ready", "True").await;
    let uid = recorded_elsewhere(&env, &home, &other).await;
    let (role, user) = etcd_auth(&other_etcd, &uid);
    assert!(
        role.is_err() && user.is_err(),
        "provisioned on {other}: {role:?} {user:?}"
    );
    let root = other_etcd
        .etcdctl(&other_etcd.tls().unwrap().root_client)
        .unwrap();
    let markers = root
        .run(&["get", "tenantplane.io/owner/", "--prefix", "--keys-only"])
        .unwrap();
    assert!(!markers.contains(&uid), "{markers}");
}

/// The forger's status records `other` and its spec never named it: it holds nothing there, so a
/// newcomer naming `other` in its spec is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_recorded_nats_datastore_hands_out_no_login_and_keeps_no_one_out() {
    let home_nats = LocalNats::start(localenv::scratch_dir("rd-nats-a").unwrap())
        .await
        .unwrap();
    let other_nats = LocalNats::start(localenv::scratch_dir("rd-nats-b").unwrap())
        .await
        .unwrap();
    let other_endpoint = other_nats.endpoint();
    let env = env("rd-nats").await;
    // Both servers live as long as their backends do.
    let (home_backend, other_backend) = (Backend::Nats(home_nats), Backend::Nats(other_nats));
    let home = home_backend.datastore(&env).await;
    let other = other_backend.datastore(&env).await;
    recorded_elsewhere(&env, &home, &other).await;
    let config = env.secret_data("drifter-datastore-config").await;
    assert_ne!(config["DB_CONNECTION_STRING"], other_endpoint);
    let newcomer = env.tcp("newcomer", &other, json!([])).await.uid().unwrap();
    env.provisioned("newcomer").await;
    let (_, exclusive) = env.tcp_condition("newcomer", "DataStoreExclusive", "True").await;
    assert_eq!(exclusive.status, "True", "{}", exclusive.message);
    let config = env.secret_data("newcomer-datastore-config").await;
    assert_eq!(
        (&config["DB_CONNECTION_STRING"], &config["DB_SCHEMA"]),
        (&other_endpoint, &newcomer)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_between_two_datastores_of_one_server_is_refused_and_the_data_stays() {
    let ca = Ca::new("one-server-ca").unwrap();
    let etcd = tls_etcd("one-server", &ca).await;
    let env = env("one-server").await;
    let first = env.etcd_datastore(&etcd).await;
    let second = env.etcd_datastore(&etcd).await;
    env.ds_condition(&second, "Ready", "True").await;
    let backend = Backend::Etcd(Box::new(etcd));
    env.tcp("victim", &first, json!([])).await;
    env.provisioned("victim").await;
    backend.write(&env, "victim", "victims-datum").await;
    let spec = json!({"spec": {"dataStore": second}});
    env.tcps()
        .patch("victim", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    let (tcp, condition) = env.tcp_condition("victim", "Migrating", "False").await;
    assert_eq!(condition.reason, "Failed", "{}", condition.message);
    assert!(
        condition
            .message
            .contains(&format!("DataStores {first} and {second}, which name one server")),
        "{}",
        condition.message
    );
    assert_eq!(tcp.status.unwrap().storage.unwrap().data_store_name, Some(first));
    assert_eq!(backend.read(&env, "victim").await, "victims-datum");
    backend.write(&env, "victim", "still-writable").await;
}

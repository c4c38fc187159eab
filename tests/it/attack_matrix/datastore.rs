//! Attacks on a shared DataStore through the TenantControlPlane spec and status, per driver, against a
//! victim that holds a datum written with its own credentials:
//! - a second TCP claiming the victim's schema, its user, or both: `DataStoreReady=False`
//!   (`DataStoreNameTaken`, naming the victim), a Warning Event, no credentials; deleting it leaves the
//!   victim intact;
//! - the DataStore's admin user named as a tenant user: refused (`TenantNameInvalid`);
//! - an unmarked pre-existing database/role/user/bucket: never adopted (`DataStoreForeignObject`);
//! - a thief's `status.storage.setup` patched to the victim's names, then deleted: the victim intact;
//! - MySQL: `_` in a schema does not reach a database whose name it matches as a wildcard.
//!
//! The victim's datum is read back with the victim's credentials after every attack.

use k8s_openapi::api::{core::v1::Secret, events::v1::Event};
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane::{
    k8s::crd::TenantControlPlane,
    pki::{Ca, CertKey},
};
use tenantplane_devenv::localenv::{self, etcd::LocalEtcd, nats::LocalNats};

use crate::{
    controller::{Env, env, etcd_auth, pg_root, tls_etcd, wait_for_event},
    support,
};

/// The backend under attack.
pub(super) enum Backend {
    Etcd(Box<LocalEtcd>),
    Postgres,
    MariaDb,
    Nats(LocalNats),
}

impl Backend {
    /// Creates a DataStore (its credentials' Secret once per namespace) and waits until it is Ready.
    pub(super) async fn datastore(&self, env: &Env) -> String {
        let name = match self {
            Backend::Etcd(etcd) => env.etcd_datastore(etcd).await,
            Backend::Postgres => {
                let (endpoint, user, password) = pg_root();
                env.secret_once("pg-root", &[("username", &user), ("password", &password)])
                    .await;
                sql_datastore(env, "PostgreSQL", endpoint, "pg-root").await
            }
            Backend::MariaDb => {
                env.secret_once("my-root", &[("username", "root"), ("password", "")])
                    .await;
                let endpoint = format!("127.0.0.1:{}", support::mariadb().port());
                sql_datastore(env, "MySQL", endpoint, "my-root").await
            }
            Backend::Nats(nats) => {
                env.secret_once("nats-auth", &[("username", ""), ("password", "")])
                    .await;
                let name = support::unique("ds-nats");
                env.datastore(
                    &name,
                    json!({"driver": "NATS", "endpoints": [nats.endpoint()],
                           "basicAuth": {"username": env.sref("nats-auth", "username"), "password": env.sref("nats-auth", "password")}}),
                )
                .await
            }
        };
        env.ds_condition(&name, "Ready", "True").await;
        name
    }

    /// The DataStore's admin user, as a tenant would name it.
    fn admin_user(&self) -> String {
        match self {
            Backend::Etcd(_) => "root".into(),
            Backend::Postgres => pg_root().1,
            Backend::MariaDb => "root".into(),
            Backend::Nats(_) => unreachable!("NATS has no users"),
        }
    }

    /// Writes `value` with tenant `tcp`'s own credentials (read from its Secrets).
    pub(super) async fn write(&self, env: &Env, tcp: &str, value: &str) {
        match self {
            Backend::Etcd(etcd) => {
                let (ctl, schema) = etcd_tenant(env, etcd, tcp).await;
                ctl.run(&["put", &format!("/{schema}/datum"), value]).unwrap();
            }
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&sql_url(env, "postgres", tcp).await)
                    .await
                    .unwrap();
                for statement in datum_statements(value) {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(&mut conn)
                        .await
                        .unwrap();
                }
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&sql_url(env, "mysql", tcp).await)
                    .await
                    .unwrap();
                for statement in datum_statements(value) {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(&mut conn)
                        .await
                        .unwrap();
                }
            }
            Backend::Nats(nats) => {
                let bucket = env.secret_data(&format!("{tcp}-datastore-config")).await["DB_SCHEMA"].clone();
                let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
                let kv = js.get_key_value(bucket).await.unwrap();
                kv.put("datum", value.to_string().into()).await.unwrap();
            }
        }
    }

    /// Replaces the datum written by [`Backend::write`] with `value`, with `tcp`'s own credentials.
    pub(super) async fn overwrite(&self, env: &Env, tcp: &str, value: &str) {
        let update = format!("update datum set v = '{value}'");
        match self {
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&sql_url(env, "postgres", tcp).await)
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(update))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&sql_url(env, "mysql", tcp).await)
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(update))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Backend::Etcd(_) | Backend::Nats(_) => self.write(env, tcp, value).await,
        }
    }

    /// Reads the datum back with tenant `tcp`'s own credentials.
    pub(super) async fn read(&self, env: &Env, tcp: &str) -> String {
        match self {
            Backend::Etcd(etcd) => {
                let (ctl, schema) = etcd_tenant(env, etcd, tcp).await;
                ctl.run(&["get", &format!("/{schema}/datum"), "--print-value-only"])
                    .unwrap()
                    .trim()
                    .to_string()
            }
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&sql_url(env, "postgres", tcp).await)
                    .await
                    .unwrap();
                sqlx::query_scalar("select v from datum")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&sql_url(env, "mysql", tcp).await)
                    .await
                    .unwrap();
                sqlx::query_scalar("select v from datum")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
            Backend::Nats(nats) => {
                let bucket = env.secret_data(&format!("{tcp}-datastore-config")).await["DB_SCHEMA"].clone();
                let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
                let kv = js.get_key_value(bucket).await.unwrap();
                String::from_utf8(kv.get("datum").await.unwrap().unwrap().to_vec()).unwrap()
            }
        }
    }

    /// Creates `name` as a database/role/user (etcd: role, user and a key) directly, as another
    /// application would: no ownership marker.
    async fn create_unmarked(&self, name: &str) {
        match self {
            Backend::Etcd(etcd) => {
                let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
                root.run(&["role", "add", name]).unwrap();
                root.run(&["user", "add", name, "--no-password"]).unwrap();
                root.run(&["put", &format!("/{name}/app"), "theirs"]).unwrap();
            }
            Backend::Postgres => {
                let mut admin = PgConnection::connect(&support::postgres().admin_url())
                    .await
                    .unwrap();
                for statement in [
                    format!("create role \"{name}\" login"),
                    format!("create database \"{name}\" owner \"{name}\""),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(&mut admin)
                        .await
                        .unwrap();
                }
            }
            Backend::MariaDb => {
                let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
                    .await
                    .unwrap();
                for statement in [
                    format!("create user '{name}'@'%' identified by 'theirs'"),
                    format!("create database `{name}`"),
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(statement))
                        .execute(&mut admin)
                        .await
                        .unwrap();
                }
            }
            Backend::Nats(nats) => {
                let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
                let kv = js
                    .create_key_value(async_nats::jetstream::kv::Config {
                        bucket: name.into(),
                        description: tenantplane::datastore::nats::KINE_BUCKET_DESCRIPTION.into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                kv.put("app", "theirs".into()).await.unwrap();
            }
        }
    }

    /// What exists on the backend under `name` (schema, user, marker), as text; empty when nothing.
    pub(super) async fn traces(&self, name: &str) -> String {
        match self {
            Backend::Etcd(etcd) => {
                let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
                let (role, user) = etcd_auth(etcd, name);
                let mut found = root
                    .run(&["get", "tenantplane.io/owner/", "--prefix", "--keys-only"])
                    .unwrap()
                    .lines()
                    .filter(|k| k.ends_with(&format!("/{name}")))
                    .collect::<Vec<_>>()
                    .join(",");
                for (what, r) in [("role", role), ("user", user)] {
                    if r.is_ok() {
                        found.push_str(what);
                    }
                }
                found
            }
            Backend::Postgres => {
                let mut admin = PgConnection::connect(&support::postgres().admin_url())
                    .await
                    .unwrap();
                let n: i64 = sqlx::query_scalar(
                    "select (select count(*) from pg_roles where rolname = $1) + \
                     (select count(*) from pg_database where datname = $1)",
                )
                .bind(name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
                if n == 0 {
                    String::new()
                } else {
                    format!("{n} role(s)/database(s)")
                }
            }
            Backend::MariaDb => {
                let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
                    .await
                    .unwrap();
                let n: i64 = sqlx::query_scalar(
                    "select (select count(*) from tenantplane.owners where name = ?) + \
                     (select count(*) from mysql.user where User = ?) + \
                     (select count(*) from information_schema.schemata where schema_name = ?)",
                )
                .bind(name)
                .bind(name)
                .bind(name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
                if n == 0 {
                    String::new()
                } else {
                    format!("{n} marker(s)/account(s)/database(s)")
                }
            }
            Backend::Nats(_) => String::new(),
        }
    }

    /// Everything an attack could change about the unmarked `name`, as text.
    async fn snapshot(&self, name: &str) -> String {
        match self {
            Backend::Etcd(etcd) => {
                let (role, user) = etcd_auth(etcd, name);
                let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
                let keys = root.run(&["get", &format!("/{name}/"), "--prefix"]).unwrap();
                format!("{role:?}|{user:?}|{keys}")
            }
            Backend::Postgres => {
                let mut admin = PgConnection::connect(&support::postgres().admin_url())
                    .await
                    .unwrap();
                let row: (Option<String>, Option<String>, String, Option<String>) = sqlx::query_as(
                    "select shobj_description(r.oid, 'pg_authid'), shobj_description(d.oid, 'pg_database'), \
                     pg_get_userbyid(d.datdba)::text, r.rolpassword from pg_authid r, pg_database d \
                     where r.rolname = $1 and d.datname = $1",
                )
                .bind(name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
                format!("{row:?}")
            }
            Backend::MariaDb => {
                let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
                    .await
                    .unwrap();
                let grants: Vec<String> =
                    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("show grants for '{name}'@'%'")))
                        .fetch_all(&mut admin)
                        .await
                        .unwrap();
                let url = format!("mysql://{name}:theirs@127.0.0.1:{}/", support::mariadb().port());
                MySqlConnection::connect(&url).await.unwrap();
                format!("{grants:?}")
            }
            Backend::Nats(nats) => {
                let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
                let mut stream = js.get_stream(format!("KV_{name}")).await.unwrap();
                let info = stream.info().await.unwrap();
                let kv = js.get_key_value(name).await.unwrap();
                let value = kv.get("app").await.unwrap().unwrap();
                format!("{:?}|{:?}", info.config.description, value)
            }
        }
    }
}

/// The SQL that stores the datum (the same on PostgreSQL and MySQL).
fn datum_statements(value: &str) -> [String; 2] {
    [
        "create table datum (v text)".to_string(),
        format!("insert into datum values ('{value}')"),
    ]
}

async fn sql_datastore(env: &Env, driver: &str, endpoint: String, secret: &str) -> String {
    let name = support::unique("ds-sql");
    env.datastore(
        &name,
        json!({"driver": driver, "endpoints": [endpoint],
               "basicAuth": {"username": env.sref(secret, "username"), "password": env.sref(secret, "password")}}),
    )
    .await
}

/// etcdctl with tenant `tcp`'s certificate, and its schema.
async fn etcd_tenant(env: &Env, etcd: &LocalEtcd, tcp: &str) -> (localenv::etcd::Etcdctl, String) {
    let cert = env.secret_data(&format!("{tcp}-datastore-certificate")).await;
    let config = env.secret_data(&format!("{tcp}-datastore-config")).await;
    let ctl = etcd
        .etcdctl(&CertKey {
            cert_pem: cert["server.crt"].clone(),
            key_pem: cert["server.key"].clone(),
        })
        .unwrap();
    (ctl, config["DB_SCHEMA"].clone())
}

/// A URL with tenant `tcp`'s credentials from its config Secret.
async fn sql_url(env: &Env, scheme: &str, tcp: &str) -> String {
    let c = env.secret_data(&format!("{tcp}-datastore-config")).await;
    format!(
        "{scheme}://{}:{}@{}/{}",
        c["DB_USER"], c["DB_PASSWORD"], c["DB_CONNECTION_STRING"], c["DB_SCHEMA"]
    )
}

/// Creates TenantControlPlane `name` on `ds` with the given `dataStoreSchema`/`dataStoreUsername`.
async fn tcp(
    env: &Env,
    name: &str,
    ds: &str,
    schema: Option<&str>,
    user: Option<&str>,
) -> TenantControlPlane {
    let mut tcp = tenantplane_testkit::tcp(&env.ns, name).datastore(ds);
    if let Some(schema) = schema {
        tcp = tcp.schema(schema);
    }
    if let Some(user) = user {
        tcp = tcp.username(user);
    }
    let tcp = tcp.build();
    env.tcps().create(&PostParams::default(), &tcp).await.unwrap()
}

/// Waits for `DataStoreReady=False` with `reason` on `name`, checks its message names `needle`, that
/// a Warning Event says so, and that no datastore credentials were written for it.
async fn refused(env: &Env, name: &str, reason: &str, needle: &str) {
    let (_, condition) = env.tcp_condition(name, "DataStoreReady", "False").await;
    assert_eq!(condition.reason, reason, "{}", condition.message);
    assert!(condition.message.contains(needle), "{}", condition.message);
    assert!(
        !condition.message.contains("/victim"),
        "names the victim: {}",
        condition.message
    );
    let event = wait_for_event(&env.client, &env.ns, name, reason).await;
    assert!(event.note.unwrap_or_default().contains(needle));
    let secrets: Api<Secret> = env.secrets();
    for suffix in ["datastore-config", "datastore-certificate"] {
        assert!(
            secrets
                .get_opt(&format!("{name}-{suffix}"))
                .await
                .unwrap()
                .is_none(),
            "{name}-{suffix}"
        );
    }
}

/// The victim: provisioned on `ds` with its default names (its UID), holding a datum.
async fn victim(env: &Env, backend: &Backend, ds: &str) -> String {
    let uid = tcp(env, "victim", ds, None, None).await.uid().unwrap();
    env.provisioned("victim").await;
    backend.write(env, "victim", "victims-datum").await;
    uid
}

/// A second TCP claiming the victim's schema, its user, or both, each deleted again.
async fn claims(env: &Env, backend: &Backend, ds: &str, uid: &str) {
    // The refusal names no other tenant's TenantControlPlane.
    let owner = "belongs to another TenantControlPlane".to_string();
    let attacks: [(&str, Option<&str>, Option<&str>); 3] = [
        ("thief-schema", Some(uid), None),
        ("thief-user", None, Some(uid)),
        ("thief-both", Some(uid), Some(uid)),
    ];
    for (thief, schema, user) in attacks {
        let thief_uid = tcp(env, thief, ds, schema, user).await.uid().unwrap();
        refused(env, thief, "DataStoreNameTaken", &owner).await;
        env.delete_tcp_and_wait(thief).await;
        assert_eq!(
            backend.read(env, "victim").await,
            "victims-datum",
            "after {thief}"
        );
        // What the refused provisioning claimed of its own (its UID's names) is gone with it.
        assert_eq!(backend.traces(&thief_uid).await, "", "{thief} left traces");
    }
}

/// The DataStore's admin user as a tenant user, and an unmarked pre-existing name.
async fn strangers(env: &Env, backend: &Backend, ds: &str) {
    if !matches!(backend, Backend::Nats(_)) {
        let admin = backend.admin_user();
        tcp(env, "as-admin", ds, Some(&support::unique("own")), Some(&admin)).await;
        refused(env, "as-admin", "TenantNameInvalid", &format!("{admin:?}")).await;
        env.delete_tcp_and_wait("as-admin").await;
    }
    let name = support::unique("legacy");
    backend.create_unmarked(&name).await;
    let before = backend.snapshot(&name).await;
    tcp(env, "adopter", ds, Some(&name), Some(&name)).await;
    refused(env, "adopter", "DataStoreForeignObject", &format!("{name:?}")).await;
    env.delete_tcp_and_wait("adopter").await;
    assert_eq!(
        backend.snapshot(&name).await,
        before,
        "the unmarked {name} was touched"
    );
}

/// A thief provisioned with its own names patches `status.storage.setup` to the victim's, then is
/// deleted: cleanup follows the controller's served record, not status. The thief's own space goes,
/// the victim's names are not even tried (no `DataStoreNamesLeftAlone`), and its datum stays.
async fn patched_status(env: &Env, backend: &Backend, ds: &str, uid: &str) {
    let forger_uid = tcp(env, "forger", ds, None, None).await.uid().unwrap();
    env.provisioned("forger").await;
    assert_ne!(backend.traces(&forger_uid).await, "", "the forger holds no space");
    let patch = json!({"status": {"storage": {"setup": {"schema": uid, "user": uid}}}});
    env.tcps()
        .patch_status("forger", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    env.delete_tcp_and_wait("forger").await;
    assert_eq!(
        backend.traces(&forger_uid).await,
        "",
        "the forger's own space leaked"
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let left_alone: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("forger"))
        .filter(|e| e.reason.as_deref() == Some("DataStoreNamesLeftAlone"))
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(
        left_alone,
        Vec::<String>::new(),
        "cleanup tried the names status forged"
    );
    assert_ne!(backend.traces(uid).await, "", "the victim's names went");
    assert_eq!(backend.read(env, "victim").await, "victims-datum");
}

/// Every attack against a victim on one freshly made DataStore of `backend`.
async fn attack_matrix(prefix: &str, backend: Backend) {
    let env = env(prefix).await;
    let ds = backend.datastore(&env).await;
    let uid = victim(&env, &backend, &ds).await;
    if matches!(backend, Backend::Nats(_)) {
        // A NATS DataStore serves one tenant: any second one is refused before names matter.
        tcp(&env, "thief-schema", &ds, Some(&uid), None).await;
        let (_, c) = env
            .tcp_condition("thief-schema", "DataStoreExclusive", "False")
            .await;
        assert!(
            c.message.contains("already serves another TenantControlPlane"),
            "{}",
            c.message
        );
        assert!(!c.message.contains("victim"), "{}", c.message);
        env.delete_tcp_and_wait("thief-schema").await;
    } else {
        claims(&env, &backend, &ds, &uid).await;
        strangers(&env, &backend, &ds).await;
        patched_status(&env, &backend, &ds, &uid).await;
    }
    assert_eq!(backend.read(&env, "victim").await, "victims-datum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_matrix_etcd_victim_keeps_its_data_and_every_attacker_gets_a_condition() {
    let ca = Ca::new("attack-etcd-ca").unwrap();
    attack_matrix(
        "atk-etcd",
        Backend::Etcd(Box::new(tls_etcd("atk-etcd", &ca).await)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_matrix_postgres_victim_keeps_its_data_and_every_attacker_gets_a_condition() {
    attack_matrix("atk-pg", Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_matrix_mariadb_victim_keeps_its_data_and_every_attacker_gets_a_condition() {
    attack_matrix("atk-my", Backend::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_matrix_nats_victim_keeps_its_bucket_against_a_second_tenant_and_an_unmarked_bucket_is_not_adopted()
 {
    let nats = LocalNats::start(localenv::scratch_dir("atk-nats").unwrap())
        .await
        .unwrap();
    let backend = Backend::Nats(nats);
    attack_matrix("atk-nats", backend).await;
    // An unmarked kine bucket on a NATS DataStore of its own is never adopted.
    let nats = LocalNats::start(localenv::scratch_dir("atk-nats2").unwrap())
        .await
        .unwrap();
    let backend = Backend::Nats(nats);
    let env = env("atk-nats2").await;
    let ds = backend.datastore(&env).await;
    strangers(&env, &backend, &ds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_matrix_mysql_underscore_in_a_schema_does_not_reach_the_database_it_matches_as_a_wildcard() {
    let env = env("atk-wild").await;
    let backend = Backend::MariaDb;
    let ds = backend.datastore(&env).await;
    let suffix = support::unique("w");
    let (victim_schema, thief_schema) = (format!("abxc{suffix}"), format!("ab_c{suffix}"));
    tcp(&env, "victim", &ds, Some(&victim_schema), None).await;
    env.provisioned("victim").await;
    backend.write(&env, "victim", "victims-datum").await;
    tcp(&env, "wild", &ds, Some(&thief_schema), None).await;
    env.provisioned("wild").await;
    // The thief's own credentials, pointed at the victim's database: denied.
    let url = sql_url(&env, "mysql", "wild")
        .await
        .replace(&thief_schema, &victim_schema);
    let err = MySqlConnection::connect(&url).await.unwrap_err();
    assert!(err.to_string().contains("Access denied"), "{err}");
    let config = env.secret_data("wild-datastore-config").await;
    let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
        .await
        .unwrap();
    let grants: Vec<String> = sqlx::query_scalar("select cast(Db as char) from mysql.db where User = ?")
        .bind(&config["DB_USER"])
        .fetch_all(&mut admin)
        .await
        .unwrap();
    assert_eq!(grants, vec![format!("ab\\_c{suffix}")]);
    assert_eq!(backend.read(&env, "victim").await, "victims-datum");
}

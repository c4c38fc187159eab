//! The kine SQL movers against real PostgreSQL and MariaDB with real kine.
//!
//! Each test provisions a source and a target tenant with the real drivers on the shared server and
//! writes through a kine on the source. The full move runs a concurrent writer (updates and creates)
//! and a real kine compaction, migrates, reads every key through a kine started on the target, and
//! removes the source while the writer's last write sleeps in the freeze. The other tests look at the
//! freeze itself: writes block (and are not stored) while reads answer, the freeze outlives the
//! mover's connections, the tenant cannot lift it, thawing lets the blocked writes through, and a
//! write blocked when the source is removed is never acknowledged.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use etcd_client::{Client, Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, TxnResponse};
use futures::{StreamExt as _, stream};
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane::{
    datastore::{
        Driver as _, SqlCredentials, SqlSettings, TenantSpace,
        migrate::{
            Checkpoint, Mover, Step,
            sql::{KineMover, KineSpace},
        },
        mysql::MySqlDriver,
        postgres::PostgresDriver,
    },
    k8s::crd,
};
use tenantplane_devenv::localenv::{self, kine::LocalKine};
use tokio::task::JoinHandle;

use crate::{datastore, support};

/// Keys written before the migration starts.
const SEEDED: usize = 3000;

/// Every `UPDATED`th seeded key is updated once, every `DELETED`th deleted.
const UPDATED: usize = 10;
const DELETED: usize = 50;

/// The key that is created, deleted, compacted away and created again.
const AGAIN: &str = "/registry/configmaps/default/again";

/// Keys the concurrent writer updates.
const WRITER_KEYS: usize = 200;

/// How long a write on the frozen source must stay unanswered, once it sleeps in the freeze.
const BLOCKED_FOR: Duration = Duration::from_secs(2);

/// The cap of a wait for an event (a write reaching the freeze's trigger, a session ending): only a wait
/// for something that never happens reaches it.
const EVENT: Duration = Duration::from_secs(60);

/// How long a read on the frozen source, or a write after a thaw, may take: only a hang reaches it (a
/// frozen write waits until the thaw, far longer).
const ANSWER: Duration = Duration::from_secs(30);

/// The DataStore timeout of the movers whose freeze is timed: a freeze that waits for the writes asleep
/// in it gives up only after this long, so "prompt" is judged against it, not against the machine.
const FREEZE_WAIT: Duration = Duration::from_secs(60);

/// One row of kine's table, as both backends return it.
type Row = (
    i64,
    Option<String>,
    Option<i32>,
    Option<i32>,
    Option<i64>,
    Option<i64>,
    Option<i32>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

/// The writes a writer had acknowledged: each key's last acknowledged value and its revision.
type Acked = BTreeMap<String, (String, i64)>;

#[derive(Clone, Copy, Debug)]
enum Backend {
    Postgres,
    MariaDb,
}

/// A provisioned tenant space and its credentials.
struct Space {
    tenant: TenantSpace,
    creds: SqlCredentials,
}

impl Backend {
    fn kind(self) -> crd::Driver {
        match self {
            Backend::Postgres => crd::Driver::PostgreSQL,
            Backend::MariaDb => crd::Driver::MySQL,
        }
    }

    fn settings(self) -> SqlSettings {
        match self {
            Backend::Postgres => datastore::pg_settings(),
            Backend::MariaDb => datastore::mysql_settings(),
        }
    }

    async fn provision(self, prefix: &str) -> Space {
        let name = support::unique(prefix);
        let tenant = TenantSpace::new(&name, &name, datastore::owner()).unwrap();
        let creds = match self {
            Backend::Postgres => PostgresDriver::new(self.settings())
                .unwrap()
                .provision(&tenant)
                .await
                .unwrap(),
            Backend::MariaDb => MySqlDriver::new(self.settings())
                .unwrap()
                .provision(&tenant)
                .await
                .unwrap(),
        };
        Space {
            tenant,
            creds: datastore::sql_creds(creds),
        }
    }

    /// Removes the space with the real driver's `deprovision`, as the controller does after the switch.
    async fn deprovision(self, space: &Space) {
        let outcome = match self {
            Backend::Postgres => PostgresDriver::new(self.settings())
                .unwrap()
                .deprovision(&space.tenant)
                .await
                .unwrap(),
            Backend::MariaDb => MySqlDriver::new(self.settings())
                .unwrap()
                .deprovision(&space.tenant)
                .await
                .unwrap(),
        };
        assert!(outcome.left_alone.is_empty(), "{:?}", outcome.left_alone);
    }

    fn kine_dsn(self, space: &Space) -> String {
        let c = &space.creds;
        match self {
            Backend::Postgres => datastore::pg_url(c, &c.database),
            Backend::MariaDb => format!(
                "mysql://{}:{}@tcp({})/{}",
                c.user,
                c.password.expose(),
                c.endpoint,
                c.database
            ),
        }
    }

    async fn kine(self, space: &Space, what: &str) -> (LocalKine, Client) {
        let kine = LocalKine::start(localenv::scratch_dir(what).unwrap(), &self.kine_dsn(space))
            .await
            .unwrap();
        let client = Client::connect([kine.url()], None).await.unwrap();
        (kine, client)
    }

    /// Every row of the space's kine table, in id order, read with the tenant's own credentials.
    async fn rows(self, space: &Space) -> Vec<Row> {
        let c = &space.creds;
        match self {
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&datastore::pg_url(c, &c.database))
                    .await
                    .unwrap();
                sqlx::query_as(
                    "select id, name, created, deleted, create_revision, prev_revision, lease, value, \
                     old_value from kine order by id",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap()
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&datastore::mysql_url(c, &c.database))
                    .await
                    .unwrap();
                sqlx::query_as(
                    "select cast(id as signed), name, created, deleted, cast(create_revision as signed), \
                     cast(prev_revision as signed), lease, value, old_value from kine order by id",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap()
            }
        }
    }

    /// The names of the space's kine rows.
    async fn names(self, space: &Space) -> BTreeSet<String> {
        self.rows(space).await.into_iter().filter_map(|r| r.1).collect()
    }

    /// What of the freeze exists for the space, as the admin sees it: the flag (PostgreSQL: the
    /// schema in the tenant's database; MariaDB: the table in the admin database) and the triggers.
    async fn freeze_objects(self, space: &Space) -> Vec<String> {
        let db = &space.creds.database;
        match self {
            Backend::Postgres => {
                let exists: bool =
                    sqlx::query_scalar("select exists (select from pg_database where datname = $1)")
                        .bind(db)
                        .fetch_one(&mut pg_admin("postgres").await)
                        .await
                        .unwrap();
                if !exists {
                    return Vec::new();
                }
                let mut admin = pg_admin(db).await;
                sqlx::query_scalar(
                    "select 'schema ' || nspname from pg_namespace where nspname = 'tenantplane_freeze' \
                     union all select 'trigger ' || tgname from pg_trigger \
                     where tgrelid = to_regclass('public.kine') and not tgisinternal order by 1",
                )
                .fetch_all(&mut admin)
                .await
                .unwrap()
            }
            Backend::MariaDb => {
                let mut admin = mysql_admin().await;
                sqlx::query_scalar(
                    "select concat('flag ', table_schema, '.', table_name) from information_schema.tables \
                     where table_schema = 'tenantplane_freeze' and table_name = ? \
                     union all select concat('trigger ', trigger_name) from information_schema.triggers \
                     where trigger_schema = ? order by 1",
                )
                .bind(db)
                .bind(db)
                .fetch_all(&mut admin)
                .await
                .unwrap()
            }
        }
    }

    /// Waits until a look finds no session of the DataStore's admin in the tenant's database but the
    /// tenant's writes sleeping in the freeze (MariaDB shows a trigger's definer as a sleeping session's
    /// user, and a sleeper is briefly not in `User sleep` between two sleeps, for longer on a loaded
    /// machine); a session that holds the freeze is there at every look.
    async fn until_no_admin_session(self, space: &Space) {
        support::eventually("no admin session in the tenant's database", EVENT, || async {
            (self.admin_sessions_now(space).await == 0).then_some(())
        })
        .await;
    }

    /// Waits until at least `n` of the tenant's writes sleep in the freeze (PostgreSQL: in `pg_sleep`;
    /// MariaDB: `User sleep`): on a loaded machine a write may take long to reach the trigger.
    async fn until_asleep(self, space: &Space, n: i64) {
        support::eventually(&format!("{n} writes asleep in the freeze"), EVENT, || async {
            (self.asleep_now(space).await >= n).then_some(())
        })
        .await;
    }

    /// The tenant's writes sleeping in the freeze at this moment.
    async fn asleep_now(self, space: &Space) -> i64 {
        let db = &space.creds.database;
        match self {
            Backend::Postgres => sqlx::query_scalar::<_, i64>(
                "select count(*) from pg_stat_activity where datname = $1 and wait_event = 'PgSleep'",
            )
            .bind(db)
            .fetch_one(&mut pg_admin("postgres").await)
            .await
            .unwrap(),
            Backend::MariaDb => sqlx::query_scalar::<_, i64>(
                "select count(*) from information_schema.processlist where db = ? and state = 'User sleep'",
            )
            .bind(db)
            .fetch_one(&mut mysql_admin().await)
            .await
            .unwrap(),
        }
    }

    async fn admin_sessions_now(self, space: &Space) -> i64 {
        let db = &space.creds.database;
        match self {
            Backend::Postgres => {
                let mut admin = pg_admin("postgres").await;
                sqlx::query_scalar(
                    "select count(*) from pg_stat_activity where datname = $1 and usename = current_user \
                     and pid <> pg_backend_pid()",
                )
                .bind(db)
                .fetch_one(&mut admin)
                .await
                .unwrap()
            }
            Backend::MariaDb => {
                let mut admin = mysql_admin().await;
                sqlx::query_scalar(
                    "select count(*) from information_schema.processlist where db = ? and user = 'root' \
                     and coalesce(state, '') <> 'User sleep' and id <> connection_id()",
                )
                .bind(db)
                .fetch_one(&mut admin)
                .await
                .unwrap()
            }
        }
    }

    /// Every way the tenant's own credentials could lift the freeze without DDL on its table fails.
    async fn tenant_cannot_lift_the_freeze(self, space: &Space) {
        let c = &space.creds;
        let db = &c.database;
        match self {
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&datastore::pg_url(c, db)).await.unwrap();
                for statement in [
                    "update tenantplane_freeze.flag set frozen = false",
                    "delete from tenantplane_freeze.flag",
                    "drop schema tenantplane_freeze cascade",
                    "set session_replication_role = replica",
                ] {
                    let err = sqlx::query(statement).execute(&mut conn).await.unwrap_err();
                    assert!(
                        err.to_string().contains("permission denied")
                            || err.to_string().contains("must be owner"),
                        "{statement}: {err}"
                    );
                }
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&datastore::mysql_url(c, db))
                    .await
                    .unwrap();
                for statement in [
                    format!("drop table `tenantplane_freeze`.`{db}`"),
                    format!("rename table `tenantplane_freeze`.`{db}` to `{db}`.`gone`"),
                    "drop trigger tenantplane_freeze_insert".to_string(),
                ] {
                    let err = sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
                        .execute(&mut conn)
                        .await
                        .unwrap_err();
                    assert!(err.to_string().contains("denied"), "{statement}: {err}");
                }
            }
        }
    }
}

/// An admin connection to `database` on the shared PostgreSQL.
async fn pg_admin(database: &str) -> PgConnection {
    let mut url = reqwest::Url::parse(&support::postgres().admin_url()).unwrap();
    url.set_path(database);
    PgConnection::connect(url.as_str()).await.unwrap()
}

async fn mysql_admin() -> MySqlConnection {
    MySqlConnection::connect(&support::mariadb().url_for("mysql"))
        .await
        .unwrap()
}

fn key(i: usize) -> String {
    format!("/registry/configmaps/default/cm-{i:05}")
}

/// Writes the seeded keys (32 at a time), updates and deletes some, and creates and deletes [`AGAIN`].
async fn seed(client: &Client) {
    let puts = stream::iter(0..SEEDED).map(|i| {
        let mut kv = client.kv_client();
        async move { kv.put(key(i), format!("value {i} ").repeat(8), None).await }
    });
    let done: Vec<_> = puts.buffer_unordered(32).collect().await;
    assert!(done.iter().all(Result::is_ok));
    let mut kv = client.kv_client();
    for i in (0..SEEDED).step_by(UPDATED) {
        kv.put(key(i), format!("updated {i}"), None).await.unwrap();
    }
    for i in (0..SEEDED).step_by(DELETED) {
        delete(&mut kv, &key(i)).await;
    }
    kv.put(AGAIN, "first life", None).await.unwrap();
    delete(&mut kv, AGAIN).await;
    for n in 0..WRITER_KEYS {
        kv.put(lease(n), "created", None).await.unwrap();
    }
}

/// Deletes `key` as kube-apiserver does (kine serves no plain DeleteRange): a txn comparing its revision.
async fn delete(kv: &mut KvClient, key: &str) {
    let revision = kv.get(key, None).await.unwrap().kvs()[0].mod_revision();
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
        .or_else([TxnOp::get(key, None)]);
    assert!(kv.txn(txn).await.unwrap().succeeded());
}

/// Creates `key` as kube-apiserver does: a txn that puts it if it has no revision yet.
async fn create(kv: &mut KvClient, key: &str, value: &str) -> Result<TxnResponse, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, value, None)]);
    kv.txn(txn).await
}

/// A create of `key` through `client` running on its own task.
fn spawn_create(client: &Client, key: &'static str) -> JoinHandle<Result<TxnResponse, etcd_client::Error>> {
    let mut kv = client.kv_client();
    tokio::spawn(async move { create(&mut kv, key, "created in the freeze").await })
}

/// The writer's 200 keys, created by [`seed`].
fn lease(n: usize) -> String {
    format!("/registry/leases/default/w-{:03}", n % WRITER_KEYS)
}

/// A writer through kine until `stop`: it updates its keys in turn and creates a new key every tenth
/// write; returns what was acknowledged.
fn writer(client: &Client, stop: Arc<AtomicBool>) -> JoinHandle<Acked> {
    let mut kv = client.kv_client();
    tokio::spawn(async move {
        let mut acked = Acked::new();
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let value = format!("write {n}");
            if n.is_multiple_of(10) {
                let key = format!("/registry/pods/default/new-{n:06}");
                if let Ok(response) = create(&mut kv, &key, &value).await
                    && response.succeeded()
                {
                    acked.insert(key, (value, response.header().unwrap().revision()));
                }
            } else if let Ok(response) = kv.put(lease(n), value.clone(), None).await {
                acked.insert(lease(n), (value, response.header().unwrap().revision()));
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        acked
    })
}

/// Every key under `/` through `client`: (key, value, create_revision, mod_revision), and the revision.
async fn everything(client: &Client) -> (Vec<(String, Vec<u8>, i64, i64)>, i64) {
    let response = client
        .kv_client()
        .get("/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let kvs = response
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                kv.value().to_vec(),
                kv.create_revision(),
                kv.mod_revision(),
            )
        })
        .collect();
    (kvs, response.header().unwrap().revision())
}

fn mover(backend: Backend, source: &Space, target: &Space) -> KineMover {
    let space = |s: &Space| KineSpace {
        settings: backend.settings(),
        tenant: s.tenant.clone(),
    };
    KineMover::new(backend.kind(), space(source), space(target)).unwrap()
}

/// A [`mover`] whose DataStore timeout (the freeze's wait among its operations) is [`FREEZE_WAIT`].
fn patient_mover(backend: Backend, source: &Space, target: &Space) -> KineMover {
    let mut settings = backend.settings();
    settings.timeout = FREEZE_WAIT;
    let space = |s: &Space| KineSpace {
        settings: settings.clone(),
        tenant: s.tenant.clone(),
    };
    KineMover::new(backend.kind(), space(source), space(target)).unwrap()
}

/// Copies with one mover, "crashes" after its second page, and finishes with a new mover from the
/// checkpoint saved after the first page (so the second page is written twice).
async fn copy_with_a_crash(backend: Backend, source: &Space, target: &Space) -> Checkpoint {
    let first = mover(backend, source, target);
    let mut checkpoint = Checkpoint::default();
    assert_eq!(first.copy_step(&mut checkpoint).await.unwrap(), Step::More);
    let saved = checkpoint.clone();
    assert_eq!(first.copy_step(&mut checkpoint).await.unwrap(), Step::More);
    drop(first);
    let second = mover(backend, source, target);
    let mut checkpoint = saved;
    let mut steps = 0;
    while second.copy_step(&mut checkpoint).await.unwrap() == Step::More {
        steps += 1;
        assert!(steps < 100, "copying does not end");
    }
    let snapshot = checkpoint.snapshot_revision;
    assert_eq!(checkpoint.cursor, Some(snapshot.to_string()));
    assert_eq!(checkpoint.applied_through, snapshot);
    // Every row was counted once although a page was written twice, and none is above the snapshot.
    let copied = backend.rows(target).await;
    assert_eq!(checkpoint.copied, copied.len() as u64);
    assert!(copied.iter().all(|r| r.0 <= snapshot));
    checkpoint
}

/// Compacts the source through kine (it keeps the last 1000 revisions), after writing enough that the
/// first life of [`AGAIN`] is compacted away, then creates [`AGAIN`] again.
async fn compact_and_recreate(client: &Client) {
    let mut kv = client.kv_client();
    for i in 0..1300 {
        kv.put("/registry/events/default/churn", format!("{i}"), None)
            .await
            .unwrap();
    }
    // kine refuses a revision above the one it has cached, which concurrent writes may leave behind.
    let revision = kv.get("/", None).await.unwrap().header().unwrap().revision() - 200;
    kv.compact(revision, None).await.unwrap();
    kv.put(AGAIN, "second life", None).await.unwrap();
}

/// Catches up until fewer than 50 rows lag.
async fn catch_up(mover: &KineMover, checkpoint: &mut Checkpoint) {
    let mut lag = u64::MAX;
    for _ in 0..20 {
        lag = mover.catch_up_step(checkpoint).await.unwrap();
        if lag < 50 {
            break;
        }
    }
    assert!(lag < 50, "lag {lag}");
}

/// Freezes with a fresh mover and checks that it returns promptly: well before its own wait
/// ([`FREEZE_WAIT`]) would end, so it did not wait for the writes asleep in the freeze.
async fn freeze_promptly(backend: Backend, source: &Space, target: &Space) {
    let started = Instant::now();
    patient_mover(backend, source, target).freeze().await.unwrap();
    assert!(started.elapsed() < FREEZE_WAIT / 2, "{:?}", started.elapsed());
}

async fn migrates_through_kine(backend: Backend) {
    let (source, target) = (backend.provision("src").await, backend.provision("dst").await);
    let (_source_kine, client) = backend.kine(&source, "kine-mig-src").await;
    seed(&client).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(&client, stop.clone());

    let mut checkpoint = copy_with_a_crash(backend, &source, &target).await;
    let mover = mover(backend, &source, &target);
    compact_and_recreate(&client).await;
    catch_up(&mover, &mut checkpoint).await;
    // Rows compacted on the source stay on the target while catching up.
    let ids = |rows: Vec<Row>| rows.into_iter().map(|r| r.0).collect::<BTreeSet<i64>>();
    let (source_ids, target_ids) = (ids(backend.rows(&source).await), ids(backend.rows(&target).await));
    assert!(!target_ids.is_subset(&source_ids));

    mover.freeze().await.unwrap();
    freeze_promptly(backend, &source, &target).await;
    // The writer's next write sleeps in the freeze: nothing reaches the source any more.
    backend.until_asleep(&source, 1).await;
    let frozen_rows = backend.rows(&source).await;
    tokio::time::sleep(BLOCKED_FOR).await;
    stop.store(true, Ordering::Relaxed);
    assert!(!writes.is_finished());
    assert_eq!(backend.rows(&source).await, frozen_rows);
    let read = client.kv_client().get(key(1), None).await.unwrap();
    assert_eq!(read.kvs()[0].value(), "value 1 ".repeat(8).as_bytes());

    assert_eq!(mover.finish_step(&mut checkpoint).await.unwrap(), Step::Done);
    let source_max = frozen_rows.last().unwrap().0;
    assert_eq!(backend.rows(&target).await, frozen_rows);
    assert_eq!(checkpoint.applied_through, source_max);
    // Every key under / as the source's kine lists them, and compact_rev_key.
    let live = everything(&client).await.0.len() + 1;
    assert!(live > SEEDED - SEEDED / DELETED + WRITER_KEYS);
    let verification = mover.verify().await.unwrap();
    assert_eq!(
        (
            verification.keys,
            verification.mismatch_count,
            verification.mismatches
        ),
        (live as u64, 0, vec![])
    );
    let (_target_kine, target_client) = backend.kine(&target, "kine-mig-dst").await;
    check_target_kine(&client, &target_client, source_max, live - 1).await;

    // The switch: the source goes while the writer's last write sleeps in the freeze.
    backend.deprovision(&source).await;
    let acked = tokio::time::timeout(Duration::from_secs(30), writes)
        .await
        .unwrap()
        .unwrap();
    assert!(acked.len() > WRITER_KEYS / 2, "{}", acked.len());
    assert!(acked.keys().any(|k| k.starts_with("/registry/pods/")));
    every_acknowledged_write_is_on(&target_client, &acked).await;
    assert_eq!(backend.freeze_objects(&target).await, Vec::<String>::new());
    backend.deprovision(&target).await;
}

/// Every key reads the same through a kine on the target, and its first write follows the source's last.
async fn check_target_kine(source: &Client, target: &Client, source_max: i64, keys: usize) {
    let (on_source, source_revision) = everything(source).await;
    let (on_target, target_revision) = everything(target).await;
    assert_eq!(on_source.len(), keys);
    assert_eq!(on_target, on_source);
    assert_eq!((source_revision, target_revision), (source_max, source_max));
    let again = on_target.iter().find(|kv| kv.0 == AGAIN).unwrap();
    assert_eq!(again.1, b"second life");
    let put = target
        .kv_client()
        .put("/registry/configmaps/default/new", "on the target", None)
        .await
        .unwrap();
    assert_eq!(put.header().unwrap().revision(), source_max + 1);
}

/// Each acknowledged key holds its last acknowledged value, at the acknowledged revision.
async fn every_acknowledged_write_is_on(target: &Client, acked: &Acked) {
    let on_target: BTreeMap<String, (String, i64)> = everything(target)
        .await
        .0
        .into_iter()
        .map(|(k, v, _, rev)| (k, (String::from_utf8(v).unwrap(), rev)))
        .collect();
    for (key, value) in acked {
        assert_eq!(on_target.get(key), Some(value), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_kine_moves_with_the_same_revisions_and_every_acknowledged_write() {
    migrates_through_kine(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_kine_moves_with_the_same_revisions_and_every_acknowledged_write() {
    migrates_through_kine(Backend::MariaDb).await;
}

/// A source with a few keys, its kine, a target, and a copy caught up.
async fn small_source(backend: Backend, what: &str) -> (Space, Space, LocalKine, Client, Checkpoint) {
    let (source, target) = (backend.provision("src").await, backend.provision("dst").await);
    let (kine, client) = backend.kine(&source, what).await;
    let mut kv = client.kv_client();
    for i in 0..20 {
        kv.put(key(i), format!("value {i}"), None).await.unwrap();
    }
    let mover = mover(backend, &source, &target);
    let mut checkpoint = Checkpoint::default();
    while mover.copy_step(&mut checkpoint).await.unwrap() == Step::More {}
    catch_up(&mover, &mut checkpoint).await;
    (source, target, kine, client, checkpoint)
}

const BLOCKED: &str = "/registry/configmaps/default/blocked";

async fn frozen_source_blocks_writes_until_thawed(backend: Backend) {
    let (source, target, _kine, client, _) = small_source(backend, "kine-freeze-block").await;
    let first = mover(backend, &source, &target);
    first.freeze().await.unwrap();
    let blocked = spawn_create(&client, BLOCKED);
    let mut kv = client.kv_client();
    let before = kv.get(key(3), None).await.unwrap().kvs()[0].mod_revision();
    let update = {
        let mut kv = client.kv_client();
        tokio::spawn(async move {
            let txn = Txn::new()
                .when([Compare::mod_revision(key(3), CompareOp::Equal, before)])
                .and_then([TxnOp::put(key(3), "updated in the freeze", None)])
                .or_else([TxnOp::get(key(3), None)]);
            kv.txn(txn).await
        })
    };
    backend.until_asleep(&source, 2).await;
    tokio::time::sleep(BLOCKED_FOR).await;
    // Neither write answers nor is stored; reads answer.
    assert!(!blocked.is_finished() && !update.is_finished());
    assert!(!backend.names(&source).await.contains(BLOCKED));
    let read = tokio::time::timeout(ANSWER, kv.get(key(3), None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.kvs()[0].value(), b"value 3");
    let objects = backend.freeze_objects(&source).await;
    assert!(!objects.is_empty());
    backend.tenant_cannot_lift_the_freeze(&source).await;

    // The freeze is in the database: no admin session holds it, and a new mover freezes again.
    drop(first);
    backend.until_no_admin_session(&source).await;
    freeze_promptly(backend, &source, &target).await;
    assert_eq!(backend.freeze_objects(&source).await, objects);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!blocked.is_finished() && !update.is_finished());
    assert!(!backend.names(&source).await.contains(BLOCKED));

    // Thawing lets both through, stored at the revisions they answered, and removes the freeze.
    let second = mover(backend, &source, &target);
    second.thaw().await.unwrap();
    second.thaw().await.unwrap();
    let created = blocked.await.unwrap().unwrap();
    assert!(created.succeeded());
    let updated = update.await.unwrap().unwrap();
    assert!(updated.succeeded());
    let read = kv.get(BLOCKED, None).await.unwrap();
    assert_eq!(read.kvs()[0].value(), b"created in the freeze");
    assert_eq!(read.kvs()[0].mod_revision(), created.header().unwrap().revision());
    let read = kv.get(key(3), None).await.unwrap();
    assert_eq!(read.kvs()[0].value(), b"updated in the freeze");
    assert!(backend.names(&source).await.contains(BLOCKED));
    assert_eq!(backend.freeze_objects(&source).await, Vec::<String>::new());
    let put = kv.put(key(4), "after the thaw", None).await.unwrap();
    let read = kv.get(key(4), None).await.unwrap();
    assert_eq!(read.kvs()[0].mod_revision(), put.header().unwrap().revision());
    backend.deprovision(&source).await;
    backend.deprovision(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_frozen_source_blocks_kine_writes_until_thawed_and_the_tenant_cannot_lift_it() {
    frozen_source_blocks_writes_until_thawed(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_frozen_source_blocks_kine_writes_until_thawed_and_the_tenant_cannot_lift_it() {
    frozen_source_blocks_writes_until_thawed(Backend::MariaDb).await;
}

/// Reads `information_schema.innodb_trx` every 20 ms until `stop`, as another tenant's freeze or a
/// monitor may: InnoDB refills that table's cache only after 100 ms without a read, so it stays as it
/// was. First waits (reading no more often than the cache allows) until it lists session `id`.
async fn innodb_trx_reader(id: i64, seen: Arc<tokio::sync::Notify>, stop: Arc<AtomicBool>) {
    let mut admin = mysql_admin().await;
    let mut listed = false;
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<i64> = sqlx::query_scalar(
            "select cast(trx_mysql_thread_id as signed) from information_schema.innodb_trx",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        if !listed && ids.contains(&id) {
            listed = true;
            seen.notify_one();
        }
        let pause = if listed { 20 } else { 150 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// The freeze sees a tenant transaction end although `information_schema.innodb_trx` is read all the
/// time (its cache then never refills): it waits while the transaction is open, and returns once it
/// has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_freeze_sees_a_tenant_transaction_end_while_innodb_trx_is_read_continuously() {
    let backend = Backend::MariaDb;
    let (source, target) = (backend.provision("src").await, backend.provision("dst").await);
    let c = &source.creds;
    let mut tenant = MySqlConnection::connect(&datastore::mysql_url(c, &c.database))
        .await
        .unwrap();
    sqlx::raw_sql("start transaction with consistent snapshot")
        .execute(&mut tenant)
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar("select cast(connection_id() as signed)")
        .fetch_one(&mut tenant)
        .await
        .unwrap();
    let (seen, stop) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(AtomicBool::new(false)),
    );
    let reader = tokio::spawn(innodb_trx_reader(id, seen.clone(), stop.clone()));
    seen.notified().await;

    let freeze = {
        let mover = mover(backend, &source, &target);
        tokio::spawn(async move { mover.freeze().await })
    };
    while backend.freeze_objects(&source).await.len() < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The tenant's transaction is open: the freeze cannot have returned.
    assert!(!freeze.is_finished());
    sqlx::raw_sql("commit").execute(&mut tenant).await.unwrap();
    let frozen = freeze.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    assert!(frozen.is_ok(), "{frozen:?}");

    mover(backend, &source, &target).thaw().await.unwrap();
    assert_eq!(backend.freeze_objects(&source).await, Vec::<String>::new());
    tenant.close().await.unwrap();
    backend.deprovision(&source).await;
    backend.deprovision(&target).await;
}

async fn blocked_write_dies_with_the_source(backend: Backend) {
    let (source, target, _kine, client, mut checkpoint) =
        small_source(backend, "kine-freeze-deprovision").await;
    let mover = mover(backend, &source, &target);
    mover.freeze().await.unwrap();
    // Several, so that sessions are ended one after another while kine still has others.
    let blocked: Vec<_> = (0..10)
        .map(|i| {
            let mut kv = client.kv_client();
            tokio::spawn(async move { create(&mut kv, &format!("{BLOCKED}-{i}"), "in the freeze").await })
        })
        .collect();
    backend.until_asleep(&source, 10).await;
    assert!(blocked.iter().all(|b| !b.is_finished()));
    assert_eq!(mover.finish_step(&mut checkpoint).await.unwrap(), Step::Done);
    assert!(mover.verify().await.unwrap().equal());

    backend.deprovision(&source).await;
    for create in blocked {
        let answer = tokio::time::timeout(Duration::from_secs(30), create)
            .await
            .unwrap()
            .unwrap();
        assert!(answer.is_err(), "{answer:?}");
    }
    let names = backend.names(&target).await;
    assert!(!names.iter().any(|n| n.starts_with(BLOCKED)), "{names:?}");
    assert_eq!(backend.freeze_objects(&source).await, Vec::<String>::new());
    backend.deprovision(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_write_blocked_in_the_freeze_when_the_source_is_removed_is_never_acknowledged() {
    blocked_write_dies_with_the_source(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_write_blocked_in_the_freeze_when_the_source_is_removed_is_never_acknowledged() {
    blocked_write_dies_with_the_source(Backend::MariaDb).await;
}

/// Ends the sessions sleeping in the freeze, and those only, at the first look that finds one asleep
/// (between two sleeps a sleeper briefly is not, for longer on a loaded machine).
async fn end_sleeping_writes(backend: Backend, space: &Space) {
    let db = &space.creds.database;
    match backend {
        Backend::Postgres => {
            let ended = support::eventually("a write asleep in the freeze", EVENT, || async {
                let ended: Vec<bool> = sqlx::query_scalar(
                    "select pg_terminate_backend(pid) from pg_stat_activity \
                     where datname = $1 and wait_event = 'PgSleep'",
                )
                .bind(db)
                .fetch_all(&mut pg_admin("postgres").await)
                .await
                .unwrap();
                (!ended.is_empty()).then_some(ended)
            })
            .await;
            assert_eq!(ended, [true]);
        }
        Backend::MariaDb => {
            let ids = support::eventually("a write asleep in the freeze", EVENT, || async {
                let ids: Vec<i64> = sqlx::query_scalar(
                    "select cast(id as signed) from information_schema.processlist \
                     where db = ? and state = 'User sleep'",
                )
                .bind(db)
                .fetch_all(&mut mysql_admin().await)
                .await
                .unwrap();
                (!ids.is_empty()).then_some(ids)
            })
            .await;
            assert_eq!(ids.len(), 1);
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("kill connection {}", ids[0])))
                .execute(&mut mysql_admin().await)
                .await
                .unwrap();
        }
    }
}

/// Why removing the source ends the sleeping writes only once reads fail: kine v0.17.5 answers a
/// create whose insert failed as a success when a read then finds no row. If kine stops doing that,
/// this test fails, and the drivers' `deprovision` and the mover's docs can say so.
async fn kine_acknowledges_a_create_whose_session_ended_while_reads_work(backend: Backend) {
    let (source, target, _kine, client, _) = small_source(backend, "kine-freeze-hazard").await;
    mover(backend, &source, &target).freeze().await.unwrap();
    let blocked = spawn_create(&client, BLOCKED);
    backend.until_asleep(&source, 1).await;
    assert!(!blocked.is_finished());
    end_sleeping_writes(backend, &source).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), blocked)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(answer.succeeded());
    assert!(!backend.names(&source).await.contains(BLOCKED));
    mover(backend, &source, &target).thaw().await.unwrap();
    backend.deprovision(&source).await;
    backend.deprovision(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_kine_acknowledges_a_create_whose_session_ended_while_reads_work() {
    kine_acknowledges_a_create_whose_session_ended_while_reads_work(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_kine_acknowledges_a_create_whose_session_ended_while_reads_work() {
    kine_acknowledges_a_create_whose_session_ended_while_reads_work(Backend::MariaDb).await;
}

/// Freezes the source, starts a create that sleeps in the freeze, then seals the source (twice: the
/// seal is idempotent).
async fn sealed_with_a_create_asleep(
    backend: Backend,
    source: &Space,
    target: &Space,
    client: &Client,
) -> (KineMover, JoinHandle<Result<TxnResponse, etcd_client::Error>>) {
    let mover = mover(backend, source, target);
    mover.freeze().await.unwrap();
    let blocked = spawn_create(client, BLOCKED);
    backend.until_asleep(source, 1).await;
    assert!(!blocked.is_finished());
    mover.seal().await.unwrap();
    mover.seal().await.unwrap();
    (mover, blocked)
}

/// Thaws the sealed source, then checks that the blocked create left no row and that kine reads and
/// writes again (with the revision it answered); removes both spaces.
async fn thawed_source_serves_again(
    backend: Backend,
    mover: &KineMover,
    kv: &mut KvClient,
    source: Space,
    target: Space,
) {
    mover.thaw().await.unwrap();
    let names = backend.names(&source).await;
    assert!(!names.iter().any(|n| n.starts_with(BLOCKED)), "{names:?}");
    let read = kv.get(key(3), None).await.unwrap();
    assert_eq!(read.kvs()[0].value(), b"value 3");
    let put = kv.put(key(4), "after the thaw", None).await.unwrap();
    let read = kv.get(key(4), None).await.unwrap();
    assert_eq!(read.kvs()[0].mod_revision(), put.header().unwrap().revision());
    backend.deprovision(&source).await;
    backend.deprovision(&target).await;
}

/// The fix for the hazard above: once sealed, a PostgreSQL source fails the tenant's reads too, so a
/// write that ends while frozen is answered with an error, never acknowledged; a thaw undoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_sealed_source_never_acknowledges_a_create_whose_session_ended() {
    let backend = Backend::Postgres;
    let (source, target, _kine, client, _) = small_source(backend, "kine-freeze-sealed").await;
    let (mover, blocked) = sealed_with_a_create_asleep(backend, &source, &target, &client).await;
    // Reads and new writes fail at once; the sleeping write keeps sleeping.
    let mut kv = client.kv_client();
    assert!(kv.get(key(3), None).await.is_err());
    let after = format!("{BLOCKED}-after");
    assert!(create(&mut kv, &after, "sealed").await.is_err());
    assert!(!blocked.is_finished());

    end_sleeping_writes(backend, &source).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), blocked)
        .await
        .unwrap()
        .unwrap();
    assert!(answer.is_err(), "{answer:?}");

    // The helpers read as the tenant: only after the thaw.
    thawed_source_serves_again(backend, &mover, &mut kv, source, target).await;
}

/// The fix on MariaDB, where a database grant is checked only when a session connects: the seal
/// revokes it and kills the tenant's sessions behind a table lock that holds new reads back. The blocked
/// create is answered with an error, reads and new writes fail, the tenant cannot log in, and a thaw
/// gives everything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_sealed_source_ends_the_blocked_create_with_an_error_and_turns_the_tenant_away() {
    let backend = Backend::MariaDb;
    let (source, target, _kine, client, _) = small_source(backend, "kine-freeze-sealed-my").await;
    let (mover, blocked) = sealed_with_a_create_asleep(backend, &source, &target, &client).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), blocked)
        .await
        .expect("the seal ends the write asleep in the freeze")
        .unwrap();
    assert!(answer.is_err(), "{answer:?}");
    let mut kv = client.kv_client();
    assert!(kv.get(key(3), None).await.is_err());
    let after = format!("{BLOCKED}-after");
    assert!(create(&mut kv, &after, "sealed").await.is_err());
    let c = &source.creds;
    let login = MySqlConnection::connect(&datastore::mysql_url(c, &c.database)).await;
    let refused = login.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("Access denied"), "{refused}");

    thawed_source_serves_again(backend, &mover, &mut kv, source, target).await;
}

/// Clears the flag only, as a thaw interrupted before it removed the triggers leaves the source.
async fn clear_the_flag_only(backend: Backend, space: &Space) {
    let db = &space.creds.database;
    match backend {
        Backend::Postgres => {
            sqlx::query("update tenantplane_freeze.flag set frozen = false")
                .execute(&mut pg_admin(db).await)
                .await
                .unwrap();
        }
        Backend::MariaDb => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "drop table `tenantplane_freeze`.`{db}`"
            )))
            .execute(&mut mysql_admin().await)
            .await
            .unwrap();
        }
    }
}

/// A transaction of the tenant that has written a row to `kine` and is still open.
enum OpenWrite {
    Pg(PgConnection),
    My(MySqlConnection),
}

impl OpenWrite {
    /// Begins a transaction with the tenant's credentials and inserts a row named `name`.
    async fn begin(backend: Backend, space: &Space, name: &str) -> Self {
        let (c, db) = (&space.creds, &space.creds.database);
        let insert =
            "insert into kine (name, created, deleted, create_revision, prev_revision, lease, value) \
                      values ('NAME', 1, 0, 0, 0, 0, 'direct')"
                .replace("NAME", name);
        match backend {
            Backend::Postgres => {
                let mut conn = PgConnection::connect(&datastore::pg_url(c, db)).await.unwrap();
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("begin; {insert}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                OpenWrite::Pg(conn)
            }
            Backend::MariaDb => {
                let mut conn = MySqlConnection::connect(&datastore::mysql_url(c, db))
                    .await
                    .unwrap();
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("begin; {insert}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                OpenWrite::My(conn)
            }
        }
    }

    async fn commit(self) {
        match self {
            OpenWrite::Pg(mut conn) => {
                sqlx::raw_sql("commit").execute(&mut conn).await.unwrap();
            }
            OpenWrite::My(mut conn) => {
                sqlx::raw_sql("commit").execute(&mut conn).await.unwrap();
            }
        }
    }
}

/// A freeze does not return while a write that did not sleep can still commit: it waits for an
/// open transaction that wrote, and returns once it has committed.
async fn freeze_waits_for(backend: Backend, source: &Space, target: &Space, name: &'static str) {
    let open = OpenWrite::begin(backend, source, name).await;
    let freeze = {
        let mover = patient_mover(backend, source, target);
        tokio::spawn(async move { mover.freeze().await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!freeze.is_finished());
    assert!(!backend.names(source).await.contains(name));
    open.commit().await;
    // Only ends a hang: a freeze that never sees the commit gives up by itself at FREEZE_WAIT.
    tokio::time::timeout(FREEZE_WAIT + ANSWER, freeze)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(backend.names(source).await.contains(name));
}

/// The barrier of a first freeze (creating the triggers) and of one over the triggers an interrupted
/// thaw left (writes passed while the flag was clear): both wait for the writes that did not sleep.
async fn freeze_waits_for_writes_in_flight(backend: Backend) {
    let (source, target, _kine, client, _) = small_source(backend, "kine-freeze-barrier").await;
    freeze_waits_for(backend, &source, &target, "/registry/direct/first").await;
    let blocked = spawn_create(&client, BLOCKED);
    backend.until_asleep(&source, 1).await;
    assert!(!blocked.is_finished());

    clear_the_flag_only(backend, &source).await;
    let created = tokio::time::timeout(ANSWER, blocked)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(created.succeeded());
    freeze_waits_for(backend, &source, &target, "/registry/direct/again").await;
    let blocked = spawn_create(&client, "/registry/configmaps/default/blocked-again");
    backend.until_asleep(&source, 1).await;
    assert!(!blocked.is_finished());

    mover(backend, &source, &target).thaw().await.unwrap();
    let created = tokio::time::timeout(ANSWER, blocked)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(created.succeeded());
    assert_eq!(backend.freeze_objects(&source).await, Vec::<String>::new());
    backend.deprovision(&source).await;
    backend.deprovision(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_freeze_returns_only_once_the_writes_in_flight_have_ended() {
    freeze_waits_for_writes_in_flight(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_freeze_returns_only_once_the_writes_in_flight_have_ended() {
    freeze_waits_for_writes_in_flight(Backend::MariaDb).await;
}

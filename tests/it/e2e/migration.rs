//! Live migration between DataStores (issue 21) on the real stack: a serving tenant with thousands of
//! ConfigMaps (and Events on an override) moves to another DataStore of its driver while a client
//! writes 20 objects a second and an informer watches. Afterwards every object is on the target with
//! its content, nothing of the tenant is left on the source, the informer's cache equals a fresh
//! list, and the writer only saw errors while writes were frozen.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt as _,
    api::{ListParams, PostParams},
    runtime::{WatchStreamExt as _, reflector, watcher},
};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tenantplane::k8s::crd::{MigrationStage, MigrationStatus, TenantControlPlane};

use sqlx::{Connection as _, MySqlConnection, PgConnection};
use tenantplane_devenv::localenv::{self, etcd::LocalEtcd, mariadb::LocalMariaDb, postgres::LocalPostgres};

use super::{
    Stack, connected, etcd::schema, etcd_keys, etcds, namespace_and_event, stack_with_controller_process,
};
use crate::support::eventually;

/// ConfigMaps written before the migration.
const OBJECTS: usize = 10_000;

/// The namespace the load lives in.
const LOAD: &str = "load";

/// How long the writer waits for one create: kube-apiserver's own request timeout, so that only a write
/// the product left hanging ends without an answer, however slow the machine.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// When each stage of the migration was first seen.
type Stages = Arc<Mutex<Vec<(Instant, MigrationStage)>>>;

/// What the writer saw, one entry per write.
type Writes = Arc<WriteLog>;

/// The writes that ended, and how many are still waiting for an answer.
#[derive(Default)]
struct WriteLog {
    ended: Mutex<Vec<Write>>,
    in_flight: AtomicUsize,
}

impl WriteLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Write>> {
        self.ended.lock().unwrap()
    }

    /// Waits until every write sent has been answered or given up on (at most its [`WRITE_TIMEOUT`]).
    async fn settled(&self) {
        let deadline = Instant::now() + WRITE_TIMEOUT + Duration::from_secs(15);
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.in_flight.load(Ordering::SeqCst), 0, "writes still in flight");
    }
}

/// One create of the writer: when it was sent and answered, and how it ended.
struct Write {
    sent: Instant,
    ended: Instant,
    name: String,
    outcome: WriteOutcome,
}

/// How a write ended, as far as the client can know.
enum WriteOutcome {
    /// The API answered success: the object must exist.
    Stored,
    /// The API answered a 4xx other than a timeout: the object must not exist.
    Refused(String),
    /// A timeout, a 5xx or a broken connection: the write may or may not have been stored.
    Unknown(String),
}

impl WriteOutcome {
    /// Classifies a create's answer (`None`: the client gave up waiting).
    fn of<T>(result: Option<Result<T, kube::Error>>) -> Self {
        match result {
            Some(Ok(_)) => Self::Stored,
            Some(Err(kube::Error::Api(e))) if (400..500).contains(&e.code) && e.code != 408 => {
                Self::Refused(e.to_string())
            }
            Some(Err(e)) => Self::Unknown(e.to_string()),
            None => Self::Unknown(format!("timed out after {WRITE_TIMEOUT:?}")),
        }
    }

    fn failed(&self) -> bool {
        !matches!(self, Self::Stored)
    }

    /// The outcome in words, for failure messages.
    fn describe(&self) -> String {
        match self {
            Self::Stored => "stored".into(),
            Self::Refused(e) => format!("refused: {e}"),
            Self::Unknown(e) => format!("unknown: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serving_etcd_tenant_moves_to_another_etcd_under_writes_with_an_informer_watching() {
    let stack = stack_with_controller_process("e2e-mig", 1).await;
    let (_ca, etcd) = etcds("e2e-mig", 3).await;
    let serving = serving_on_etcd(&stack, &etcd, OBJECTS).await;

    let outcome = migrate_under_load(&stack, &serving.tenant, &serving.id, &serving.target).await;

    serving.assert_moved(&etcd, &outcome).await;
    let event_keys = etcd_keys(&etcd[2], &format!("{}events/{LOAD}/", serving.prefix)).await;
    assert!(
        !event_keys.is_empty(),
        "the Events stay on the override: {event_keys:?}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_in_every_stage_resumes_the_migration_to_done_with_equal_data() {
    let mut stack = stack_with_controller_process("e2e-mig-kill", 1).await;
    let (_ca, etcd) = etcds("e2e-mig-kill", 3).await;
    let serving = serving_on_etcd(&stack, &etcd, 3000).await;

    let load = Load::start(&serving.tenant, 3000).await;
    let op = post_migrate(&stack, &serving.id, &serving.target).await;
    let killed = kill_in_every_stage(&mut stack).await;
    let outcome = load
        .finish(&stack, &serving.tenant, &op, &serving.target, true)
        .await;

    assert_eq!(killed, KILL_STAGES.to_vec(), "a kill landed in each stage");
    serving.assert_moved(&etcd, &outcome).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serving_postgres_tenant_moves_to_another_postgres_through_kine_under_writes() {
    let start = |name: &str| LocalPostgres::start(localenv::scratch_dir(name).unwrap());
    let (a, b) = tokio::join!(start("e2e-mig-pg-a"), start("e2e-mig-pg-b"));
    let servers = [SqlServer::Postgres(a.unwrap()), SqlServer::Postgres(b.unwrap())];
    moves_through_kine("e2e-mig-pg", &servers, OBJECTS, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_in_every_stage_resumes_a_postgres_kine_migration_to_done() {
    let start = |name: &str| LocalPostgres::start(localenv::scratch_dir(name).unwrap());
    let (a, b) = tokio::join!(start("e2e-mig-pgk-a"), start("e2e-mig-pgk-b"));
    let servers = [SqlServer::Postgres(a.unwrap()), SqlServer::Postgres(b.unwrap())];
    moves_through_kine("e2e-mig-pgk", &servers, 3000, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serving_mariadb_tenant_moves_to_another_mariadb_through_kine_under_writes() {
    let start = |name: &str| LocalMariaDb::start(localenv::scratch_dir(name).unwrap());
    let (a, b) = tokio::join!(start("e2e-mig-my-a"), start("e2e-mig-my-b"));
    let servers = [SqlServer::MariaDb(a.unwrap()), SqlServer::MariaDb(b.unwrap())];
    moves_through_kine("e2e-mig-my", &servers, OBJECTS, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_in_every_stage_resumes_a_mariadb_kine_migration_to_done() {
    let start = |name: &str| LocalMariaDb::start(localenv::scratch_dir(name).unwrap());
    let (a, b) = tokio::join!(start("e2e-mig-myk-a"), start("e2e-mig-myk-b"));
    let servers = [SqlServer::MariaDb(a.unwrap()), SqlServer::MariaDb(b.unwrap())];
    moves_through_kine("e2e-mig-myk", &servers, 3000, true).await;
}

/// A SQL server of its own for one side of a kine migration.
enum SqlServer {
    Postgres(LocalPostgres),
    MariaDb(LocalMariaDb),
}

impl SqlServer {
    /// The DataStore driver, endpoint, admin user and password.
    fn datastore(&self) -> (&'static str, String, &'static str, &'static str) {
        match self {
            Self::Postgres(pg) => ("PostgreSQL", format!("127.0.0.1:{}", pg.port()), "postgres", ""),
            Self::MariaDb(my) => ("MySQL", format!("127.0.0.1:{}", my.port()), "root", ""),
        }
    }

    /// Whether database `name` exists.
    async fn has_database(&self, name: &str) -> bool {
        let count: i64 = match self {
            Self::Postgres(pg) => {
                let mut db = PgConnection::connect(&pg.url_for("postgres")).await.unwrap();
                sqlx::query_scalar("select count(*) from pg_database where datname = $1")
                    .bind(name)
                    .fetch_one(&mut db)
                    .await
                    .unwrap()
            }
            Self::MariaDb(my) => {
                let mut db = MySqlConnection::connect(&my.url_for("mysql")).await.unwrap();
                sqlx::query_scalar("select count(*) from information_schema.schemata where schema_name = ?")
                    .bind(name)
                    .fetch_one(&mut db)
                    .await
                    .unwrap()
            }
        };
        count > 0
    }

    /// The names of the live (latest row not a deletion) ConfigMaps of `load` in database `name`.
    async fn live_config_maps(&self, name: &str) -> Vec<String> {
        let query = "select k.name from kine k where k.name like '/registry/configmaps/load/%' \
                     and k.deleted = 0 and k.id = (select max(l.id) from kine l where l.name = k.name)";
        let names: Vec<String> = match self {
            Self::Postgres(pg) => {
                let mut db = PgConnection::connect(&pg.url_for(name)).await.unwrap();
                sqlx::query_scalar(query).fetch_all(&mut db).await.unwrap()
            }
            Self::MariaDb(my) => {
                let mut db = MySqlConnection::connect(&my.url_for(name)).await.unwrap();
                sqlx::query_scalar(query).fetch_all(&mut db).await.unwrap()
            }
        };
        names
            .into_iter()
            .map(|n| n.rsplit('/').next().unwrap_or_default().to_string())
            .filter(|n| written_here(n))
            .collect()
    }
}

/// A tenant with `objects` ConfigMaps on one of `servers` (a kine DataStore each) moves to the
/// other under the writer and the informer, with the controller SIGKILLed in every stage if `kill`;
/// afterwards every object is in the target's kine table and the tenant's database is gone from the
/// source.
async fn moves_through_kine(prefix: &str, servers: &[SqlServer; 2], objects: usize, kill: bool) {
    let mut stack = stack_with_controller_process(prefix, 1).await;
    stack.pool("mig").await;
    let mut names = Vec::new();
    for server in servers {
        let (driver, endpoint, user, password) = server.datastore();
        names.push(
            stack
                .basic_datastore("mig", driver, &endpoint, user, password, 10)
                .await,
        );
    }
    let created = stack
        .create(
            0,
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "mig"}}),
        )
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    let source = usize::from(cp["placement"]["dataStore"] != names[0].as_str());
    let target = 1 - source;
    let tenant = stack.tenant_client(0, &id).await;
    seed(&tenant, objects).await;
    let database = schema(&stack.kube, &stack.tenants[0].namespace, "prod").await;

    let load = Load::start(&tenant, objects).await;
    let op = post_migrate(&stack, &id, &names[target]).await;
    if kill {
        let killed = kill_in_every_stage(&mut stack).await;
        assert_eq!(killed, KILL_STAGES.to_vec(), "a kill landed in each stage");
    }
    let outcome = load.finish(&stack, &tenant, &op, &names[target], kill).await;

    let on_target = servers[target].live_config_maps(&database).await;
    outcome.assert_stored(on_target, "ConfigMaps in the target's kine table");
    assert!(
        !servers[source].has_database(&database).await,
        "the tenant's database is left on the source"
    );
    stack.stop().await;
}

/// A control plane `prod` of tenant 0 serving from one of two etcd DataStores (`etcd[0]`, `etcd[1]`)
/// with its Events on a third (`etcd[2]`), all under one CA, with `objects` ConfigMaps in `load`.
struct Serving {
    id: String,
    tenant: kube::Client,
    /// The other of the two DataStores.
    target: String,
    /// Index of the source's and the target's etcd.
    source_etcd: usize,
    target_etcd: usize,
    /// The tenant's etcd key prefix, `/<schema>/`.
    prefix: String,
}

async fn serving_on_etcd(stack: &Stack, etcd: &[LocalEtcd], objects: usize) -> Serving {
    let ca_id = format!("ca-{}", stack.id);
    stack.pool("mig").await;
    stack.pool("mig-ev").await;
    let a = stack.etcd_datastore("mig", &etcd[0], &ca_id).await;
    let b = stack.etcd_datastore("mig", &etcd[1], &ca_id).await;
    let events = stack.etcd_datastore("mig-ev", &etcd[2], &ca_id).await;
    let created = stack
        .create(
            0,
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1,
                   "datastore": {"pool": "mig"}, "offload": "pool:mig-ev"}),
        )
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    let source = cp["placement"]["dataStore"].as_str().unwrap().to_string();
    assert_eq!(cp["placement"]["overrides"][0]["dataStore"], events.as_str());
    let (target, source_etcd, target_etcd) = if source == a { (b, 0, 1) } else { (a, 1, 0) };
    let tenant = stack.tenant_client(0, &id).await;
    seed(&tenant, objects).await;
    let schema = schema(&stack.kube, &stack.tenants[0].namespace, "prod").await;
    Serving {
        id,
        tenant,
        target,
        source_etcd,
        target_etcd,
        prefix: format!("/{schema}/"),
    }
}

impl Serving {
    /// Every object of `outcome` is on the target etcd, and nothing of the tenant on the source.
    async fn assert_moved(&self, etcd: &[LocalEtcd], outcome: &Outcome) {
        let on_target = etcd_keys(
            &etcd[self.target_etcd],
            &format!("{}configmaps/{LOAD}/", self.prefix),
        )
        .await;
        let on_target = on_target
            .iter()
            .map(|k| k.rsplit('/').next().unwrap_or_default().to_string())
            .filter(|name| written_here(name))
            .collect();
        outcome.assert_stored(on_target, "ConfigMaps on the target etcd");
        assert_eq!(
            etcd_keys(&etcd[self.source_etcd], &self.prefix).await,
            Vec::<String>::new(),
            "tenant keys left on the source"
        );
    }
}

/// What a migration under load ended with.
struct Outcome {
    /// What the writes and the seeding leave.
    expected: Expected,
    /// The test's ConfigMaps in a fresh list after the migration, with their `data.i`.
    listed: BTreeMap<String, String>,
    /// Where the writes that differ between the two lie in the migration (for a failure message).
    timeline: String,
}

impl Outcome {
    /// The datastore holds the test's ConfigMaps named `stored`, and they are exactly those the
    /// writes leave; checked on the datastore first, so that a failure says whether an object is
    /// missing there or only from the API's list.
    fn assert_stored(&self, stored: Vec<String>, what: &str) {
        let stored: BTreeMap<String, String> = stored
            .into_iter()
            .map(|name| {
                let i = self.listed.get(&name).cloned().unwrap_or_default();
                (name, i)
            })
            .collect();
        let in_store = differences(&self.expected, &stored);
        let in_list = differences(&self.expected, &self.listed);
        let only_listed: Vec<&String> = self.listed.keys().filter(|k| !stored.contains_key(*k)).collect();
        assert!(
            in_store
                .iter()
                .all(|d| !d.starts_with("missing") && !d.starts_with("unexpected"))
                && in_list.is_empty()
                && only_listed.is_empty(),
            "{what}: every object on the target with its content ({} expected); \
             in the datastore: {in_store:?}; in a fresh list: {in_list:?}; listed, not stored: \
             {only_listed:?}\n{}",
            self.expected.must.len(),
            self.timeline,
        );
    }
}

/// Starts the writer and the informer, migrates `id` to `target` through the API as a platform
/// admin, waits for the operation to succeed, and checks the tenant's data, the informer and the
/// writer's errors against the recorded freeze.
async fn migrate_under_load(stack: &Stack, tenant: &kube::Client, id: &str, target: &str) -> Outcome {
    let load = Load::start(tenant, OBJECTS).await;
    let op = post_migrate(stack, id, target).await;
    load.finish(stack, tenant, &op, target, false).await
}

/// The writer and the informer running against the tenant while it moves.
struct Load {
    store: reflector::Store<ConfigMap>,
    informer: tokio::task::JoinHandle<()>,
    writes: Writes,
    writer: tokio::task::JoinHandle<()>,
    /// ConfigMaps seeded before the load started.
    seeded: usize,
    /// When the writer started, and the stages seen since.
    started: Instant,
    stages: Stages,
}

impl Load {
    /// Starts the informer and the writer on a tenant seeded with `seeded` ConfigMaps, and lets them
    /// run for 3 s.
    async fn start(tenant: &kube::Client, seeded: usize) -> Self {
        let (started, stages) = (Instant::now(), Stages::default());
        let (store, informer) = informer(tenant);
        let writes: Writes = Arc::default();
        let writer = tokio::spawn(write_at_20_per_second(tenant.clone(), writes.clone()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        Self {
            store,
            informer,
            writes,
            writer,
            seeded,
            started,
            stages,
        }
    }

    /// Waits for operation `op` to succeed, then checks the data, the informer and, unless the
    /// controller was `killed` along the way, that the writer failed only while frozen (a kill in
    /// `Frozen` freezes again, and status records the last freeze only).
    async fn finish(
        self,
        stack: &Stack,
        tenant: &kube::Client,
        op: &str,
        target: &str,
        killed: bool,
    ) -> Outcome {
        let watching = watch_stages(stack, self.stages.clone());
        let seen = stack.operation_until_done(0, op).await;
        let last = &seen.last().unwrap().0;
        assert_eq!(last["state"], "succeeded", "{last:#}");
        let migration = migration(stack).await;
        assert_eq!(migration.stage, MigrationStage::Done, "{migration:?}");
        assert_eq!(migration.target, target);
        let freeze = Duration::from_millis(migration.freeze_millis.unwrap() as u64);
        eprintln!(
            "migration: {} objects, writes frozen for {freeze:?}, {migration:?}",
            migration.copied
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        self.writer.abort();
        watching.abort();
        // A write still waiting may yet land: judge the data only once every write has ended.
        self.writes.settled().await;

        let expected = expected_objects(&self.writes, self.seeded);
        let fresh: BTreeMap<String, String> = fresh_list(tenant)
            .await
            .into_iter()
            .map(|(k, (_, i))| (k, i))
            .collect();
        let differ = differences(&expected, &fresh);
        let timeline = timeline(&self.writes, &differ, self.started, &self.stages);
        if !differ.is_empty() {
            // Returned, not asserted: the caller looks at the datastore itself first.
            eprintln!("the fresh list differs: {differ:?}\n{timeline}");
            return Outcome {
                expected,
                listed: fresh,
                timeline,
            };
        }
        informer_equals_list(&self.store, tenant).await;
        self.informer.abort();
        eprintln!(
            "writer: no write succeeded for {:?} (the freeze as the client saw it)",
            longest_gap(&self.writes)
        );
        if !killed {
            writer_errors_only_while_frozen(&self.writes, &migration, freeze);
        }
        Outcome {
            expected,
            listed: fresh,
            timeline,
        }
    }
}

/// `POST …/migrate {target}` as a platform admin; returns the operation's id.
async fn post_migrate(stack: &Stack, id: &str, target: &str) -> String {
    let slug = &stack.tenants[0].slug;
    let r = stack
        .app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}/migrate"),
            Some(&stack.app.admin),
            Some(json!({"target": target})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    r.body["operation"]["id"]
        .as_str()
        .or(r.body["id"].as_str())
        .unwrap()
        .to_string()
}

/// The stages a kill must land in: every stage of a migration before `Done`.
const KILL_STAGES: [MigrationStage; 5] = [
    MigrationStage::Copying,
    MigrationStage::CatchingUp,
    MigrationStage::Frozen,
    MigrationStage::Switching,
    MigrationStage::Verifying,
];

/// SIGKILLs the controller process as soon as a watch on `prod` shows its migration in each stage of
/// [`KILL_STAGES`] (a watch, not polling: a kine freeze lasts tens of milliseconds), keeps it down for
/// a second and starts it again, until the migration ends; returns the stages a kill landed in (the
/// stage in status was still that stage after the kill).
async fn kill_in_every_stage(stack: &mut Stack) -> Vec<MigrationStage> {
    let api = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &stack.tenants[0].namespace);
    let stage = |tcp: TenantControlPlane| tcp.status.and_then(|s| s.migration).map(|m| m.stage);
    let config = watcher::Config::default().fields("metadata.name=prod");
    let mut changes = std::pin::pin!(watcher(api.clone(), config).default_backoff().applied_objects());
    let mut killed = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1800);
    loop {
        let Ok(next) = tokio::time::timeout_at(deadline, changes.next()).await else {
            panic!("the migration did not end; killed in {killed:?}");
        };
        let next = next.expect("the watch on prod never ends");
        let Some(now) = next.ok().and_then(stage) else {
            continue;
        };
        if now.ended() {
            return killed;
        }
        if KILL_STAGES.contains(&now) && !killed.contains(&now) {
            let pid = stack.kill_controller();
            let after = api.get("prod").await.ok().and_then(stage);
            eprintln!("killed the controller (pid {pid}) in {now:?}; status says {after:?}");
            if after == Some(now) {
                killed.push(now);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            stack.start_controller();
        }
    }
}

/// Creates namespace `load`, an Event and `n` ConfigMaps in it, 16 at a time.
async fn seed(tenant: &kube::Client, n: usize) {
    // The namespace and an Event in it, which lives on the Events override.
    namespace_and_event(tenant, LOAD).await;
    let api: Api<ConfigMap> = Api::namespaced(tenant.clone(), LOAD);
    let started = Instant::now();
    futures_util::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let (cm, params) = (config_map(&format!("seed-{i:05}"), i), PostParams::default());
                connected(|| api.create(&params, &cm)).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    eprintln!("seeded {n} ConfigMaps in {:?}", started.elapsed());
}

/// A ConfigMap of about 1 KiB whose `data.i` is `i`.
fn config_map(name: &str, i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {"i": i.to_string(), "payload": "x".repeat(1024)},
    }))
    .unwrap()
}

/// A reflector of the `load` ConfigMaps, running until aborted.
fn informer(tenant: &kube::Client) -> (reflector::Store<ConfigMap>, tokio::task::JoinHandle<()>) {
    let (store, writer) = reflector::store::<ConfigMap>();
    let api: Api<ConfigMap> = Api::namespaced(tenant.clone(), LOAD);
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    (store, task)
}

/// Creates `w-<n>` every 50 ms, recording each outcome, until aborted.
async fn write_at_20_per_second(tenant: kube::Client, writes: Writes) {
    let api: Api<ConfigMap> = Api::namespaced(tenant, LOAD);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    for n in 0.. {
        tick.tick().await;
        let (api, writes) = (api.clone(), writes.clone());
        writes.in_flight.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let (name, sent) = (format!("w-{n:06}"), Instant::now());
            let result = tokio::time::timeout(
                WRITE_TIMEOUT,
                api.create(&PostParams::default(), &config_map(&name, n)),
            )
            .await;
            let outcome = WriteOutcome::of(result.ok());
            let ended = Instant::now();
            writes.lock().push(Write {
                sent,
                ended,
                name,
                outcome,
            });
            writes.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Records in `stages` the stages `status.migration` goes through, and prints them.
fn watch_stages(stack: &Stack, stages: Stages) -> tokio::task::JoinHandle<()> {
    let api = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &stack.tenants[0].namespace);
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last = None;
        loop {
            if let Ok(tcp) = api.get("prod").await {
                let stage = tcp.status.and_then(|s| s.migration).map(|m| m.stage);
                if stage != last {
                    eprintln!("migration stage: {stage:?} at {:?}", started.elapsed());
                    if let Some(stage) = stage {
                        stages.lock().unwrap().push((Instant::now(), stage));
                    }
                    last = stage;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// `status.migration` of `prod`.
async fn migration(stack: &Stack) -> MigrationStatus {
    let api = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &stack.tenants[0].namespace);
    api.get("prod").await.unwrap().status.unwrap().migration.unwrap()
}

/// The objects a list must hold and those it may hold, by name, with their `data.i`.
#[derive(Default)]
struct Expected {
    /// Every seeded object and every write answered with success.
    must: BTreeMap<String, String>,
    /// Writes that ended without a definite answer (a timeout, a 5xx): stored or not, both are right.
    may: BTreeMap<String, String>,
}

/// What the seeding and the writes of `writes` leave: a refused write must be absent, an unanswered
/// one may be either.
fn expected_objects(writes: &Writes, seeded: usize) -> Expected {
    let mut expected = Expected {
        must: (0..seeded)
            .map(|i| (format!("seed-{i:05}"), i.to_string()))
            .collect(),
        ..Expected::default()
    };
    for write in writes.lock().iter() {
        let n = write.name.trim_start_matches("w-").trim_start_matches('0');
        let i = if n.is_empty() { "0".into() } else { n.to_string() };
        match write.outcome {
            WriteOutcome::Stored => expected.must.insert(write.name.clone(), i),
            WriteOutcome::Unknown(_) => expected.may.insert(write.name.clone(), i),
            WriteOutcome::Refused(_) => None,
        };
    }
    expected
}

/// The longest time between two successful writes' answers.
fn longest_gap(writes: &Writes) -> Duration {
    let mut ok: Vec<Instant> = writes
        .lock()
        .iter()
        .filter(|w| !w.outcome.failed())
        .map(|w| w.ended)
        .collect();
    ok.sort();
    ok.windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

/// What differs between the expected objects and a list: missing, unexpected or other content.
fn differences(expected: &Expected, listed: &BTreeMap<String, String>) -> Vec<String> {
    let missing = expected
        .must
        .iter()
        .filter(|(k, _)| !listed.contains_key(*k))
        .map(|(k, _)| format!("missing {k}"));
    let other =
        listed.iter().filter_map(
            |(k, v)| match expected.must.get(k).or_else(|| expected.may.get(k)) {
                None => Some(format!("unexpected {k}={v}")),
                Some(e) if e != v => Some(format!("{k}={v}, expected {e}")),
                Some(_) => None,
            },
        );
    missing.chain(other).collect()
}

/// For each write named in `differences`: when it was sent and answered (seconds after `zero`) and
/// how; with the stages' start times, this places a difference in the migration.
fn timeline(writes: &Writes, differences: &[String], zero: Instant, stages: &Stages) -> String {
    let at = |t: Instant| t.saturating_duration_since(zero).as_secs_f64();
    let writes = writes.lock();
    let named = writes
        .iter()
        .filter(|w| differences.iter().any(|d| d.contains(&w.name)))
        .map(|w| {
            format!(
                "{} sent {:.2}s answered {:.2}s {}",
                w.name,
                at(w.sent),
                at(w.ended),
                w.outcome.describe()
            )
        });
    let stages = stages
        .lock()
        .unwrap()
        .iter()
        .map(|(t, stage)| format!("{stage:?} from {:.2}s", at(*t)))
        .collect::<Vec<_>>();
    named
        .chain(std::iter::once(stages.join(", ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the test wrote ConfigMap `name` (not, e.g., the controller-manager's `kube-root-ca.crt`).
fn written_here(name: &str) -> bool {
    name.starts_with("seed-") || name.starts_with("w-")
}

/// The `load` ConfigMaps the test wrote, by name: (resourceVersion, data.i), from a fresh list.
async fn fresh_list(tenant: &kube::Client) -> BTreeMap<String, (String, String)> {
    let api: Api<ConfigMap> = Api::namespaced(tenant.clone(), LOAD);
    let params = ListParams::default();
    let list = connected(|| api.list(&params)).await.unwrap();
    list.items
        .into_iter()
        .filter(|cm| written_here(&cm.name_any()))
        .map(|cm| {
            let i = cm
                .data
                .as_ref()
                .and_then(|d| d.get("i"))
                .cloned()
                .unwrap_or_default();
            (cm.name_any(), (cm.resource_version().unwrap_or_default(), i))
        })
        .collect()
}

/// The informer's cache converges to a fresh list: same names, same resourceVersions.
async fn informer_equals_list(store: &reflector::Store<ConfigMap>, tenant: &kube::Client) {
    eventually(
        "the informer's cache equals a fresh list",
        // Under 8-way load the informer's relist after a 410 alone has taken over a minute.
        Duration::from_secs(180),
        || async {
            let fresh: BTreeMap<String, String> = fresh_list(tenant)
                .await
                .into_iter()
                .map(|(k, (rv, _))| (k, rv))
                .collect();
            let cached: BTreeMap<String, String> = store
                .state()
                .iter()
                .filter(|cm| written_here(&cm.name_any()))
                .map(|cm| (cm.name_any(), cm.resource_version().unwrap_or_default()))
                .collect();
            (cached == fresh).then_some(())
        },
    )
    .await;
}

/// Every failed write was in flight while writes were frozen or switching: it ended after `frozenAt`
/// (recorded before the freeze begins) and was sent before the migration was `Done`. Both ends come from
/// the migration's own record, not from how long requests take on a loaded machine: a write failing
/// before the freeze (e.g. while copying) or after the move (on the target) fails the test.
fn writer_errors_only_while_frozen(writes: &Writes, migration: &MigrationStatus, freeze: Duration) {
    let frozen_at = instant_of(migration.frozen_at.as_deref().expect("status.migration.frozenAt"));
    let done_at = instant_of(
        migration
            .finished_at
            .as_deref()
            .expect("status.migration.finishedAt"),
    );
    // Seconds after frozenAt (negative: before it).
    let at = |t: Instant| match t.checked_duration_since(frozen_at) {
        Some(after) => after.as_secs_f64(),
        None => -frozen_at.duration_since(t).as_secs_f64(),
    };
    let writes = writes.lock();
    let failed: Vec<&Write> = writes.iter().filter(|w| w.outcome.failed()).collect();
    let ok = writes.len() - failed.len();
    eprintln!(
        "writer: {ok} writes succeeded, {} failed; freeze {freeze:?}, Done {:.2}s after frozenAt",
        failed.len(),
        at(done_at)
    );
    assert!(ok > 0, "the writer wrote");
    let outside: Vec<String> = failed
        .iter()
        .filter(|w| w.ended < frozen_at || w.sent > done_at)
        .map(|w| {
            format!(
                "{} sent {:+.2}s answered {:+.2}s {}",
                w.name,
                at(w.sent),
                at(w.ended),
                w.outcome.describe()
            )
        })
        .collect();
    assert!(
        outside.is_empty(),
        "{} of {} failed writes were not in flight between frozenAt and Done ({migration:?}); seconds \
         after frozenAt: {:?}",
        outside.len(),
        failed.len(),
        outside.iter().take(5).collect::<Vec<_>>()
    );
}

/// The instant of `rfc3339`, a time the controller recorded on this machine's clock.
fn instant_of(rfc3339: &str) -> Instant {
    let at: chrono::DateTime<chrono::Utc> = rfc3339.parse().unwrap();
    let (now, wall) = (Instant::now(), chrono::Utc::now());
    let ago = (wall - at).to_std().unwrap_or_default();
    now.checked_sub(ago).unwrap()
}

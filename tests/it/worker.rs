//! The sync worker on real PostgreSQL and the shared real kube-apiserver: outbox → TenantControlPlanes,
//! status back, crash safety, concurrency, an unreachable apiserver, drift.

use std::{collections::HashSet, sync::Arc, time::Duration};

use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tenantplane::{
    k8s::crd::TenantControlPlane,
    store::{self, control_planes::NewControlPlane},
    translate::{self, LABEL_CONTROL_PLANE, Placement},
    worker::{Worker, WorkerMetrics, WorkerSettings},
};
use tenantplane_devenv::localenv::{
    self,
    process::{ChildProcess, Spec},
};
use uuid::Uuid;

use crate::{
    api::{App, spawn_app},
    support,
};

/// The cap of a wait for the worker to handle an event: only one it never handles reaches it.
const EVENT: Duration = Duration::from_secs(60);

/// Fast settings for tests: short polls and backoff, no resync unless asked.
fn settings() -> WorkerSettings {
    WorkerSettings {
        batch_size: 20,
        poll_ms: 50,
        backoff_ms: 100,
        backoff_max_ms: 1000,
        resync_seconds: 3600.0,
        ..WorkerSettings::default()
    }
}

/// A worker task that stops (mid-batch if need be) when dropped.
struct Running(tokio::task::JoinHandle<anyhow::Result<()>>, Arc<Worker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn start(db: PgPool, kube: kube::Client, settings: WorkerSettings) -> Running {
    let worker = Arc::new(Worker::new(db, kube, settings, WorkerMetrics::default()));
    Running(tokio::spawn(worker.clone().run()), worker)
}

async fn fresh_db() -> (String, PgPool) {
    let url = support::fresh_database("worker").await;
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(&url)
        .await
        .unwrap();
    store::MIGRATOR.run(&db).await.unwrap();
    (url, db)
}

/// A tenant with `n` control planes queued for creation, written as the service writes them (row,
/// operation, outbox row). Returns the slug.
async fn queue_creates(db: &PgPool, n: usize) -> String {
    let slug = support::unique("wk");
    let tenant = store::tenants::insert(db, &slug, "worker test", &json!({}))
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    for i in 0..n {
        let cp = NewControlPlane {
            name: format!("cp-{i:03}"),
            kubernetes_version: "v1.33.2".into(),
            replicas: (i % 3) as i32,
            service_type: "ClusterIP".into(),
            port: 6443,
            size_class: ["small", "medium", "large"][i % 3].into(),
            datastore_pool: None,
            datastore_labels: json!({}),
            datastore_name: Some("etcd-default".into()),
            offload: "none".into(),
            addons: json!({"coreDNS": true, "kubeProxy": true, "konnectivity": false}),
            labels: json!({}),
        };
        store::control_planes::insert_created(&mut tx, tenant.id, &cp, "tests", None, 1800)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    slug
}

/// Operations the worker has applied (without a controller, none goes further).
async fn count_applied(db: &PgPool) -> i64 {
    sqlx::query_scalar::<_, i64>(
        r#"select count(*) from operations where stages @> '[{"stage": "applied"}]' and state = 'running'"#,
    )
    .fetch_one(db)
    .await
    .unwrap()
}

/// Committed applies per outbox row: `(rows applied, largest count for one row)`.
async fn applies(db: &PgPool) -> (i64, i64) {
    sqlx::query_as::<_, (i64, i64)>(
        "select count(*), coalesce(max(n), 0) from (
           select details->>'outboxId', count(*) as n from audit_log
           where action = 'control-plane.applied' group by 1) a",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

async fn tcps(kube: &kube::Client, namespace: &str) -> Vec<TenantControlPlane> {
    Api::<TenantControlPlane>::namespaced(kube.clone(), namespace)
        .list(&ListParams::default().labels(translate::SELECTOR))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The TCP `name` in `tp-<slug>`, once it exists (and satisfies `ok`).
async fn wait_tcp(
    kube: &kube::Client,
    slug: &str,
    name: &str,
    ok: impl Fn(&TenantControlPlane) -> bool,
) -> TenantControlPlane {
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    support::eventually(&format!("TCP {name}"), Duration::from_secs(30), || async {
        api.get_opt(name).await.ok().flatten().filter(|t| ok(t))
    })
    .await
}

/// The operation once it is applied: `running` at stage `applied` (no controller here takes it further:
/// it is done only when the control plane is Ready).
async fn wait_applied(app: &App, slug: &str, token: &str, op: &str) -> Value {
    let body = wait_op_where(app, slug, token, op, "applied", |b| b["stage"] == "applied").await;
    assert_eq!(
        (body["state"].as_str(), body["done"].as_bool()),
        (Some("running"), Some(false)),
        "{body}"
    );
    body
}

async fn wait_op(app: &App, slug: &str, token: &str, op: &str, state: &str) -> Value {
    wait_op_where(app, slug, token, op, state, |b| b["state"] == state).await
}

/// The operation once `ok` holds for it (within 30 s).
async fn wait_op_where(
    app: &App,
    slug: &str,
    token: &str,
    op: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    support::eventually(
        &format!("operation {op} {what}"),
        Duration::from_secs(30),
        || async {
            let r = app
                .call(
                    Method::GET,
                    &format!("/api/v1/tenants/{slug}/operations/{op}"),
                    Some(token),
                    None,
                )
                .await;
            ok(&r.body).then_some(r.body)
        },
    )
    .await
}

/// What the worker would render for the stored row.
async fn expected_spec(db: &PgPool, tenant: Uuid, id: Uuid, slug: &str) -> Value {
    let mut conn = db.acquire().await.unwrap();
    let (row, _) = store::outbox::control_plane(&mut conn, tenant, id)
        .await
        .unwrap()
        .unwrap();
    let placement = match store::outbox::placement(&mut conn, id).await.unwrap() {
        Some((primary, overrides)) => Placement {
            data_store: Some(primary),
            overrides,
        },
        None => Placement::fallback(&row),
    };
    let tcp = translate::translate(&row, &placement, slug, "tp-{tenant}");
    serde_json::to_value(&tcp.spec).unwrap()
}

#[tokio::test]
async fn worker_create_update_and_delete_reach_the_cluster() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let _worker = start(app.ctx.db.clone(), kube.clone(), settings());
    let slug = app.tenant("wk").await;
    let tenant = crate::api::tenant_id(&app, &slug).await;
    let token = app.token(&slug, "tenant-admin").await;

    // Create: the TCP's spec is the pure translation of the stored row and its placement, field by field.
    let created = app.control_plane(&slug, &token, "prod").await;
    let id: Uuid = created["controlPlane"]["id"].as_str().unwrap().parse().unwrap();
    let op = created["operation"]["id"].as_str().unwrap();
    let tcp = wait_tcp(&kube, &slug, "prod", |_| true).await;
    assert_eq!(
        tcp.spec.data_store.as_deref(),
        Some("etcd-default"),
        "the TCP uses the DataStore placement chose"
    );
    assert_eq!(
        serde_json::to_value(&tcp.spec).unwrap(),
        expected_spec(&app.ctx.db, tenant, id, &slug).await
    );
    let labels = tcp.metadata.labels.clone().unwrap();
    assert_eq!(labels[LABEL_CONTROL_PLANE], id.to_string());
    assert_eq!(labels[translate::LABEL_TENANT], tenant.to_string());
    let applied = wait_applied(&app, &slug, &token, op).await;
    let stages = support::stage_names(&applied);
    assert_eq!(stages, ["placed", "applied"]);
    let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(kube.clone())
        .get(&format!("tp-{slug}"))
        .await
        .unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap()[translate::LABEL_TENANT],
        tenant.to_string()
    );

    // Update: version and replicas (0 = asleep) propagate.
    let r = app
        .call(
            Method::PATCH,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&token),
            Some(json!({"kubernetesVersion": "v1.34.1", "replicas": 0})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let tcp = wait_tcp(&kube, &slug, "prod", |t| t.spec.kubernetes.version == "v1.34.1").await;
    assert_eq!(
        tcp.spec.control_plane.deployment.as_ref().unwrap().replicas,
        Some(0)
    );
    assert_eq!(
        serde_json::to_value(&tcp.spec).unwrap(),
        expected_spec(&app.ctx.db, tenant, id, &slug).await
    );
    wait_applied(&app, &slug, &token, r.body["operation"]["id"].as_str().unwrap()).await;

    // Delete: the TCP goes, then the record says deleted; the open update can no longer finish.
    let update = r.body["operation"]["id"].as_str().unwrap().to_string();
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let deleted = wait_op(
        &app,
        &slug,
        &token,
        r.body["operation"]["id"].as_str().unwrap(),
        "succeeded",
    )
    .await;
    let stages = support::stage_names(&deleted);
    assert_eq!(stages, ["requested", "applied", "deleted"]);
    assert_eq!(deleted["done"], true);
    let superseded = wait_op(&app, &slug, &token, &update, "failed").await;
    assert_eq!(superseded["reason"], "Superseded", "{superseded}");
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    assert!(api.get_opt("prod").await.unwrap().is_none());
    let (phase, deleted): (String, bool) =
        sqlx::query_as("select phase, deleted_at is not null from control_planes where id = $1")
            .bind(id)
            .fetch_one(&app.ctx.db)
            .await
            .unwrap();
    assert_eq!((phase.as_str(), deleted), ("Deleted", true));
    // Its capacity is released: no placement left, and the DataStore's load is back to zero.
    let (placements, load): (i64, i32) = sqlx::query_as(
        "select (select count(*) from placements where control_plane_id = $1),
                (select load_tenants from datastores where name = 'etcd-default')",
    )
    .bind(id)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    assert_eq!((placements, load), (0, 0));
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
/// How fast it shows is measured in `benches/status_latency.rs`, not here.
async fn worker_status_change_shows_in_the_api_and_a_fresh_ready_finishes_the_create() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let _worker = start(app.ctx.db.clone(), kube.clone(), settings());
    let slug = app.tenant("wks").await;
    let token = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &token, "prod").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}");
    wait_tcp(&kube, &slug, "prod", |_| true).await;
    // Without a status the phase becomes Provisioning.
    support::eventually("phase Provisioning", EVENT, || async {
        let r = app.call(Method::GET, &path, Some(&token), None).await;
        (r.body["phase"] == "Provisioning").then_some(())
    })
    .await;

    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    let status = json!({"status": {
        "controlPlaneEndpoint": "10.0.0.7:6443",
        "conditions": [ready_condition("True", 1)],
        "kubeconfig": {"admin": {"secretName": "prod-admin-kubeconfig"}},
        "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
    }});
    let op = created["operation"]["id"].as_str().unwrap();
    assert_eq!(wait_applied(&app, &slug, &token, op).await["stage"], "applied");
    api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let body = support::eventually("phase Ready", EVENT, || async {
        let r = app.call(Method::GET, &path, Some(&token), None).await;
        (r.body["phase"] == "Ready").then_some(r.body)
    })
    .await;
    // Ready at the generation the create asked for: its operation is done, every stage stamped.
    let done = wait_op(&app, &slug, &token, op, "succeeded").await;
    let stages = support::stage_names(&done);
    assert_eq!(
        stages,
        [
            "placed",
            "applied",
            "datastoreReady",
            "certificates",
            "deployed",
            "ready"
        ]
    );
    assert_eq!(
        body["status"]["kubeconfigSecret"],
        json!({"namespace": format!("tp-{slug}"), "name": "prod-admin-kubeconfig"})
    );
    assert_eq!(body["status"]["endpoint"], "10.0.0.7:6443");
    assert_eq!(body["status"]["installedVersion"], "v1.33.2");

    // The version status alone is not enough: a Ready condition that turns False makes it NotReady.
    let failing = json!({"status": {"conditions": [ready_condition("False", 1)]}});
    api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&failing))
        .await
        .unwrap();
    support::eventually("phase NotReady", EVENT, || async {
        let r = app.call(Method::GET, &path, Some(&token), None).await;
        (r.body["phase"] == "NotReady").then_some(())
    })
    .await;
}

/// A `Ready` condition about `generation`.
pub fn ready_condition(status: &str, generation: i64) -> Value {
    json!({"type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
           "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": generation})
}

/// The pinned TCP UID of a control plane.
async fn pinned(db: &PgPool, id: Uuid) -> Option<String> {
    sqlx::query_scalar("select tcp_uid from control_planes where id = $1")
        .bind(id)
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn worker_pins_the_tcp_it_applied_and_accepts_the_one_it_recreates() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let worker = start(app.ctx.db.clone(), kube.clone(), settings());
    let slug = app.tenant("wkp").await;
    let token = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &token, "prod").await;
    let id: Uuid = created["controlPlane"]["id"].as_str().unwrap().parse().unwrap();
    let first = wait_tcp(&kube, &slug, "prod", |_| true).await;
    let first_uid = first.metadata.uid.clone().unwrap();
    support::eventually("pinned", EVENT, || async {
        (pinned(&app.ctx.db, id).await.as_deref() == Some(first_uid.as_str())).then_some(())
    })
    .await;

    // Someone deletes the TCP behind our back: the pin goes with it, and the re-created TCP is accepted.
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    api.delete("prod", &Default::default()).await.unwrap();
    support::eventually("unpinned", EVENT, || async {
        pinned(&app.ctx.db, id).await.is_none().then_some(())
    })
    .await;
    worker.1.resync_once().await.unwrap();
    let second = wait_tcp(&kube, &slug, "prod", |t| {
        t.metadata.uid.as_deref() != Some(first_uid.as_str())
    })
    .await;
    let second_uid = second.metadata.uid.clone().unwrap();
    assert_eq!(pinned(&app.ctx.db, id).await, Some(second_uid));
    let status = json!({"status": {
        "conditions": [ready_condition("True", 1)],
        "controlPlaneEndpoint": "10.0.0.8:6443",
        "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
    }});
    api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}");
    let body = support::eventually("phase Ready", EVENT, || async {
        let r = app.call(Method::GET, &path, Some(&token), None).await;
        (r.body["phase"] == "Ready").then_some(r.body)
    })
    .await;
    assert_eq!(body["status"]["endpoint"], "10.0.0.8:6443");
}

/// Holds an exclusive lock on `audit_log` until the returned transaction ends (reads go on): a worker's
/// batch then applies its first TCP to the cluster and waits at that row's audit insert, uncommitted,
/// however fast or slow the machine.
async fn hold_audit_log(db: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut hold = db.begin().await.unwrap();
    sqlx::query("lock table audit_log in exclusive mode")
        .execute(&mut *hold)
        .await
        .unwrap();
    hold
}

/// Waits until the cluster holds TCPs whose operations are not yet committed: a batch in flight (under
/// [`hold_audit_log`] it stays in flight).
async fn until_a_batch_in_flight(kube: &kube::Client, db: &PgPool, slug: &str) {
    support::eventually("a batch in flight", Duration::from_secs(60), || async {
        let applied = tcps(kube, &format!("tp-{slug}")).await.len() as i64;
        (applied > count_applied(db).await).then_some(())
    })
    .await;
}

fn worker_process(url: &str, log: &std::path::Path) -> ChildProcess {
    let kubeconfig = support::cluster().kube.kubeconfig_path().to_path_buf();
    let spec = Spec::new("worker", env!("CARGO_BIN_EXE_tenantplane"))
        .args(["worker", "--migrate", "false", "--worker-batch-size", "20"])
        .args(["--worker-poll-ms", "50", "--worker-resync-seconds", "3600"])
        .arg_pair("--database-url", url)
        .arg_pair("--kubeconfig", kubeconfig.to_str().unwrap())
        .env("RUST_LOG", "info");
    ChildProcess::spawn(&spec, log).unwrap()
}

trait ArgPair {
    fn arg_pair(self, flag: &str, value: &str) -> Self;
}

impl ArgPair for Spec {
    fn arg_pair(self, flag: &str, value: &str) -> Self {
        self.args([flag, value])
    }
}

#[tokio::test]
async fn worker_survives_sigkill_mid_batch_without_duplicates() {
    support::crds_installed();
    let kube = support::client().await;
    let (url, db) = fresh_db().await;
    let slug = queue_creates(&db, 300).await;
    let log = localenv::scratch_dir("worker-crash").unwrap().join("worker.log");

    // Kill twice, each time inside a batch (applied to the cluster, not yet committed): the batch waits
    // at its audit insert for a lock the test holds until after the kill.
    for (round, kill_at) in [(1, 40), (2, 80)] {
        let child = worker_process(&url, &log);
        support::eventually(&format!("{kill_at} applied"), Duration::from_secs(60), || async {
            (count_applied(&db).await >= kill_at).then_some(())
        })
        .await;
        let hold = hold_audit_log(&db).await;
        until_a_batch_in_flight(&kube, &db, &slug).await;
        drop(child); // SIGKILL, with a batch in flight
        let done = count_applied(&db).await;
        let applied = tcps(&kube, &format!("tp-{slug}")).await.len();
        eprintln!("kill {round}: {done} operations applied, {applied} TCPs exist");
        assert!(done < 300, "the worker finished before kill {round}");
        assert!(applied as i64 > done, "kill {round} landed between batches");
        // The killed worker's transaction gets the lock, then finds its client gone and rolls back.
        hold.rollback().await.unwrap();
    }
    let _child = worker_process(&url, &log);
    support::eventually("300 applied", Duration::from_secs(90), || async {
        (count_applied(&db).await == 300).then_some(())
    })
    .await;

    let items = tcps(&kube, &format!("tp-{slug}")).await;
    let ids: HashSet<String> = items
        .iter()
        .map(|t| t.metadata.labels.as_ref().unwrap()[LABEL_CONTROL_PLANE].clone())
        .collect();
    assert_eq!((items.len(), ids.len()), (300, 300));
    assert_eq!(
        applies(&db).await,
        (300, 1),
        "each outbox row applied (and committed) once"
    );
    let pending: i64 = sqlx::query_scalar("select count(*) from outbox where processed_at is null")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(pending, 0);
}

#[tokio::test]
async fn worker_pair_shares_the_outbox_without_duplicate_applies() {
    support::crds_installed();
    let kube = support::client().await;
    let (url, db) = fresh_db().await;
    let slug = queue_creates(&db, 300).await;
    let second = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await
        .unwrap();
    let a = start(db.clone(), support::client().await, settings());
    let b = start(second, support::client().await, settings());
    support::eventually("300 applied", Duration::from_secs(90), || async {
        (count_applied(&db).await == 300).then_some(())
    })
    .await;
    assert_eq!(applies(&db).await, (300, 1), "no outbox row applied twice");
    let actors: Vec<(String, i64)> = sqlx::query_as(
        "select actor, count(*) from audit_log where action = 'control-plane.applied' group by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    eprintln!("applies per worker: {actors:?} ({} / {})", a.1.id(), b.1.id());
    assert_eq!(actors.len(), 2, "both workers took part: {actors:?}");
    assert_eq!(tcps(&kube, &format!("tp-{slug}")).await.len(), 300);
}

/// A client of the shared cluster's credentials aimed at a closed port.
async fn unreachable_client() -> kube::Client {
    let mut config = support::cluster().kube.config().await.unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    config.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
    config.connect_timeout = Some(Duration::from_secs(1));
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn worker_catches_up_after_the_apiserver_was_unreachable() {
    support::crds_installed();
    let app = spawn_app().await;
    let slug = app.tenant("wku").await;
    let token = app.token(&slug, "tenant-member").await;
    let offline = start(
        app.ctx.db.clone(),
        unreachable_client().await,
        WorkerSettings {
            max_attempts: 100,
            ..settings()
        },
    );
    // The API accepts creates while the cluster is out of reach; the worker keeps retrying.
    let mut ops = Vec::new();
    for i in 0..5 {
        let created = app.control_plane(&slug, &token, &format!("cp-{i}")).await;
        ops.push(created["operation"]["id"].as_str().unwrap().to_string());
    }
    support::eventually("failed attempts", EVENT, || async {
        let retried: i64 = sqlx::query_scalar(
            "select count(*) from outbox where attempts >= 2 and processed_at is null and last_error is not null",
        )
        .fetch_one(&app.ctx.db)
        .await
        .unwrap();
        (retried == 5).then_some(())
    })
    .await;
    for op in &ops {
        let r = app
            .call(
                Method::GET,
                &format!("/api/v1/tenants/{slug}/operations/{op}"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(r.body["state"], "running", "{}", r.text);
    }
    drop(offline);

    // Reachable again: everything arrives.
    let kube = support::client().await;
    let _online = start(app.ctx.db.clone(), kube.clone(), settings());
    for op in &ops {
        wait_applied(&app, &slug, &token, op).await;
    }
    assert_eq!(tcps(&kube, &format!("tp-{slug}")).await.len(), 5);
}

#[tokio::test]
async fn worker_gives_up_after_max_attempts_and_reports_the_error() {
    let app = spawn_app().await;
    let slug = app.tenant("wkf").await;
    let token = app.token(&slug, "tenant-member").await;
    let _offline = start(
        app.ctx.db.clone(),
        unreachable_client().await,
        WorkerSettings {
            max_attempts: 3,
            ..settings()
        },
    );
    let created = app.control_plane(&slug, &token, "doomed").await;
    let op = wait_op(
        &app,
        &slug,
        &token,
        created["operation"]["id"].as_str().unwrap(),
        "failed",
    )
    .await;
    let error = op["error"].as_str().unwrap();
    assert!(error.contains("gave up after 3 attempts"), "{error}");
    assert_eq!(
        (op["reason"].as_str(), op["done"].as_bool()),
        (Some("ApplyFailed"), Some(true))
    );
}

#[tokio::test]
async fn worker_resync_reverts_drift_and_keeps_foreign_fields() {
    support::crds_installed();
    let kube = support::client().await;
    let (_url, db) = fresh_db().await;
    let slug = queue_creates(&db, 1).await;
    let _worker = start(
        db.clone(),
        kube.clone(),
        WorkerSettings {
            resync_seconds: 1.0,
            ..settings()
        },
    );
    wait_tcp(&kube, &slug, "cp-000", |_| true).await;
    // Someone else changes one of our fields and adds one of their own.
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    let edit = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": "cp-000"},
        "spec": {"kubernetes": {"version": "v1.30.9"}, "networkProfile": {"certSANs": ["api.example.com"]}}
    });
    api.patch(
        "cp-000",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(&edit),
    )
    .await
    .unwrap();
    let tcp = wait_tcp(&kube, &slug, "cp-000", |t| t.spec.kubernetes.version == "v1.33.2").await;
    assert_eq!(
        tcp.spec.network_profile.unwrap().cert_sans,
        Some(vec!["api.example.com".to_string()]),
        "a field another manager owns is left alone"
    );
}

#[tokio::test]
async fn worker_runs_inside_serve_and_exposes_its_metrics() {
    support::crds_installed();
    let (url, db) = fresh_db().await;
    queue_creates(&db, 3).await;
    let port = localenv::ports::claim().unwrap();
    let kubeconfig = support::cluster().kube.kubeconfig_path().to_path_buf();
    let spec = Spec::new("serve-with-worker", env!("CARGO_BIN_EXE_tenantplane"))
        .args(["serve", "--with-worker", "--worker-poll-ms", "50"])
        .arg_pair("--listen", &format!("127.0.0.1:{}", port.port()))
        .arg_pair("--kubeconfig", kubeconfig.to_str().unwrap())
        .env("DATABASE_URL", &url)
        .env(
            "TENANTPLANE_ENCRYPTION_KEY",
            tenantplane::auth::keys::ServerKey::generate_base64().unwrap(),
        );
    let log = localenv::scratch_dir("serve-worker").unwrap().join("serve.log");
    let _child = ChildProcess::spawn(&spec, &log).unwrap();
    support::eventually("3 applied", Duration::from_secs(60), || async {
        (count_applied(&db).await == 3).then_some(())
    })
    .await;
    let metrics = reqwest::get(format!("http://127.0.0.1:{}/metrics", port.port()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "tenantplane_worker_applies_total 3",
        "tenantplane_worker_outbox_depth ",
        "tenantplane_worker_apply_duration_seconds_count 3",
        "tenantplane_worker_failures_total 0",
    ] {
        assert!(metrics.contains(line), "{line:?} missing from:\n{metrics}");
    }
}

#[tokio::test]
async fn a_delete_that_cannot_finish_fails_after_the_deadline_with_the_tcps_condition() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let _worker = start(
        app.ctx.db.clone(),
        kube.clone(),
        WorkerSettings {
            delete_timeout_seconds: 1.0,
            ..settings()
        },
    );
    let slug = app.tenant("wkd").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = app.control_plane(&slug, &admin, "stuck").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    wait_tcp(&kube, &slug, "stuck", |_| true).await;
    // A finalizer that never finishes, and the condition that says why.
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    api.patch(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": ["test.tenantplane.io/hold"]}})),
    )
    .await
    .unwrap();
    let condition = json!({"status": {"conditions": [{"type": "DataStoreReady", "status": "False",
        "reason": "Unreachable", "message": "the DataStore etcd-default does not answer",
        "lastTransitionTime": "2026-12-01T00:00:00Z"}]}});
    api.patch_status("stuck", &PatchParams::default(), &Patch::Merge(&condition))
        .await
        .unwrap();
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let op = wait_op(
        &app,
        &slug,
        &admin,
        r.body["operation"]["id"].as_str().unwrap(),
        "failed",
    )
    .await;
    assert_eq!(
        op["error"],
        "the TenantControlPlane was not deleted within 1 s: DataStoreReady=False (Unreachable): the DataStore etcd-default does not answer"
    );
    assert_eq!(op["reason"], "DeleteTimeout");
    // Let it go.
    api.patch(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// A DataStore `name` in the API's database (in `pool`, if any; ready) and in the cluster (the etcd
/// sample, no status yet).
async fn datastore_in_both(app: &App, kube: &kube::Client, pool: Option<Uuid>, name: &str) {
    store::datastores::insert(
        &app.ctx.db,
        &store::datastores::NewDataStore {
            name: name.to_string(),
            pool_id: pool,
            driver: "etcd".into(),
            endpoints: vec!["etcd-x:2379".into()],
            secret_refs: json!({}),
            labels: json!({}),
            capacity_tenants: 10,
            capacity_bytes: None,
            ca_id: None,
        },
    )
    .await
    .unwrap();
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/datastore-etcd.yaml"
    ))
    .unwrap();
    let mut ds: tenantplane::k8s::crd::DataStore = serde_yaml::from_str(&sample).unwrap();
    ds.metadata.name = Some(name.to_string());
    let api: Api<tenantplane::k8s::crd::DataStore> = Api::all(kube.clone());
    api.create(&Default::default(), &ds).await.unwrap();
}

/// `datastores.ready` of `name`.
async fn row_ready(db: &PgPool, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("select ready from datastores where name = $1")
        .bind(name)
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn datastore_readiness_follows_the_clusters_datastore_and_placement_skips_unready_ones() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let _worker = start(app.ctx.db.clone(), kube.clone(), settings());
    let name = support::unique("wk-ds");
    let pool = store::datastores::insert_pool(&app.ctx.db, &name, "spread", &json!({}))
        .await
        .unwrap();
    datastore_in_both(&app, &kube, Some(pool.id), &name).await;
    let api: Api<tenantplane::k8s::crd::DataStore> = Api::all(kube.clone());
    let ready = || row_ready(&app.ctx.db, &name);
    // No status yet: the row keeps its value. A second DataStore (in no pool), created and marked
    // unready after it, shows when the worker's watch (one stream, in order) has passed its creation.
    let marker = format!("{name}-marker");
    datastore_in_both(&app, &kube, None, &marker).await;
    api.patch_status(
        &marker,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"ready": false}})),
    )
    .await
    .unwrap();
    support::eventually("the marker's row not ready", EVENT, || async {
        (!row_ready(&app.ctx.db, &marker).await).then_some(())
    })
    .await;
    api.delete(&marker, &Default::default()).await.unwrap();
    assert!(ready().await);
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"ready": false}})),
    )
    .await
    .unwrap();
    support::eventually("row not ready", EVENT, || async {
        (!ready().await).then_some(())
    })
    .await;
    let slug = app.tenant("wk-ds").await;
    let member = app.token(&slug, "tenant-member").await;
    let r = app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes"),
            Some(&member),
            Some(json!({"name": "placed", "kubernetesVersion": "v1.33.2", "datastore": {"pool": name}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(
        r.body["detail"].as_str().unwrap().contains("not ready"),
        "{}",
        r.text
    );
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"ready": true}})),
    )
    .await
    .unwrap();
    support::eventually("row ready", EVENT, || async { ready().await.then_some(()) }).await;
    api.delete(&name, &Default::default()).await.unwrap();
    support::eventually("row not ready after delete", EVENT, || async {
        (!ready().await).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_retention_purge_deletes_rows_past_their_retention_in_batches_and_keeps_younger_ones() {
    let (_, db) = fresh_db().await;
    let tenant = store::tenants::insert(&db, &support::unique("ret"), "retention", &json!({}))
        .await
        .unwrap();
    let run = |sql: &'static str| {
        let (db, tenant) = (db.clone(), tenant.id);
        async move { sqlx::query(sql).bind(tenant).execute(&db).await.unwrap() }
    };
    run(
        "insert into idempotency_keys (scope, key, request_hash, response_status, response_body, created_at)
         select $1::text, k, '\\x00', 201, '{}', now() - h * interval '1 hour'
         from (values ('old', 25), ('young', 23), ('new', 0)) v(k, h)",
    )
    .await;
    run("insert into outbox (tenant_id, kind, processed_at, created_at)
         select $1, k, now() - d * interval '1 day', now() - interval '30 days'
         from (values ('old', 8), ('young', 6)) v(k, d)
         union all select $1, 'pending', null, now() - interval '30 days'")
    .await;
    run(
        "insert into audit_log (tenant_id, actor, action, target_kind, target_id, created_at)
         select $1, 'tests', 'test.retention', 'test', t, now() - d * interval '1 day'
         from (values ('old-1', 401), ('old-2', 500), ('young', 399)) v(t, d)",
    )
    .await;
    localenv::install_crypto_provider();
    let nowhere = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let mut settings = settings();
    settings.retention.batch_size = 1;
    let metrics = WorkerMetrics::default();
    let worker = Worker::new(db.clone(), nowhere, settings, metrics.clone());
    let purged = worker.purge_once().await.unwrap();
    let expected = store::retention::Purged {
        idempotency_keys: 1,
        outbox: 1,
        audit_log: 2,
    };
    assert_eq!(purged, expected);
    let left = |sql: &'static str| {
        let db = db.clone();
        async move { sqlx::query_scalar::<_, String>(sql).fetch_all(&db).await.unwrap() }
    };
    assert_eq!(
        left("select key from idempotency_keys order by key").await,
        ["new", "young"]
    );
    assert_eq!(
        left("select kind from outbox order by kind").await,
        ["pending", "young"]
    );
    assert_eq!(
        left("select target_id from audit_log order by target_id").await,
        ["young"]
    );
    let count = |table: &str| {
        metrics
            .purged
            .get_or_create(&tenantplane::worker::metrics::TableLabels { table: table.into() })
            .get()
    };
    assert_eq!(
        (count("idempotency_keys"), count("outbox"), count("audit_log")),
        (1, 1, 2)
    );
    // Nothing is left to purge: a second pass deletes nothing.
    assert_eq!(
        worker.purge_once().await.unwrap(),
        store::retention::Purged::default()
    );
    assert_eq!(count("audit_log"), 2);
}

/// Sets `status` on tenant `slug`'s TCP `prod`, then waits until the API shows `endpoint`: every status
/// event before it has been handled by then (the worker handles one TCP's events in order).
async fn status_then_mark(
    app: &App,
    kube: &kube::Client,
    slug: &str,
    token: &str,
    id: &str,
    status: Value,
    endpoint: &str,
) {
    let api: Api<TenantControlPlane> = Api::namespaced(kube.clone(), &format!("tp-{slug}"));
    for patch in [status, json!({"status": {"controlPlaneEndpoint": endpoint}})] {
        api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}");
    support::eventually(&format!("endpoint {endpoint}"), EVENT, || async {
        let r = app.call(Method::GET, &path, Some(token), None).await;
        (r.body["status"]["endpoint"] == endpoint).then_some(())
    })
    .await;
}

/// A `status.migration` written by whoever may write TCP status (`Done`, naming the open migration's
/// DataStores) moves no placement and ends no operation; the same record in the controller's migration
/// journal does.
#[tokio::test]
async fn a_forged_migration_status_moves_nothing_and_the_controllers_journal_ends_the_migration() {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app().await;
    let _worker = start(app.ctx.db.clone(), kube.clone(), settings());
    let slug = app.tenant("wkm").await;
    let token = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &token, "prod").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let tcp = wait_tcp(&kube, &slug, "prod", |_| true).await;
    let ready = json!({"status": {"conditions": [ready_condition("True", 1)],
        "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}}});
    status_then_mark(&app, &kube, &slug, &token, &id, ready, "10.0.0.7:6443").await;
    wait_op(
        &app,
        &slug,
        &token,
        created["operation"]["id"].as_str().unwrap(),
        "succeeded",
    )
    .await;

    let target = support::unique("etcd-to");
    let r = |k: &str| json!({"name": "ds-creds", "namespace": "kamaji-system", "keyPath": k});
    let body = json!({"name": target, "pool": "default", "driver": "etcd", "endpoints": ["etcd-to:2379"],
        "capacityTenants": 10, "caId": "ca-default", "secrets": {"caCertificate": r("ca.crt"),
        "caPrivateKey": r("ca.key"), "clientCertificate": r("tls.crt"), "clientPrivateKey": r("tls.key")}});
    let reply = app
        .call(Method::POST, "/api/v1/datastores", Some(&app.admin), Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let migrate = format!("/api/v1/tenants/{slug}/control-planes/{id}/migrate");
    let reply = app
        .call(
            Method::POST,
            &migrate,
            Some(&app.admin),
            Some(json!({"target": target})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    let op = reply.body["operation"]["id"].as_str().unwrap().to_string();
    let cp: Uuid = id.parse().unwrap();
    wait_tcp(&kube, &slug, "prod", |t| {
        t.spec.data_store.as_deref() == Some(target.as_str())
    })
    .await;

    let done = json!({"source": "etcd-default", "target": target, "stage": "Done", "overrides": "Drop",
        "startedAt": "2026-12-07T00:00:00Z", "stageStartedAt": "2026-12-07T00:00:09Z",
        "finishedAt": "2026-12-07T00:00:09Z"});
    let forged = json!({"status": {"migration": done}});
    status_then_mark(&app, &kube, &slug, &token, &id, forged, "10.0.0.8:6443").await;
    let open = store::migrations::open(&app.ctx.db, cp).await.unwrap();
    assert_eq!(
        open.map(|m| (m.source, m.target)),
        Some(("etcd-default".to_string(), target.clone())),
        "a forged Done ended the migration"
    );
    let running = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/operations/{op}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        (&running.body["done"], support::stage_names(&running.body)),
        (&json!(false), vec!["placed"]),
        "{}",
        running.text
    );

    // The controller records the same end in its journal: the next status event ends the migration.
    let journals: Api<ConfigMap> = Api::namespaced(kube.clone(), tenantplane::k8s::DEFAULT_STATE_NAMESPACE);
    let uid = tcp.metadata.uid.clone().unwrap();
    let journal = ConfigMap {
        metadata: ObjectMeta {
            name: Some(tenantplane::k8s::migration_journal::name(&uid)),
            ..Default::default()
        },
        data: Some([("current".to_string(), done.to_string())].into()),
        ..Default::default()
    };
    journals.create(&Default::default(), &journal).await.unwrap();
    let cue = json!({"status": {"controlPlaneEndpoint": "10.0.0.9:6443"}});
    status_then_mark(&app, &kube, &slug, &token, &id, cue, "10.0.0.9:6443").await;
    wait_op(&app, &slug, &token, &op, "succeeded").await;
    assert!(store::migrations::open(&app.ctx.db, cp).await.unwrap().is_none());
    journals
        .delete(&journal.metadata.name.unwrap(), &Default::default())
        .await
        .unwrap();
}

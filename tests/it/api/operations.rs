//! Operations without a cluster: what a write records, the long poll, the list, and the deadline. The
//! worker's part is played by the store functions it calls; the stages from a real controller are in
//! `e2e::lifecycle`.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::store;
use uuid::Uuid;

use super::{App, spawn_app};
use crate::support::stage_names as stages;

/// The longest long poll (`waitSeconds=60`): the tests' polls either wait it out or answer well before.
const LONGEST: Duration = Duration::from_secs(60);

async fn get(app: &App, slug: &str, token: &str, path: &str) -> super::Reply {
    app.call(
        Method::GET,
        &format!("/api/v1/tenants/{slug}/{path}"),
        Some(token),
        None,
    )
    .await
}

/// How many times the app's database has run the statement that reads one operation
/// (pg_stat_statements; the caller creates the extension first).
async fn operation_reads(app: &App) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "select coalesce(sum(calls), 0)::bigint from pg_stat_statements s
         join pg_database d on d.oid = s.dbid
         where d.datname = current_database() and s.query not like '%pg_stat_statements%'
           and s.query like '%from operations where tenant_id = $1 and id = $2%'",
    )
    .fetch_one(&app.ctx.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_create_records_an_open_operation_at_stage_placed_with_its_generation_and_deadline() {
    let app = spawn_app().await;
    let slug = app.tenant("opnew").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "prod").await;
    let op = &created["operation"];
    assert_eq!(
        (
            op["kind"].as_str(),
            op["state"].as_str(),
            op["done"].as_bool(),
            op["stage"].as_str()
        ),
        (Some("create"), Some("pending"), Some(false), Some("placed"))
    );
    assert_eq!(op["generation"], 1);
    assert_eq!(
        (op["reason"].clone(), op["error"].clone()),
        (Value::Null, Value::Null)
    );
    let created_at: chrono::DateTime<chrono::Utc> = op["createdAt"].as_str().unwrap().parse().unwrap();
    let deadline: chrono::DateTime<chrono::Utc> = op["deadlineAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(deadline - created_at, chrono::Duration::seconds(1800));
    assert_eq!(op["stages"][0]["at"], op["createdAt"]);
    // The 202's operation is the one GET answers.
    let read = get(
        &app,
        &slug,
        &member,
        &format!("operations/{}", op["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    assert_eq!(&read.body, op);
}

#[tokio::test]
async fn the_long_poll_answers_at_the_first_change_and_otherwise_after_the_wait() {
    let app = spawn_app().await;
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let slug = app.tenant("oppoll").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "prod").await;
    let op_id: Uuid = created["operation"]["id"].as_str().unwrap().parse().unwrap();
    let cp_id: Uuid = created["controlPlane"]["id"].as_str().unwrap().parse().unwrap();

    // Nothing changes: the answer comes after its own 1 s wait, not the longest (60 s), unchanged.
    let started = Instant::now();
    let quiet = get(&app, &slug, &member, &format!("operations/{op_id}?waitSeconds=1")).await;
    let waited = started.elapsed();
    assert_eq!(quiet.status, StatusCode::OK, "{}", quiet.text);
    assert!(
        waited >= Duration::from_secs(1) && waited < LONGEST / 2,
        "{waited:?}"
    );
    assert_eq!(quiet.body, created["operation"]);

    // The worker applies it while a poll waits: the poll answers with the new stage at once. The change
    // is committed once the poll has read the operation (its statement counted): committed before that
    // read, it would be the poll's starting point and the poll would wait out its 60 s.
    let reads = operation_reads(&app).await;
    let poll = async {
        let started = Instant::now();
        let r = get(
            &app,
            &slug,
            &member,
            &format!("operations/{op_id}?waitSeconds=60"),
        )
        .await;
        (r, started.elapsed())
    };
    let change = async {
        crate::support::eventually("the poll's read of the operation", LONGEST, || async {
            (operation_reads(&app).await > reads).then_some(())
        })
        .await;
        let mut tx = app.ctx.db.begin().await.unwrap();
        store::operations::reach(&mut tx, cp_id, &["create", "update"], 1, "applied")
            .await
            .unwrap();
        tx.commit().await.unwrap();
    };
    let ((r, took), ()) = tokio::join!(poll, change);
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        took < LONGEST / 2,
        "the poll waited {took:?}: the change did not wake it"
    );
    assert_eq!(
        (r.body["state"].as_str(), stages(&r.body)),
        (Some("running"), vec!["placed", "applied"])
    );

    // A done operation answers at once.
    let mut tx = app.ctx.db.begin().await.unwrap();
    store::operations::end(&mut tx, op_id, store::operations::End::Succeeded("ready"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let started = Instant::now();
    let done = get(
        &app,
        &slug,
        &member,
        &format!("operations/{op_id}?waitSeconds=60"),
    )
    .await;
    assert!(
        started.elapsed() < LONGEST / 2,
        "a done operation waited {:?}",
        started.elapsed()
    );
    assert_eq!(
        (
            done.body["state"].as_str(),
            done.body["done"].as_bool(),
            stages(&done.body)
        ),
        (Some("succeeded"), Some(true), vec!["placed", "applied", "ready"])
    );
}

#[tokio::test]
async fn a_wait_beyond_sixty_seconds_or_not_a_number_is_422_naming_it() {
    let app = spawn_app().await;
    let slug = app.tenant("opwait").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "prod").await;
    let op = created["operation"]["id"].as_str().unwrap();
    let r = get(&app, &slug, &member, &format!("operations/{op}?waitSeconds=61")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(
        r.body["errors"],
        json!([{"field": "waitSeconds", "message": "must be between 0 and 60"}])
    );
    let r = get(&app, &slug, &member, &format!("operations/{op}?waitSeconds=soon")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.body["errors"][0]["field"], "query");
}

#[tokio::test]
async fn the_list_pages_newest_first_with_filters_and_stays_inside_the_tenant() {
    let app = spawn_app().await;
    let slug = app.tenant("oplist").await;
    let member = app.token(&slug, "tenant-member").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let created = app.control_plane(&slug, &member, name).await;
        ids.push((
            created["operation"]["id"].as_str().unwrap().to_string(),
            created["controlPlane"]["id"].as_str().unwrap().to_string(),
        ));
    }
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/control-planes/{}", ids[0].1),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let delete_op = r.body["operation"]["id"].as_str().unwrap().to_string();

    // Newest first, two per page, every operation once.
    let first = get(&app, &slug, &member, "operations?limit=2").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let cursor = first.body["nextCursor"].as_str().unwrap();
    let second = get(
        &app,
        &slug,
        &member,
        &format!("operations?limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(second.body["nextCursor"], Value::Null);
    let listed: Vec<&str> = first.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second.body["items"].as_array().unwrap())
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [delete_op.as_str(), &ids[2].0, &ids[1].0, &ids[0].0]);
    // The delete superseded the open create of the same control plane.
    let superseded = &second.body["items"][1];
    assert_eq!(
        (superseded["state"].as_str(), superseded["reason"].as_str()),
        (Some("failed"), Some("Superseded"))
    );

    // Filters.
    let only = |query: String| {
        let (app, slug, member) = (&app, &slug, &member);
        async move {
            let r = get(app, slug, member, &format!("operations?{query}")).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            r.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        only(format!("controlPlane={}", ids[0].1)).await,
        [delete_op.clone(), ids[0].0.clone()]
    );
    assert_eq!(only("kind=delete".into()).await, std::slice::from_ref(&delete_op));
    assert_eq!(
        only("state=pending".into()).await,
        [delete_op, ids[2].0.clone(), ids[1].0.clone()]
    );
    assert_eq!(only("state=failed&kind=create".into()).await, [ids[0].0.clone()]);

    // Bad filters name their field; another tenant sees none of it.
    let r = get(
        &app,
        &slug,
        &member,
        "operations?controlPlane=0000000000000000000000000000000a",
    )
    .await;
    assert_eq!(
        (r.status, r.body["errors"].clone()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{"field": "controlPlane", "message": "must be a control-plane id (a UUID)"}])
        )
    );
    let r = get(&app, &slug, &member, "operations?state=done").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let other = app.tenant("opother").await;
    let stranger = app.token(&other, "tenant-admin").await;
    assert_eq!(
        get(&app, &slug, &stranger, "operations").await.status,
        StatusCode::NOT_FOUND
    );
    let theirs = get(&app, &other, &stranger, "operations").await;
    assert_eq!(theirs.body["items"], json!([]));
    let r = get(&app, &other, &stranger, &format!("operations/{}", ids[1].0)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_operation_past_its_deadline_fails_naming_its_last_stage_and_the_ready_condition() {
    let app = spawn_app().await;
    let slug = app.tenant("opdead").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "prod").await;
    let op: Uuid = created["operation"]["id"].as_str().unwrap().parse().unwrap();
    let cp: Uuid = created["controlPlane"]["id"].as_str().unwrap().parse().unwrap();
    let ready = json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Provisioning",
                                        "message": "Deployment prod: 0/1 ready"}]});
    sqlx::query("update control_planes set status = $2 where id = $1")
        .bind(cp)
        .bind(&ready)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    // Not yet due: nothing happens.
    assert_eq!(store::operations::expire(&app.ctx.db).await.unwrap(), 0);
    sqlx::query(
        "update operations set created_at = created_at - interval '1000 seconds',
                                   deadline_at = created_at - interval '100 seconds' where id = $1",
    )
    .bind(op)
    .execute(&app.ctx.db)
    .await
    .unwrap();
    let expired = store::operations::expire(&app.ctx.db).await.unwrap();
    assert!(expired >= 1, "{expired}");
    let r = get(&app, &slug, &member, &format!("operations/{op}")).await;
    assert_eq!(
        (
            r.body["state"].as_str(),
            r.body["reason"].as_str(),
            r.body["error"].as_str()
        ),
        (
            Some("failed"),
            Some("DeadlineExceeded"),
            Some(
                "not done within 900 s (its deadline); last stage: placed; Ready=False (Provisioning): Deployment prod: 0/1 ready"
            )
        ),
        "{}",
        r.text
    );
    // A late status cannot revive it.
    let advance = store::operations::Advance {
        generation: 1,
        stages: &[
            "placed",
            "applied",
            "datastoreReady",
            "certificates",
            "deployed",
            "ready",
        ],
        done: true,
        failed: None,
    };
    let tenant = super::tenant_id(&app, &slug).await;
    assert_eq!(
        store::operations::advance(&app.ctx.db, tenant, cp, &advance)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_status_event_racing_the_workers_apply_stamps_each_stage_once() {
    let app = spawn_app().await;
    let slug = app.tenant("oprace").await;
    let member = app.token(&slug, "tenant-member").await;
    let created = app.control_plane(&slug, &member, "prod").await;
    let op = created["operation"]["id"].as_str().unwrap().to_string();
    let cp: Uuid = created["controlPlane"]["id"].as_str().unwrap().parse().unwrap();
    let tenant = super::tenant_id(&app, &slug).await;
    // The worker's transaction stamps `applied` and holds the row until it commits ...
    let mut worker = app.ctx.db.begin().await.unwrap();
    store::operations::reach(&mut worker, cp, &["create", "update"], 1, "applied")
        .await
        .unwrap();
    // ... while the status loop, on another connection, sees the TCP already rendered at generation 1.
    let db = app.ctx.db.clone();
    let status = tokio::spawn(async move {
        let advance = store::operations::Advance {
            generation: 1,
            stages: &["placed", "applied", "datastoreReady"],
            done: false,
            failed: None,
        };
        store::operations::advance(&db, tenant, cp, &advance)
            .await
            .unwrap()
    });
    // Its statement waits for the lock (seen in pg_stat_activity), not only "has not finished yet".
    crate::support::eventually(
        "the status write waiting for a lock",
        Duration::from_secs(60),
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity \
             where datname = current_database() and wait_event_type = 'Lock'",
            )
            .fetch_one(&app.ctx.db)
            .await
            .unwrap();
            (waiting > 0).then_some(())
        },
    )
    .await;
    assert!(
        !status.is_finished(),
        "the status write should wait for the worker's row lock"
    );
    worker.commit().await.unwrap();
    assert_eq!(status.await.unwrap(), 1);
    let r = get(&app, &slug, &member, &format!("operations/{op}")).await;
    assert_eq!(
        stages(&r.body),
        ["placed", "applied", "datastoreReady"],
        "{}",
        r.text
    );
}

//! `controlPlaneEvents` over WebSocket: status changes committed by another connection, tenant isolation,
//! both protocols, and slow consumers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection as _;
use tenantplane::store;
use uuid::Uuid;

use super::{Incoming, Ws, settled, subscribe, ws_next, ws_open, ws_ready, ws_send};
use crate::api::{App, spawn_app, spawn_app_with_graphql, tenant_id};

/// A tenant with a viewer token and one control plane: `(slug, viewer, tenant id, control-plane id)`.
async fn tenant_with_cp(app: &App, prefix: &str, name: &str) -> (String, String, Uuid, Uuid) {
    let slug = app.tenant(prefix).await;
    let member = app.token(&slug, "tenant-member").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let cp = app.control_plane(&slug, &member, name).await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (slug.clone(), viewer, tenant_id(app, &slug).await, cp)
}

/// A separate PostgreSQL connection (not the server's pool), as the worker's would be.
async fn writer(app: &App) -> sqlx::PgConnection {
    sqlx::PgConnection::connect_with(&app.ctx.db.connect_options())
        .await
        .unwrap()
}

fn ready_status(endpoint: &str) -> Value {
    json!({"endpoint": endpoint, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "the control plane answers /readyz"}]})
}

/// Writes statuses until the subscription delivers one (the server's LISTEN starts with the first
/// subscriber), then writes a marker and reads up to it, so that no warm-up event is left over for the
/// changes the tests measure (events arrive in commit order).
async fn warm_up(ws: &mut Ws, db: &mut sqlx::PgConnection, tenant: Uuid, cp: Uuid) {
    let mut delivered = false;
    for i in 0..50 {
        store::outbox::write_status(&mut *db, tenant, cp, "Provisioning", &json!({"warmUp": i}))
            .await
            .unwrap();
        if let Ok(Some(Ok(_))) =
            tokio::time::timeout(Duration::from_millis(200), futures::StreamExt::next(ws)).await
        {
            delivered = true;
            break;
        }
    }
    assert!(delivered, "the subscription never delivered an event");
    store::outbox::write_status(
        &mut *db,
        tenant,
        cp,
        "Provisioning",
        &json!({"endpoint": "warm-up-done"}),
    )
    .await
    .unwrap();
    loop {
        match ws_next(ws, Duration::from_secs(10)).await {
            Incoming::Json(m) if m.to_string().contains("warm-up-done") => return,
            Incoming::Json(_) => continue,
            other => panic!("warm-up: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_subscriber_receives_its_tenants_committed_status_change_within_one_second() {
    let app = spawn_app().await;
    let (slug, viewer, tenant, cp) = tenant_with_cp(&app, "gq-sub", "live").await;
    let (_, _, other_tenant, other_cp) = tenant_with_cp(&app, "gq-other", "theirs").await;
    let mut ws = ws_ready(&app, &viewer).await;
    subscribe(&mut ws, "1", &slug).await;
    let mut db = writer(&app).await;
    warm_up(&mut ws, &mut db, tenant, cp).await;

    // Another tenant's change first: it must never reach this subscriber.
    store::outbox::write_status(
        &mut db,
        other_tenant,
        other_cp,
        "Ready",
        &ready_status("10.9.9.9:6443"),
    )
    .await
    .unwrap();
    let mut tx = db.begin().await.unwrap();
    store::outbox::write_status(&mut *tx, tenant, cp, "Ready", &ready_status("10.0.0.1:6443"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let committed = Instant::now();
    let event = ws_next(&mut ws, Duration::from_secs(5)).await;
    let latency = committed.elapsed();
    assert_eq!(
        event,
        Incoming::Json(
            json!({"id": "1", "type": "next", "payload": {"data": {"controlPlaneEvents": {"controlPlane": {
                "name": "live", "phase": "READY", "endpoint": "10.0.0.1:6443",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "the control plane answers /readyz"}]
            }}}}})
        )
    );
    assert!(latency < Duration::from_secs(1), "took {latency:?}");

    // A write that changes nothing notifies nobody; the next real change arrives.
    store::outbox::write_status(&mut db, tenant, cp, "Ready", &ready_status("10.0.0.1:6443"))
        .await
        .unwrap();
    store::outbox::write_status(
        &mut db,
        tenant,
        cp,
        "NotReady",
        &json!({"endpoint": "10.0.0.1:6443"}),
    )
    .await
    .unwrap();
    let Incoming::Json(next) = ws_next(&mut ws, Duration::from_secs(5)).await else {
        panic!("expected an event")
    };
    assert_eq!(
        next["payload"]["data"]["controlPlaneEvents"]["controlPlane"]["phase"],
        "NOT_READY"
    );
}

#[tokio::test]
async fn the_legacy_graphql_ws_protocol_streams_the_same_events() {
    let app = spawn_app().await;
    let (slug, viewer, tenant, cp) = tenant_with_cp(&app, "gq-legacy", "old").await;
    let mut ws = ws_open(&app, "graphql-ws").await;
    ws_send(
        &mut ws,
        json!({"type": "connection_init", "payload": {"token": viewer}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "connection_ack"}))
    );
    ws_send(
        &mut ws,
        json!({"id": "7", "type": "start", "payload": {"query": super::EVENTS, "variables": {"t": slug}}}),
    )
    .await;
    let mut db = writer(&app).await;
    warm_up(&mut ws, &mut db, tenant, cp).await;
    store::outbox::write_status(&mut db, tenant, cp, "Ready", &ready_status("10.0.0.2:6443"))
        .await
        .unwrap();
    let Incoming::Json(event) = ws_next(&mut ws, Duration::from_secs(5)).await else {
        panic!("expected an event")
    };
    assert_eq!((&event["type"], &event["id"]), (&json!("data"), &json!("7")));
    assert_eq!(
        event["payload"]["data"]["controlPlaneEvents"]["controlPlane"]["endpoint"],
        "10.0.0.2:6443"
    );
}

#[tokio::test]
async fn subscribing_to_another_tenant_is_not_found() {
    let app = spawn_app().await;
    let (_, viewer, _, _) = tenant_with_cp(&app, "gq-mine", "mine").await;
    let (other, _, _, _) = tenant_with_cp(&app, "gq-notmine", "secret-project-y").await;
    let mut ws = ws_ready(&app, &viewer).await;
    subscribe(&mut ws, "1", &other).await;
    let Incoming::Json(error) = ws_next(&mut ws, Duration::from_secs(5)).await else {
        panic!("expected an error")
    };
    assert_eq!(
        (
            &error["type"],
            &error["payload"]["data"],
            &error["payload"]["errors"][0]["message"],
            &error["payload"]["errors"][0]["extensions"]["code"]
        ),
        (
            &json!("next"),
            &Value::Null,
            &json!("tenant not found"),
            &json!("NOT_FOUND")
        )
    );
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(json!({"id": "1", "type": "complete"}))
    );
}

#[tokio::test]
async fn a_subscription_before_connection_init_closes_with_4401() {
    let app = spawn_app().await;
    let mut ws = ws_open(&app, "graphql-transport-ws").await;
    subscribe(&mut ws, "1", "anything").await;
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Closed(4401, "Unauthorized: send connection_init first".into())
    );
}

#[tokio::test]
async fn a_slow_subscriber_is_closed_with_4008_and_others_keep_receiving() {
    let settings = tenantplane::api::graphql::GraphqlSettings {
        subscription_buffer: 8,
        ..Default::default()
    };
    let app = spawn_app_with_graphql(settings).await;
    let (slug, viewer, tenant, cp) = tenant_with_cp(&app, "gq-slow", "busy").await;
    let mut slow = ws_ready(&app, &viewer).await;
    subscribe(&mut slow, "1", &slug).await;
    let mut db = writer(&app).await;
    warm_up(&mut slow, &mut db, tenant, cp).await;

    // 60 changes of ~128 KiB each while the client reads nothing: 7.5 MiB, more than the socket buffers
    // hold (4 MiB send buffer at most here), so the server's send blocks and the 8-event buffer overflows.
    let big = "x".repeat(128 * 1024);
    let options = app.ctx.db.connect_options();
    let mut producer = sqlx::PgConnection::connect_with(&options).await.unwrap();
    for i in 0..60 {
        let status = json!({"endpoint": format!("10.1.0.{i}:6443"), "conditions": [
            {"type": "Ready", "status": "False", "reason": "Padding", "message": big}]});
        store::outbox::write_status(&mut producer, tenant, cp, "NotReady", &status)
            .await
            .unwrap();
    }
    // Now read slowly (4 events/s, slower than the server loads and broadcasts them even on a busy
    // machine): what was buffered arrives, then the close frame.
    let mut received = 0;
    let closed = loop {
        match ws_next(&mut slow, Duration::from_secs(30)).await {
            Incoming::Json(_) => {
                received += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Incoming::Closed(code, reason) => break (code, reason),
        }
    };
    assert_eq!(
        closed,
        (
            4008,
            "slow consumer: the client fell too far behind the event stream".to_string()
        ),
        "after {received} events"
    );
    assert!(received < 60, "a slow client got every event ({received})");

    // The server is fine: a new subscriber gets the next change.
    let mut fresh = ws_ready(&app, &viewer).await;
    subscribe(&mut fresh, "2", &slug).await;
    warm_up(&mut fresh, &mut db, tenant, cp).await;
}

#[tokio::test]
async fn an_oversized_websocket_message_closes_with_1009() {
    let app = spawn_app().await;
    let mut ws = ws_open(&app, "graphql-transport-ws").await;
    ws_send(
        &mut ws,
        json!({"type": "connection_init", "payload": {"token": "x".repeat(40 * 1024)}}),
    )
    .await;
    match ws_next(&mut ws, Duration::from_secs(5)).await {
        Incoming::Closed(1009, reason) => assert!(reason.starts_with("message too big: "), "{reason}"),
        other => panic!("expected 1009, got {other:?}"),
    }
}

#[tokio::test]
async fn more_than_100_subscriptions_on_one_connection_close_it_with_4400() {
    let app = spawn_app().await;
    let (slug, viewer, _, _) = tenant_with_cp(&app, "gq-many", "many").await;
    let mut ws = ws_ready(&app, &viewer).await;
    for id in 0..101 {
        subscribe(&mut ws, &id.to_string(), &slug).await;
    }
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(10)).await,
        Incoming::Closed(
            4400,
            "too many subscriptions on one connection (at most 100)".into()
        )
    );
    // Completed subscriptions do not count: 100 start and stop, then 100 more fit.
    let mut ws = ws_ready(&app, &viewer).await;
    for round in 0..2 {
        for id in 0..100 {
            subscribe(&mut ws, &format!("{round}-{id}"), &slug).await;
        }
        for id in 0..100 {
            ws_send(
                &mut ws,
                json!({"id": format!("{round}-{id}"), "type": "complete"}),
            )
            .await;
        }
        for _ in 0..100 {
            let Incoming::Json(m) = ws_next(&mut ws, Duration::from_secs(10)).await else {
                panic!("round {round}: the connection closed")
            };
            assert_eq!(m["type"], "complete", "{m}");
        }
    }
}

/// Announces operation `op` of `tenant` without changing it, until the subscription delivers it (the
/// server's LISTEN starts with the first subscriber); returns the delivered event.
async fn warm_up_operations(ws: &mut Ws, db: &mut sqlx::PgConnection, tenant: Uuid, op: &str) -> Value {
    for _ in 0..50 {
        sqlx::query("select pg_notify('operation_progress', $1)")
            .bind(format!("{tenant}:{op}"))
            .execute(&mut *db)
            .await
            .unwrap();
        if let Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text)))) =
            tokio::time::timeout(Duration::from_millis(200), futures::StreamExt::next(ws)).await
        {
            return serde_json::from_str(&text).unwrap();
        }
    }
    panic!("the operation subscription never delivered an event")
}

#[tokio::test]
async fn operation_events_stream_the_stages_of_the_tenants_operation_and_the_queries_read_them() {
    let app = spawn_app().await;
    let (slug, viewer, tenant, cp) = tenant_with_cp(&app, "gq-ops", "live").await;
    let (_, _, _, other_cp) = tenant_with_cp(&app, "gq-ops-other", "theirs").await;

    let page = super::data(
        &app,
        &viewer,
        "query($t: String!) { operations(tenant: $t) { nodes { id kind state done stage stages { stage } } pageInfo { hasNextPage } } }",
        json!({"t": slug}),
    )
    .await;
    let op = page["operations"]["nodes"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        page,
        json!({"operations": {"nodes": [{"id": op, "kind": "CREATE", "state": "PENDING", "done": false,
                                          "stage": "PLACED", "stages": [{"stage": "PLACED"}]}],
                              "pageInfo": {"hasNextPage": false}}})
    );
    let lookup = "query($t: String!, $id: ID!) { operation(tenant: $t, id: $id) { id state } }";
    assert_eq!(
        super::data(&app, &viewer, lookup, json!({"t": slug, "id": op})).await,
        json!({"operation": {"id": op, "state": "PENDING"}})
    );
    assert_eq!(
        super::data(&app, &viewer, lookup, json!({"t": slug, "id": Uuid::new_v4()})).await,
        json!({"operation": null})
    );

    let mut ws = ws_ready(&app, &viewer).await;
    let events = "subscription($t: String!, $op: ID) { operationEvents(tenant: $t, operation: $op) { kind operation { id state stage done } } }";
    ws_send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": events, "variables": {"t": slug, "op": op}}}),
    )
    .await;
    let mut db = writer(&app).await;
    let first = warm_up_operations(&mut ws, &mut db, tenant, &op).await;
    assert_eq!(
        first["payload"]["data"]["operationEvents"]["operation"]["state"],
        "PENDING"
    );
    assert_eq!(first["payload"]["data"]["operationEvents"]["kind"], "STARTED");

    // Another tenant's operation moves first: it never reaches this subscriber; then this one's does.
    for id in [other_cp, cp] {
        let mut tx = db.begin().await.unwrap();
        store::operations::reach(&mut tx, id, &["create"], 1, "applied")
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let committed = Instant::now();
    let mut next = ws_next(&mut ws, Duration::from_secs(5)).await;
    // Warm-up announcements still in flight are the unchanged operation; skip them.
    while matches!(&next, Incoming::Json(m) if m["payload"]["data"]["operationEvents"]["operation"]["state"] == "PENDING")
    {
        next = ws_next(&mut ws, Duration::from_secs(5)).await;
    }
    assert!(
        committed.elapsed() < Duration::from_secs(5),
        "not pushed: {:?}",
        committed.elapsed()
    );
    assert_eq!(
        next,
        Incoming::Json(
            json!({"id": "1", "type": "next", "payload": {"data": {"operationEvents": {"kind": "PROGRESSED", "operation": {
            "id": op, "state": "RUNNING", "stage": "APPLIED", "done": false}}}}})
        )
    );
    // Its end is the last event: FINISHED.
    let mut tx = db.begin().await.unwrap();
    store::operations::end(
        &mut tx,
        op.parse().unwrap(),
        store::operations::End::Failed("Test", "ended by the test"),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let Incoming::Json(last) = ws_next(&mut ws, Duration::from_secs(5)).await else {
        panic!("expected the end")
    };
    assert_eq!(
        last["payload"]["data"]["operationEvents"],
        json!({"kind": "FINISHED", "operation": {"id": op, "state": "FAILED", "stage": "APPLIED", "done": true}})
    );
}

#[tokio::test]
async fn control_plane_events_say_what_happened_and_a_deletion_is_the_last() {
    let app = spawn_app().await;
    let (slug, viewer, tenant, cp) = tenant_with_cp(&app, "gq-kinds", "short").await;
    let mut ws = ws_ready(&app, &viewer).await;
    let query =
        "subscription($t: String!) { controlPlaneEvents(tenant: $t) { kind controlPlane { name phase } } }";
    ws_send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"t": slug}}}),
    )
    .await;
    let mut db = writer(&app).await;
    // The first status write may race the subscription's LISTEN: write until one arrives.
    let mut changed = None;
    for phase in [
        "Provisioning",
        "NotReady",
        "Provisioning",
        "NotReady",
        "Provisioning",
    ] {
        store::outbox::write_status(&mut db, tenant, cp, phase, &json!({"phase": phase}))
            .await
            .unwrap();
        if let Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text)))) =
            tokio::time::timeout(Duration::from_millis(500), futures::StreamExt::next(&mut ws)).await
        {
            changed = Some(serde_json::from_str::<Value>(&text).unwrap());
            break;
        }
    }
    let changed = changed.expect("a status event");
    assert_eq!(
        changed["payload"]["data"]["controlPlaneEvents"]["kind"], "CHANGED",
        "{changed}"
    );
    // Drain what the other writes announced, then record it gone.
    while tokio::time::timeout(Duration::from_millis(300), futures::StreamExt::next(&mut ws))
        .await
        .is_ok()
    {}
    let mut tx = db.begin().await.unwrap();
    store::outbox::mark_deleted(&mut tx, tenant, cp).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(
            json!({"id": "1", "type": "next", "payload": {"data": {"controlPlaneEvents": {
            "kind": "DELETED", "controlPlane": {"name": "short", "phase": "DELETED"}}}}})
        )
    );
}

#[tokio::test]
async fn a_tenant_has_at_most_its_sockets_and_live_subscriptions_whatever_its_tokens() {
    let app = spawn_app_with_graphql(tenantplane::api::graphql::GraphqlSettings {
        max_sockets_per_tenant: 2,
        max_subscriptions_per_tenant: 3,
        ..Default::default()
    })
    .await;
    let (slug, viewer, _, _) = tenant_with_cp(&app, "gq-caps", "caps").await;
    let (second_token, third_token) = (
        app.token(&slug, "tenant-viewer").await,
        app.token(&slug, "tenant-viewer").await,
    );
    let mut first = ws_ready(&app, &viewer).await;
    let mut second = ws_ready(&app, &second_token).await;
    // A third connection of the tenant, with a token of its own, is refused at connection_init.
    let mut third = ws_open(&app, "graphql-transport-ws").await;
    ws_send(
        &mut third,
        json!({"type": "connection_init", "payload": {"token": third_token}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut third, Duration::from_secs(5)).await,
        Incoming::Closed(
            1013,
            "try again later: too many WebSocket connections for this tenant (at most 2)".into()
        )
    );
    // Another tenant is not affected.
    let other = app.tenant("gq-caps-other").await;
    let outsider = app.token(&other, "tenant-viewer").await;
    let mut elsewhere = ws_ready(&app, &outsider).await;
    // Three live subscriptions over the two connections; a fourth is refused, its connection stays.
    subscribe(&mut first, "1", &slug).await;
    subscribe(&mut first, "2", &slug).await;
    assert_eq!(settled(&mut first).await, Vec::<String>::new());
    subscribe(&mut second, "3", &slug).await;
    subscribe(&mut second, "4", &slug).await;
    assert_eq!(
        ws_next(&mut second, Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "error", "id": "4", "payload": [{
            "message": "too many live subscriptions for this tenant (at most 3)",
            "extensions": {"code": "TOO_MANY_SUBSCRIPTIONS"}}]}))
    );
    subscribe(&mut elsewhere, "1", &other).await;
    assert_eq!(settled(&mut elsewhere).await, Vec::<String>::new());
    // A subscription the client stops gives its place back.
    ws_send(&mut first, json!({"id": "1", "type": "complete"})).await;
    assert!(!settled(&mut first).await.contains(&"error".to_string()));
    subscribe(&mut second, "5", &slug).await;
    assert_eq!(settled(&mut second).await, Vec::<String>::new());
    // A closed connection gives back its place and its subscriptions: a new one is accepted.
    drop(first);
    crate::support::eventually("a connection in the freed place", Duration::from_secs(20), || {
        let (app, token) = (&app, &third_token);
        async move {
            let mut ws = ws_open(app, "graphql-transport-ws").await;
            ws_send(
                &mut ws,
                json!({"type": "connection_init", "payload": {"token": token}}),
            )
            .await;
            (ws_next(&mut ws, Duration::from_secs(5)).await
                == Incoming::Json(json!({"type": "connection_ack"})))
            .then_some(ws)
        }
    })
    .await;
}

#[tokio::test]
async fn a_burst_of_one_tenants_events_does_not_make_another_tenants_subscriber_lag() {
    use tenantplane::service::{self, events::Hub};
    use tokio::sync::broadcast::error::RecvError;
    let app = spawn_app().await;
    let (busy_slug, busy_viewer, busy, busy_cp) = tenant_with_cp(&app, "burst", "busy").await;
    let (quiet_slug, quiet_viewer, quiet, quiet_cp) = tenant_with_cp(&app, "calm", "quiet").await;
    // Subscribers may fall four events of their own tenant behind.
    let hub = Hub::new(4);
    let who = |token: String| {
        let ctx = app.ctx.clone();
        async move { service::tokens::authenticate(&ctx, &token).await.unwrap() }
    };
    let (busy_who, quiet_who) = (who(busy_viewer).await, who(quiet_viewer).await);
    let (_, mut busy_events) = service::events::subscribe(&app.ctx, &hub, &busy_who, &busy_slug)
        .await
        .unwrap();
    let (_, mut quiet_events) = service::events::subscribe(&app.ctx, &hub, &quiet_who, &quiet_slug)
        .await
        .unwrap();
    // Twenty committed changes of the busy tenant, then one of the quiet tenant's; the busy tenant's
    // subscriber reads nothing.
    let notify = |tenant: Uuid, cp: Uuid| {
        let db = app.ctx.db.clone();
        async move {
            sqlx::query("select pg_notify('control_plane_status', $1)")
                .bind(format!("{tenant}:{cp}"))
                .execute(&db)
                .await
                .unwrap();
        }
    };
    for _ in 0..20 {
        notify(busy, busy_cp).await;
    }
    notify(quiet, quiet_cp).await;
    // Events are relayed in commit order: the quiet subscriber's first event is its own, after the burst
    // (none of the burst reaches it, so it cannot fall behind it).
    let event = tokio::time::timeout(Duration::from_secs(20), quiet_events.recv())
        .await
        .expect("the quiet tenant's event in time")
        .unwrap();
    assert_eq!((event.tenant_id, event.control_plane.id), (quiet, quiet_cp));
    // The busy tenant's own subscriber fell 16 behind its own burst.
    assert_eq!(busy_events.recv().await.unwrap_err(), RecvError::Lagged(16));
}

//! A WebSocket connection's token is checked for every operation and while the connection is idle: a
//! revoked or expired token closes it with `4403` (issue 17, item 6).

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;
use tenantplane::api::graphql::GraphqlSettings;

use super::{Incoming, settled, subscribe, ws_next, ws_ready, ws_send};
use crate::api::{App, spawn_app_with_graphql};

const MINT: &str =
    "mutation($input: MintTokenInput!) { mintToken(input: $input) { token userErrors { code } } }";

fn settings(recheck_seconds: f64) -> GraphqlSettings {
    GraphqlSettings {
        token_recheck_seconds: recheck_seconds,
        ..Default::default()
    }
}

/// The jti of `token`.
async fn jti(app: &App, token: &str) -> String {
    let r = app.call(Method::GET, "/api/v1/viewer", Some(token), None).await;
    r.body["tokenId"].as_str().unwrap().to_string()
}

async fn revoke(app: &App, slug: &str, admin: &str, jti: &str) {
    let r = app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/tokens/{jti}"),
            Some(admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

async fn tokens(app: &App) -> i64 {
    sqlx::query_scalar("select count(*) from api_tokens")
        .fetch_one(&app.ctx.db)
        .await
        .unwrap()
}

fn mint(id: &str, slug: &str) -> serde_json::Value {
    json!({"id": id, "type": "subscribe", "payload": {"query": MINT,
           "variables": {"input": {"tenant": slug, "role": "TENANT_ADMIN", "ttlSeconds": 600}}}})
}

#[tokio::test]
async fn a_mutation_over_the_socket_of_a_revoked_token_is_refused_and_the_socket_closes_with_4403() {
    // No periodic re-check during the test: the operation's own check refuses it.
    let app = spawn_app_with_graphql(settings(3600.0)).await;
    let slug = app.tenant("ws-revoke").await;
    let holder = app.token(&slug, "tenant-admin").await;
    let other_admin = app.token(&slug, "tenant-admin").await;
    let mut ws = ws_ready(&app, &holder).await;
    ws_send(&mut ws, mint("1", &slug)).await;
    match ws_next(&mut ws, Duration::from_secs(5)).await {
        Incoming::Json(m) => {
            assert_eq!((&m["type"], &m["id"]), (&json!("next"), &json!("1")), "{m}");
            assert!(m["payload"]["data"]["mintToken"]["token"].is_string(), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "complete", "id": "1"}))
    );

    let before = tokens(&app).await;
    revoke(&app, &slug, &other_admin, &jti(&app, &holder).await).await;
    // The mutation right after the revocation: refused, whichever comes first (the announcement closing
    // the socket, or the operation's own check).
    let _ = futures::SinkExt::send(
        &mut ws,
        tokio_tungstenite::tungstenite::Message::Text(mint("2", &slug).to_string().into()),
    )
    .await;
    let refused = json!({"type": "error", "id": "2", "payload": [
        {"message": "the token was revoked", "extensions": {"code": "UNAUTHENTICATED"}}]});
    let closed = match ws_next(&mut ws, Duration::from_secs(5)).await {
        Incoming::Json(m) if m == refused => ws_next(&mut ws, Duration::from_secs(5)).await,
        other => other,
    };
    assert_eq!(
        closed,
        Incoming::Closed(4403, "Forbidden: the token was revoked".into())
    );
    assert_eq!(tokens(&app).await, before, "no token was minted");
}

#[tokio::test]
async fn each_operation_rechecks_the_token_even_when_no_revocation_was_announced() {
    let app = spawn_app_with_graphql(settings(3600.0)).await;
    let slug = app.tenant("ws-op").await;
    let holder = app.token(&slug, "tenant-admin").await;
    let mut ws = ws_ready(&app, &holder).await;
    // Revoked behind the API's back (as if the announcement were lost): only the table says so.
    sqlx::query("update api_tokens set revoked_at = now() where jti = $1::uuid")
        .bind(jti(&app, &holder).await)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let before = tokens(&app).await;
    ws_send(&mut ws, mint("1", &slug)).await;
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Json(json!({"type": "error", "id": "1", "payload": [
            {"message": "the token was revoked", "extensions": {"code": "UNAUTHENTICATED"}}]}))
    );
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(5)).await,
        Incoming::Closed(4403, "Forbidden: the token was revoked".into())
    );
    assert_eq!(tokens(&app).await, before, "no token was minted");
}

#[tokio::test]
async fn an_idle_socket_with_a_live_subscription_closes_on_the_periodic_recheck() {
    let app = spawn_app_with_graphql(settings(0.5)).await;
    let slug = app.tenant("ws-idle").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let mut ws = ws_ready(&app, &viewer).await;
    subscribe(&mut ws, "1", &slug).await;
    // The subscription is live (its token check passed: nothing came before the pong); now the token
    // goes, unannounced.
    assert_eq!(settled(&mut ws).await, Vec::<String>::new());
    sqlx::query("update api_tokens set revoked_at = now() where jti = $1::uuid")
        .bind(jti(&app, &viewer).await)
        .execute(&app.ctx.db)
        .await
        .unwrap();
    let started = Instant::now();
    // Only the periodic re-check (every 0.5 s) can see it: the token itself lives an hour, so without
    // the re-check the socket would stay open far past this wait.
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(60)).await,
        Incoming::Closed(4403, "Forbidden: the token was revoked".into())
    );
    eprintln!(
        "the periodic re-check (0.5 s) closed the socket after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_socket_closes_with_4403_when_its_token_expires() {
    let app = spawn_app_with_graphql(settings(3600.0)).await;
    let slug = app.tenant("ws-exp").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    // The token's record expires in 10 s (what authentication reads as the token's expiry): time enough
    // to connect and subscribe on a loaded machine.
    let jti = jti(&app, &viewer).await;
    let expires_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "update api_tokens set expires_at = now() + interval '10 seconds' where jti = $1::uuid \
         returning expires_at",
    )
    .bind(&jti)
    .fetch_one(&app.ctx.db)
    .await
    .unwrap();
    let mut ws = ws_ready(&app, &viewer).await;
    subscribe(&mut ws, "1", &slug).await;
    assert_eq!(
        settled(&mut ws).await,
        Vec::<String>::new(),
        "subscribed before the expiry"
    );
    // Without the expiry timer only the periodic re-check (an hour here) would close it.
    let closed = ws_next(&mut ws, Duration::from_secs(70)).await;
    let closed_at = chrono::Utc::now();
    eprintln!("a socket whose token expired at {expires_at} closed at {closed_at}");
    // The subscription itself ends at expiry too (`complete`); the connection closes right after.
    let closed = match closed {
        Incoming::Json(m) if m == json!({"type": "complete", "id": "1"}) => {
            ws_next(&mut ws, Duration::from_secs(5)).await
        }
        other => other,
    };
    assert_eq!(
        closed,
        Incoming::Closed(4403, "Forbidden: the token expired".into())
    );
    // Not before the expiry (the timer is armed from the record's expiry, on this machine's clock).
    assert!(
        closed_at >= expires_at,
        "closed at {closed_at}, before the expiry at {expires_at}"
    );
}

#[tokio::test]
async fn an_announced_revocation_closes_an_idle_socket_at_once() {
    // The periodic re-check is an hour away: only the revocation's NOTIFY can close the socket within
    // the wait below.
    let app = spawn_app_with_graphql(settings(3600.0)).await;
    let slug = app.tenant("ws-notify").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let bystander = app.token(&slug, "tenant-viewer").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let mut ws = ws_ready(&app, &viewer).await;
    subscribe(&mut ws, "1", &slug).await;
    let mut other = ws_ready(&app, &bystander).await;
    subscribe(&mut other, "1", &slug).await;
    // Both subscriptions passed their token check before the revocation.
    assert_eq!(settled(&mut ws).await, Vec::<String>::new());
    assert_eq!(settled(&mut other).await, Vec::<String>::new());
    revoke(&app, &slug, &admin, &jti(&app, &viewer).await).await;
    let started = Instant::now();
    assert_eq!(
        ws_next(&mut ws, Duration::from_secs(60)).await,
        Incoming::Closed(4403, "Forbidden: the token was revoked".into())
    );
    eprintln!(
        "an announced revocation closed the socket after {:?}",
        started.elapsed()
    );
    // Another token's connection stays open: it still answers an operation.
    ws_send(
        &mut other,
        json!({"id": "2", "type": "subscribe", "payload": {"query": "{ viewer { role } }"}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut other, Duration::from_secs(5)).await,
        Incoming::Json(
            json!({"type": "next", "id": "2", "payload": {"data": {"viewer": {"role": "TENANT_VIEWER"}}}})
        )
    );
}

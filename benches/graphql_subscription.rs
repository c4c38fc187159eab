//! GraphQL subscription latency: from the commit of a control plane's status change (on its own
//! connection, as the worker's) to the `next` message on a `graphql-transport-ws` subscriber.
//!
//! Starts its own PostgreSQL and the API router in process, one tenant with one control plane and one
//! subscriber, then commits 1,000 sequential status changes (50 at `TENANTPLANE_BENCH_SIZE=smoke`) and
//! prints percentiles. A missing or unexpected event, or no sample, fails the run (exit 1).
//! Run: `cargo bench --bench graphql_subscription --profile dev` (or without `--profile dev` for release).

use std::time::Duration;

use anyhow::Context as _;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use sqlx::Connection as _;
use tenantplane::{
    domain::Role,
    service::{self, model::CreateControlPlane},
    store,
};
use tenantplane_devenv::localenv::{self, postgres::LocalPostgres};
use tenantplane_testkit::app;
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

mod common;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let changes = common::Size::from_env().pick(50, 1000);
    bench(changes)
        .await
        .context("scenario: status change → `next` on the subscription")
}

/// The bench over `changes` status changes.
async fn bench(changes: usize) -> anyhow::Result<()> {
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-graphql")?;
    let pg = LocalPostgres::start(dir.join("pg")).await?;
    let url = localenv::postgres::create_database(&pg.url(), "bench").await?;
    let mut options = app::TestAppOptions::new(url.clone());
    options.max_connections = 8;
    options.issuer = "bench".into();
    options.audience = "bench".into();
    options.settings.public_url = "http://bench".into();
    let bench = app::spawn(options).await?;
    let (ctx, db, addr) = (bench.ctx.clone(), bench.ctx.db.clone(), bench.addr);
    app::default_datastore(&db, "etcd:2379", 100, None).await?;
    let tenant = store::tenants::insert(&db, "bench", "bench", &json!({})).await?;
    let who = service::tokens::authenticate(&ctx, &bench.admin)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut tx = db.begin().await?;
    let body: CreateControlPlane =
        serde_json::from_value(json!({"name": "prod", "kubernetesVersion": "v1.33.2"}))?;
    let created = service::control_planes::create(&ctx, &mut tx, &who, "bench", body, None).await?;
    tx.commit().await?;
    let cp = created.control_plane.id;
    let viewer =
        service::tokens::mint_unchecked(&ctx, Some(tenant.id), Role::TenantViewer, 3600, "bench", "bench")
            .await?
            .token;

    let mut request = format!("ws://{addr}/graphql").into_client_request()?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(
        json!({"type": "connection_init", "payload": {"token": viewer}}),
    ))
    .await?;
    ws.next().await.context("no connection_ack")??;
    ws.send(send(json!({"id": "1", "type": "subscribe", "payload": {"query":
        "subscription { controlPlaneEvents(tenant: \"bench\") { controlPlane { phase endpoint conditions { type status } } } }"}})))
        .await?;

    let mut writer = sqlx::PgConnection::connect(&url).await?;
    let endpoint = |i: usize| format!("10.{}.{}.{}:6443", i / 62500, i / 250 % 250, i % 250 + 1);
    let mut write = async |i: usize| -> anyhow::Result<()> {
        let status = json!({"endpoint": endpoint(i),
                            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]});
        let mut tx = writer.begin().await?;
        store::outbox::write_status(&mut *tx, tenant.id, cp, "Ready", &status).await?;
        tx.commit().await?;
        Ok(())
    };
    // The server's LISTEN starts with the first subscriber: write until an event arrives.
    let mut warm = 0;
    loop {
        write(100_000 + warm).await?;
        warm += 1;
        if let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), ws.next()).await {
            message?;
            break;
        }
        anyhow::ensure!(warm < 50, "the subscription never delivered an event");
    }
    // Read up to a marker, so that no warm-up event is counted as a sample (events arrive in commit order).
    write(999_999).await?;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .context("no warm-up marker within 10 s")?
            .context("the socket closed")??;
        if message.into_text()?.contains(&endpoint(999_999)) {
            break;
        }
    }

    let mut samples = Vec::with_capacity(changes);
    for i in 0..changes {
        write(i).await?;
        let committed = std::time::Instant::now();
        let message = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .with_context(|| format!("no event for change {i} within 10 s"))?
            .context("the socket closed")??;
        samples.push(committed.elapsed());
        let text = message.into_text()?;
        anyhow::ensure!(
            text.contains("\"next\"") && text.contains(&format!("\"{}\"", endpoint(i))),
            "change {i}: unexpected message {text}"
        );
    }
    anyhow::ensure!(!samples.is_empty(), "measured nothing (no samples)");
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "GraphQL subscription latency over {changes} changes (commit → `next` on the WebSocket): \
         p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(1.0))
    );
    drop(pg);
    Ok(())
}

//! GraphQL subscription latency: from the commit of a control plane's status change (on its own
//! connection, as the worker's) to the `next` message on a `graphql-transport-ws` subscriber.
//!
//! Starts its own PostgreSQL and the API router in process, one tenant with one control plane and one
//! subscriber, then commits 1,000 sequential status changes and prints percentiles.
//! Run: `cargo bench --bench graphql_subscription --profile dev` (or without `--profile dev` for release).

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use sqlx::{Connection as _, postgres::PgPoolOptions};
use tenantplane::{
    api::{self, AppState},
    auth::{TokenSettings, keys::ServerKey},
    domain::Role,
    localenv::{self, postgres::LocalPostgres},
    service::{self, Ctx, model::CreateControlPlane},
    store,
};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

const CHANGES: usize = 1000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    localenv::install_crypto_provider();
    let dir = localenv::scratch_dir("bench-graphql")?;
    let pg = LocalPostgres::start(dir.join("pg")).await?;
    let url = localenv::postgres::create_database(&pg.url(), "bench").await?;
    let db = PgPoolOptions::new().max_connections(8).connect(&url).await?;
    store::MIGRATOR.run(&db).await?;
    let key = ServerKey::generate_base64().map_err(|e| anyhow::anyhow!("{e}"))?;
    let ctx = Ctx {
        db: db.clone(),
        server_key: Arc::new(ServerKey::from_base64(&key).map_err(anyhow::Error::msg)?),
        tokens: TokenSettings {
            issuer: "bench".into(),
            audience: "bench".into(),
            external: Default::default(),
            verifying_keys: Default::default(),
        },
        versions: Default::default(),
        placement: Default::default(),
        limits: Default::default(),
    };
    let pool = store::datastores::insert_pool(&db, "default", "spread", &json!({})).await?;
    store::datastores::insert(
        &db,
        &store::datastores::NewDataStore {
            name: "etcd-default".into(),
            pool_id: Some(pool.id),
            driver: "etcd".into(),
            endpoints: vec!["etcd:2379".into()],
            secret_refs: json!({}),
            labels: json!({}),
            capacity_tenants: 100,
            capacity_bytes: None,
            ca_id: None,
        },
    )
    .await?;
    let tenant = store::tenants::insert(&db, "bench", "bench", &json!({})).await?;
    let admin =
        service::tokens::mint_unchecked(&ctx, None, Role::PlatformAdmin, 3600, "bench", "bench").await?;
    let who = service::tokens::authenticate(&ctx, &admin.token)
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

    let state = AppState {
        ctx,
        kube: None,
        metrics: Arc::new(api::metrics::Metrics::default()),
        public_url: "http://bench".into(),
        max_body_bytes: 64 * 1024,
        graphql: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, api::router(state)).await });

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

    let mut samples = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
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
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "GraphQL subscription latency over {CHANGES} changes (commit → `next` on the WebSocket): \
         p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(1.0))
    );
    drop(pg);
    Ok(())
}

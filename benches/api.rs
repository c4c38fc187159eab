//! Load benchmark of the REST API (issue 4): `cargo bench --bench api`.
//!
//! Starts a local PostgreSQL and the release `tenantplane serve` as a child process, then measures
//! create at a fixed 200 req/s (open loop), the create ceiling (closed loop, 32 clients: each in its own
//! tenant, then all in one tenant), GET one, and 100-item list pages over 100k rows; finally pgbench runs
//! the same writes as a create with a custom script (32 clients spread over the same 32 tenants).
//! `API_BENCH_ONLY=get,list` runs only the named scenarios (create, ceiling, get, list, pgbench);
//! `API_BENCH_STATEMENTS=1` prints PostgreSQL's per-statement times (pg_stat_statements) after each, what
//! the database sessions waited on during each ceiling (pg_stat_activity sampled every 10 ms), and the
//! server's latency histogram of GET one. The database is vacuumed and analyzed after the creates.
//!
//! The bench cannot rot silently: it exits non-zero when a scenario answered any error (a 429 included:
//! rate limits are off here), measured nothing, or when the pgbench script fails or writes other tables
//! than an API create does. `TENANTPLANE_BENCH_SIZE=smoke` runs every scenario for about a second
//! (`make test` runs it that way, see `scripts/test-all`); its figures mean nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark binary panics on setup failures"
)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tenantplane_devenv::localenv::{
    self, ports,
    postgres::LocalPostgres,
    process::{ChildProcess, Spec},
};

/// How much each scenario does: the full bench, or `TENANTPLANE_BENCH_SIZE=smoke` (seconds, for `make test`).
#[derive(Clone, Copy)]
struct Size {
    /// Creates of the open-loop scenario (at 200 req/s).
    creates: usize,
    /// GETs of the open-loop GET scenario (at 200 req/s).
    gets: usize,
    /// How long each closed-loop scenario and pgbench run.
    closed: Duration,
    /// Rows the list scenario pages over.
    list_rows: i64,
}

impl Size {
    fn from_env() -> Self {
        match std::env::var("TENANTPLANE_BENCH_SIZE").as_deref() {
            Ok("smoke") => Self {
                creates: 200,
                gets: 200,
                closed: Duration::from_secs(1),
                list_rows: 2_000,
            },
            Ok("full") | Err(_) => Self {
                creates: 4000,
                gets: 2000,
                closed: Duration::from_secs(10),
                list_rows: 100_000,
            },
            Ok(other) => panic!("TENANTPLANE_BENCH_SIZE={other}: expected smoke or full"),
        }
    }
}

/// What went wrong in a run: printed at the end, and the run exits 1.
static FAILURES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Records a failure of the run.
fn fail(what: String) {
    eprintln!("FAILED: {what}");
    FAILURES.lock().unwrap().push(what);
}

/// Whether `API_BENCH_ONLY` (a comma list; unset means all) names `scenario`.
fn wanted(scenario: &str) -> bool {
    std::env::var("API_BENCH_ONLY").map_or(true, |only| only.split(',').any(|s| s.trim() == scenario))
}

/// With `API_BENCH_STATEMENTS` set: the statements the last scenario ran, by total time; then resets.
async fn statements(db: &sqlx::PgPool) {
    if std::env::var_os("API_BENCH_STATEMENTS").is_none() {
        return;
    }
    let rows: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "select left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls, mean_exec_time, max_exec_time
         from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
         order by total_exec_time desc limit 8",
    )
    .fetch_all(db)
    .await
    .unwrap();
    for (query, calls, mean, max) in rows {
        println!("    {calls:>6} x mean {mean:.3} ms, max {max:.2} ms: {query}");
    }
    sqlx::query("select pg_stat_statements_reset()")
        .execute(db)
        .await
        .unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

/// Prints a scenario's row; a scenario with errors, or that measured nothing, fails the run.
fn summary(name: &str, mut lat: Vec<Duration>, elapsed: Duration, errors: usize) {
    if errors > 0 {
        fail(format!(
            "{name}: {errors} of {} requests answered an error",
            lat.len()
        ));
    }
    if lat.is_empty() {
        fail(format!("{name}: no request completed"));
    }
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "| {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {errors} |",
        lat.len(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&lat, 0.50)),
        ms(percentile(&lat, 0.99)),
        ms(*lat.last().unwrap_or(&Duration::ZERO)),
    );
}

async fn create(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    tenant: &str,
    name: String,
) -> (Duration, bool) {
    let start = Instant::now();
    let r = http
        .post(format!("{base}/api/v1/tenants/{tenant}/control-planes"))
        .bearer_auth(token)
        // As automation sends it: the create then also records its answer under this key.
        .header("idempotency-key", format!("bench-{name}"))
        .json(&json!({"name": name, "kubernetesVersion": "v1.34.4"}))
        .send()
        .await;
    let elapsed = start.elapsed();
    let ok = match r {
        Ok(r) if r.status() == 202 => true,
        Ok(r) => {
            static SHOWN: std::sync::Once = std::sync::Once::new();
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            SHOWN.call_once(|| eprintln!("first failed create: {status} {body}"));
            false
        }
        Err(e) => {
            eprintln!("create failed: {e}");
            false
        }
    };
    (elapsed, ok)
}

/// Open loop: `total` requests started at `rate` per second whatever the answers take.
async fn open_loop<F, Fut>(rate: u32, total: usize, f: F) -> (Vec<Duration>, Duration, usize)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = (Duration, bool)> + Send + 'static,
{
    let start = Instant::now();
    let mut handles = Vec::with_capacity(total);
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate);
    for i in 0..total {
        ticker.tick().await;
        handles.push(tokio::spawn(f(i)));
    }
    let mut lat = Vec::with_capacity(total);
    let mut errors = 0;
    for h in handles {
        let (d, ok) = h.await.unwrap();
        lat.push(d);
        errors += usize::from(!ok);
    }
    (lat, start.elapsed(), errors)
}

/// One timed GET that must answer 200.
async fn get_ok(http: reqwest::Client, url: String, token: String) -> (Duration, bool) {
    let start = Instant::now();
    let ok = match http.get(url).bearer_auth(token).send().await {
        Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
        Err(_) => false,
    };
    (start.elapsed(), ok)
}

/// Closed loop: `workers` tasks issuing requests back to back for `duration`.
async fn closed_loop<F, Fut>(workers: usize, duration: Duration, f: F) -> (Vec<Duration>, Duration, usize)
where
    F: Fn(usize, usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = (Duration, bool)> + Send,
{
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let f = f.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut i = 0;
            while start.elapsed() < duration {
                let (d, ok) = f(w, i).await;
                lat.push(d);
                errors += usize::from(!ok);
                i += 1;
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (l, e) = h.await.unwrap();
        all.extend(l);
        errors += e;
    }
    (all, start.elapsed(), errors)
}

/// Clients of the closed-loop create scenarios and pgbench, and tenants of the many-tenant ceiling.
const CLIENTS: usize = 32;

/// Creates tenant `slug` and mints a tenant-admin token of it.
async fn tenant_with_token(http: &reqwest::Client, base: &str, admin: &str, slug: &str) -> String {
    let r = http
        .post(format!("{base}/api/v1/tenants"))
        .bearer_auth(admin)
        .json(&json!({"slug": slug, "displayName": slug}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let minted: Value = http
        .post(format!("{base}/api/v1/tenants/{slug}/tokens"))
        .bearer_auth(admin)
        .json(&json!({"role": "tenant-admin", "ttlSeconds": 7200}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    minted["token"].as_str().unwrap().to_string()
}

/// The create ceiling: client `w` creates back to back in `tenants[w]` (token, slug) for `duration`;
/// returns the successful creates per second. With `API_BENCH_STATEMENTS`, also what the database
/// sessions waited on meanwhile.
async fn ceiling(
    http: &reqwest::Client,
    base: &str,
    db: &sqlx::PgPool,
    label: &str,
    duration: Duration,
    tenants: Vec<(String, String)>,
) -> f64 {
    let sampler = std::env::var_os("API_BENCH_STATEMENTS").map(|_| tokio::spawn(waits(db.clone(), duration)));
    let (http, base, tenants) = (http.clone(), base.to_string(), std::sync::Arc::new(tenants));
    let prefix = label.replace(' ', "-");
    let (lat, elapsed, errors) = closed_loop(CLIENTS, duration, move |w, i| {
        let (http, base, tenants) = (http.clone(), base.clone(), tenants.clone());
        let name = format!("closed-{prefix}-{w}-{i}");
        async move {
            let (token, slug) = &tenants[w];
            create(&http, &base, token, slug, name).await
        }
    })
    .await;
    let tps = (lat.len() - errors) as f64 / elapsed.as_secs_f64();
    summary(
        &format!("create, {CLIENTS} clients, {label} (closed loop)"),
        lat,
        elapsed,
        errors,
    );
    if let Some(sampler) = sampler {
        sampler.await.unwrap();
    }
    statements(db).await;
    tps
}

/// Samples `pg_stat_activity` every 10 ms for `duration`: how often a session of the bench database was
/// seen waiting on each event, with the statement it ran; printed most frequent first.
async fn waits(db: sqlx::PgPool, duration: Duration) {
    let start = Instant::now();
    let mut seen: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut samples = 0u64;
    while start.elapsed() < duration {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' ' || state || ': '
                    || left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
             from pg_stat_activity
             where datname = current_database() and pid <> pg_backend_pid() and state <> 'idle'",
        )
        .fetch_all(&db)
        .await
        .unwrap();
        for (row,) in rows {
            *seen.entry(row).or_default() += 1;
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut seen: Vec<_> = seen.into_iter().collect();
    seen.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    println!("    busy sessions per sample ({samples} samples), by wait and statement:");
    for (what, n) in seen.into_iter().take(12) {
        println!("    {:>6.2} {what}", n as f64 / samples as f64);
    }
}

#[tokio::main]
async fn main() {
    localenv::install_crypto_provider();
    let size = Size::from_env();
    let dir = localenv::scratch_dir("bench-api").unwrap();
    let pg = LocalPostgres::start(dir.join("pg")).await.unwrap();
    let url = localenv::postgres::create_database(&pg.url(), "bench")
        .await
        .unwrap();
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&db)
        .await
        .unwrap();
    let key = tenantplane::auth::keys::ServerKey::generate_base64().unwrap();
    let port = ports::claim().unwrap();
    let bin = env!("CARGO_BIN_EXE_tenantplane");
    let spec = Spec::new("serve", bin)
        .args(["serve", "--db-max-connections", "32"])
        .env("DATABASE_URL", &url)
        .env("TENANTPLANE_ENCRYPTION_KEY", &key)
        .env("TENANTPLANE_LISTEN", format!("127.0.0.1:{}", port.port()))
        // The load creates thousands of control planes in one tenant: no quota in the way.
        .env("TENANTPLANE_DEFAULT_QUOTA_CONTROL_PLANES", "100000")
        // The bench measures the API, not its rate limiter (every 429 would fail the run).
        .env("TENANTPLANE_RATE_LIMIT_PER_SECOND", "0")
        .env("RUST_LOG", "warn");
    let _serve = ChildProcess::spawn(&spec, &dir.join("serve.log")).unwrap();
    let base = format!("http://127.0.0.1:{}", port.port());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    for _ in 0..300 {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = std::process::Command::new(bin)
        .args(["token", "mint", "--platform-admin"])
        .env("DATABASE_URL", &url)
        .env("TENANTPLANE_ENCRYPTION_KEY", &key)
        .output()
        .unwrap();
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // One pool with room for every control plane the bench creates.
    let r = http
        .post(format!("{base}/api/v1/pools"))
        .bearer_auth(&admin)
        .json(&json!({"name": "bench"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let secret = |k: &str| json!({"name": "etcd-certs", "namespace": "kamaji-system", "keyPath": k});
    let r = http
        .post(format!("{base}/api/v1/datastores"))
        .bearer_auth(&admin)
        .json(&json!({"name": "etcd-bench", "pool": "bench", "driver": "etcd", "endpoints": ["etcd:2379"],
                      "capacityTenants": 1_000_000,
                      "secrets": {"caCertificate": secret("ca.crt"), "caPrivateKey": secret("ca.key"),
                                  "clientCertificate": secret("tls.crt"), "clientPrivateKey": secret("tls.key")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let token = tenant_with_token(&http, &base, &admin, "bench").await;
    // The many-tenant ceiling's tenants: one per client.
    let mut many = Vec::with_capacity(CLIENTS);
    for t in 0..CLIENTS {
        let slug = format!("bench-{t}");
        many.push((tenant_with_token(&http, &base, &admin, &slug).await, slug));
    }

    println!("| scenario | requests | req/s | p50 ms | p99 ms | max ms | errors |");
    println!("|---|---|---|---|---|---|---|");

    // 1. Create at a fixed 200 req/s for 20 s (open loop: the schedule does not wait for answers).
    let before = row_counts(&db).await;
    if wanted("create") {
        let (lat, elapsed, errors) = open_loop(200, size.creates, |i| {
            let (http, base, token) = (http.clone(), base.clone(), token.clone());
            async move { create(&http, &base, &token, "bench", format!("open-{i}")).await }
        })
        .await;
        summary("create @200 req/s (open loop)", lat, elapsed, errors);
        statements(&db).await;
    } else {
        for i in 0..10 {
            assert!(create(&http, &base, &token, "bench", format!("seed-{i}")).await.1);
        }
    }
    let create_tables = grown(&before, &row_counts(&db).await);

    // 2. Create ceiling: 32 clients back to back for 10 s, each in its own tenant, then all in one tenant.
    let mut ceilings = Vec::new();
    if wanted("ceiling") {
        let one = vec![(token.clone(), "bench".to_string()); CLIENTS];
        for (label, tenants) in [("32 tenants", many), ("one tenant", one)] {
            sqlx::query("vacuum (analyze)").execute(&db).await.unwrap();
            let tps = ceiling(&http, &base, &db, label, size.closed, tenants).await;
            ceilings.push((label, tps));
        }
    }

    // Settle between scenarios: vacuum and analyze what the creates wrote now, so that autovacuum does not
    // do it during the next scenario's measurement.
    sqlx::query("vacuum (analyze)").execute(&db).await.unwrap();

    // 3. GET one: at a fixed 200 req/s (latency), then 8 clients back to back (ceiling).
    let page: Value = http
        .get(format!("{base}/api/v1/tenants/bench/control-planes?limit=1"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = page["items"][0]["id"].as_str().unwrap().to_string();
    let one = format!("{base}/api/v1/tenants/bench/control-planes/{id}");
    if wanted("get") {
        let (lat, elapsed, errors) = open_loop(200, size.gets, |_| {
            get_ok(http.clone(), one.clone(), token.clone())
        })
        .await;
        summary("GET one @200 req/s (open loop)", lat, elapsed, errors);
        statements(&db).await;
        let (h3, u3, t3) = (http.clone(), one.clone(), token.clone());
        let (lat, elapsed, errors) = closed_loop(8, size.closed, move |_, _| {
            get_ok(h3.clone(), u3.clone(), t3.clone())
        })
        .await;
        summary("GET one, 8 clients (closed loop)", lat, elapsed, errors);
        if std::env::var_os("API_BENCH_STATEMENTS").is_some() {
            // The server's own view of the GETs so far (both GET scenarios): its latency histogram.
            let text = http
                .get(format!("{base}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            for line in text.lines().filter(|l| {
                l.starts_with("tenantplane_http_request_duration_seconds")
                    && l.contains("method=\"GET\"")
                    && l.contains("{id}")
            }) {
                println!("    server: {line}");
            }
        }
        statements(&db).await;
    }

    // 4. 100-item list pages over 100k rows: walk every page twice.
    if wanted("list") {
        list_pages(&http, &base, &token, &db, size.list_rows).await;
        statements(&db).await;
    }
    // 5. pgbench with the same INSERTs a create makes, 32 clients, 10 s; it must write the same tables.
    if wanted("pgbench") {
        let before = row_counts(&db).await;
        let tps = pgbench(&pg, &dir, &url, size.closed);
        let pgbench_tables = grown(&before, &row_counts(&db).await);
        if pgbench_tables != create_tables {
            fail(format!(
                "the pgbench script writes {pgbench_tables:?}, an API create {create_tables:?}: \
                 bring it up to date"
            ));
        }
        println!();
        println!(
            "pgbench, same INSERTs, 32 clients, {:?}: {tps:.0} tps",
            size.closed
        );
        for (label, api_tps) in &ceilings {
            println!(
                "API create ceiling ({label}) / pgbench: {api_tps:.0} / {tps:.0} = {:.0}%",
                100.0 * api_tps / tps
            );
        }
    }
    let failures = FAILURES.lock().unwrap();
    if !failures.is_empty() {
        eprintln!("the bench failed:\n- {}", failures.join("\n- "));
        std::process::exit(1);
    }
}

/// Walks every 100-item page over `rows` rows (100k) twice and reports the latency of each page.
async fn list_pages(http: &reqwest::Client, base: &str, token: &str, db: &sqlx::PgPool, rows: i64) {
    let existing: i64 = sqlx::query_scalar("select count(*) from control_planes")
        .fetch_one(db)
        .await
        .unwrap();
    sqlx::query(
        "insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, labels)
         select gen_random_uuid(), (select id from tenants where slug = 'bench'), 'bulk-' || g, 'v1.34.4', 2, 'ClusterIP', 6443,
                'small', jsonb_build_object('env', case when g % 2 = 0 then 'prod' else 'dev' end)
         from generate_series(1, $1) g",
    )
    .bind(rows - existing)
    .execute(db)
    .await
    .unwrap();
    sqlx::query("analyze control_planes").execute(db).await.unwrap();
    let mut lat = Vec::new();
    let mut errors = 0;
    let start = Instant::now();
    for _pass in 0..2 {
        let mut cursor: Option<String> = None;
        loop {
            let url = match &cursor {
                Some(c) => format!("{base}/api/v1/tenants/bench/control-planes?limit=100&cursor={c}"),
                None => format!("{base}/api/v1/tenants/bench/control-planes?limit=100"),
            };
            let t = Instant::now();
            let r = http.get(url).bearer_auth(token).send().await.unwrap();
            let ok = r.status() == 200;
            let body: Value = r.json().await.unwrap();
            lat.push(t.elapsed());
            errors += usize::from(!ok || body["items"].as_array().map(Vec::len).unwrap_or(0) == 0);
            match body["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
    }
    summary(
        "list page of 100 (sequential, 2 passes over every row)",
        lat,
        start.elapsed(),
        errors,
    );
}

/// Rows of each table of the schema (the migrations' own table aside), counted in one query.
async fn row_counts(db: &sqlx::PgPool) -> std::collections::BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "select table_name::text,
                (xpath('/row/c/text()', query_to_xml(format('select count(*) as c from %I', table_name),
                                                     false, true, '')))[1]::text::bigint
         from information_schema.tables
         where table_schema = 'public' and table_type = 'BASE TABLE' and table_name <> '_sqlx_migrations'",
    )
    .fetch_all(db)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// The tables with more rows `after` than `before`.
fn grown(
    before: &std::collections::BTreeMap<String, i64>,
    after: &std::collections::BTreeMap<String, i64>,
) -> std::collections::BTreeSet<String> {
    after
        .iter()
        .filter(|(table, rows)| before.get(*table).is_none_or(|b| *rows > b))
        .map(|(table, _)| table.clone())
        .collect()
}

/// pgbench with the same INSERTs a create makes (32 clients for `duration`, client `c` in tenant
/// `bench-{c % 32}`, as the many-tenant ceiling): its transactions per second. Any failed transaction (a
/// column the store now requires, say) fails the run.
fn pgbench(pg: &LocalPostgres, dir: &std::path::Path, url: &str, duration: Duration) -> f64 {
    let script = dir.join("create.sql");
    std::fs::write(
        &script,
        "\\set n random(1, 2000000000)\n\
         begin;\n\
         insert into idempotency_keys (scope, key, request_hash, response_status, response_body) values ('pgbench', 'k-' || :client_id || '-' || :n || '-' || random(), '\\x00', 0, '{}') on conflict do nothing;\n\
         with t as (select id from tenants where slug = 'bench-' || (:client_id % 32)), \
           cp as (insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class) select gen_random_uuid(), t.id, 'pg-' || :client_id || '-' || :n || '-' || floor(random() * 1000000)::int, 'v1.34.4', 2, 'ClusterIP', 6443, 'small' from t returning id, tenant_id), \
           pl as (insert into placements (control_plane_id, tenant_id, datastore_id, driver) select cp.id, cp.tenant_id, (select id from datastores where name = 'etcd-bench'), 'etcd' from cp), \
           ld as (update datastores set load_tenants = load_tenants + 1 where name = 'etcd-bench' and exists (select 1 from cp)), \
           op as (insert into operations (id, tenant_id, control_plane_id, kind, generation, stages, deadline_at) select gen_random_uuid(), cp.tenant_id, cp.id, 'create', 1, jsonb_build_array(jsonb_build_object('stage', 'placed', 'at', now())), now() + make_interval(secs => 600) from cp returning id, tenant_id, control_plane_id), \
           ob as (insert into outbox (tenant_id, control_plane_id, operation_id, kind, payload) select tenant_id, control_plane_id, id, 'apply', '{\"generation\": 1}' from op) \
         insert into audit_log (tenant_id, actor, action, target_kind, target_id) select tenant_id, 'pgbench', 'control-plane.create', 'control-plane', id::text from cp;\n\
         commit;\n",
    )
    .unwrap();
    let pgbench = localenv::assets::system_program("pgbench").unwrap();
    let db_name = url.rsplit('/').next().unwrap();
    let out = std::process::Command::new(pgbench)
        .args([
            "-n",
            "-c",
            &CLIENTS.to_string(),
            "-j",
            "2",
            "-T",
            &duration.as_secs().to_string(),
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port().to_string(),
            "-U",
            "postgres",
            "-f",
        ])
        .arg(&script)
        .arg(db_name)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("number of failed transactions: 0 ") {
        fail(format!("pgbench: {text}{}", String::from_utf8_lossy(&out.stderr)));
    }
    let tps: f64 = text
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    if tps <= 0.0 {
        fail("pgbench printed no transactions per second".into());
    }
    tps
}

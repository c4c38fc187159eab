//! kine on PostgreSQL, MariaDB and NATS: the kine sidecar runs beside kube-apiserver on a unix socket.

use futures_util::StreamExt as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane_devenv::localenv::{
    self,
    mariadb::{LocalMariaDb, MariaDbTls, TLS_ADMIN},
    nats::LocalNats,
    postgres::{LocalPostgres, PgTls},
};

use super::{Stack, etcd::schema, namespace_and_event, namespaces, stack};
use crate::support;
use tenantplane::pki::Ca;

/// (endpoint, user, password) of the shared PostgreSQL's superuser.
fn pg_root() -> (String, String, String) {
    match support::postgres() {
        support::PgServer::Local(pg) => (
            format!("127.0.0.1:{}", pg.port()),
            "postgres".into(),
            String::new(),
        ),
        support::PgServer::External(url) => {
            let url = reqwest::Url::parse(url).unwrap();
            (
                format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432)),
                url.username().to_string(),
                url.password().unwrap_or_default().to_string(),
            )
        }
    }
}

/// Two tenants each create `prod` on `pool`, both become Ready; each writes a namespace through its
/// admin kubeconfig. Returns the two schemas (database names).
async fn two_tenants_serve(stack: &Stack, pool: &str) -> [String; 2] {
    let mut ids = Vec::new();
    for t in 0..2 {
        let created = stack
            .create(t, json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": pool}}))
            .await;
        ids.push(created["controlPlane"]["id"].as_str().unwrap().to_string());
    }
    let (a, b) = tokio::join!(
        stack.ready(0, &ids[0], "v1.34.4"),
        stack.ready(1, &ids[1], "v1.34.4")
    );
    for (t, cp) in [a, b].iter().enumerate() {
        let endpoint = cp["status"]["endpoint"].as_str().unwrap();
        assert!(
            endpoint.starts_with("127.") && endpoint.ends_with(":6443"),
            "{endpoint}"
        );
        let client = stack.tenant_client(t, &ids[t]).await;
        assert!(namespaces(&client).await.contains("kube-system"));
        namespace_and_event(&client, &format!("only-tenant-{t}")).await;
        assert!(namespaces(&client).await.contains(&format!("only-tenant-{t}")));
    }
    [
        schema(&stack.kube, &stack.tenants[0].namespace, "prod").await,
        schema(&stack.kube, &stack.tenants[1].namespace, "prod").await,
    ]
}

/// Tenant `t`'s database holds its own namespace row only (the other tenant's is in the other database).
fn assert_own_rows(rows: &[String], t: usize, schema: &str) {
    assert_eq!(
        rows,
        [format!("/registry/namespaces/only-tenant-{t}")],
        "database {schema}"
    );
}

/// The command lines and environments of every process on this machine.
fn processes() -> Vec<(String, String)> {
    let read = |path: std::path::PathBuf| {
        std::fs::read(path)
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|e| (read(e.path().join("cmdline")), read(e.path().join("environ"))))
        .collect()
}

/// Tenant `t`'s kine took its endpoint from its environment: its password is in exactly one process's
/// environment (its kine's), and in no process's arguments, which every user of the node can read.
async fn assert_password_only_in_kines_environment(stack: &Stack, t: usize) {
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        stack.kube.clone(),
        &stack.tenants[t].namespace,
    );
    let data = secrets.get("prod-datastore-config").await.unwrap().data.unwrap();
    let value = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    let (user, password) = (value("DB_USER"), value("DB_PASSWORD"));
    assert!(password.len() >= 16, "a generated password for {user}");
    let processes = processes();
    let in_args = processes
        .iter()
        .filter(|(cmdline, _)| cmdline.contains(&password))
        .count();
    assert_eq!(in_args, 0, "tenant {t}'s password in a process's arguments");
    let endpoint = format!("KINE_ENDPOINT=postgres://{user}:{password}@");
    let in_env = processes
        .iter()
        .filter(|(_, environ)| environ.contains(&endpoint))
        .count();
    assert_eq!(
        in_env, 1,
        "tenant {t}'s kine with its endpoint in its environment"
    );
}

const ROWS: &str = "select name from kine where name like '/registry/namespaces/only-tenant-%' order by name";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_through_kine_serves_two_tenants_each_in_its_own_database() {
    let stack = stack("e2e-pg", 2).await;
    let (endpoint, user, password) = pg_root();
    stack.pool("pg").await;
    stack
        .basic_datastore("pg", "PostgreSQL", &endpoint, &user, &password, 10)
        .await;
    let schemas = two_tenants_serve(&stack, "pg").await;
    assert_ne!(schemas[0], schemas[1]);
    for (t, schema) in schemas.iter().enumerate() {
        assert_password_only_in_kines_environment(&stack, t).await;
        let url = format!("postgres://{user}:{password}@{endpoint}/{schema}");
        let mut db = PgConnection::connect(&url).await.unwrap();
        let rows: Vec<String> = sqlx::query_scalar(ROWS).fetch_all(&mut db).await.unwrap();
        assert_own_rows(&rows, t, schema);
    }
    stack.stop().await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_through_kine_serves_two_tenants_each_in_its_own_database() {
    let stack = stack("e2e-my", 2).await;
    let endpoint = format!("127.0.0.1:{}", support::mariadb().port());
    stack.pool("my").await;
    stack
        .basic_datastore("my", "MySQL", &endpoint, "root", "", 10)
        .await;
    let schemas = two_tenants_serve(&stack, "my").await;
    assert_ne!(schemas[0], schemas[1]);
    for (t, schema) in schemas.iter().enumerate() {
        let mut db = MySqlConnection::connect(&support::mariadb().url_for(schema))
            .await
            .unwrap();
        let rows: Vec<String> = sqlx::query_scalar(ROWS).fetch_all(&mut db).await.unwrap();
        assert_own_rows(&rows, t, schema);
    }
    stack.stop().await;
}

/// The tenant's `<tcp>-datastore-certificate` holds a client certificate of its own (CN = its database
/// user), never the DataStore admin's.
async fn own_certificate(stack: &Stack, t: usize, user: &str, admin_cert: &str) {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(stack.kube.clone(), &stack.tenants[t].namespace);
    let data = secrets
        .get("prod-datastore-certificate")
        .await
        .unwrap()
        .data
        .unwrap();
    let cert = String::from_utf8(data["server.crt"].0.clone()).unwrap();
    assert_ne!(cert, admin_cert);
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
    let parsed = pem.parse_x509().unwrap();
    let cns: Vec<&str> = parsed
        .subject()
        .iter_common_name()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cns, [user]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_over_tls_with_client_certificates_serves_two_tenants_each_with_its_own_certificate() {
    let ca = Ca::new("e2e-pg-tls-ca").unwrap();
    let tls = PgTls {
        ca: &ca,
        password: "pg-admin-pw",
    };
    let pg = LocalPostgres::start_tls(localenv::scratch_dir("e2e-pg-tls").unwrap(), tls)
        .await
        .unwrap();
    let admin = ca.client("postgres", &[]).unwrap();
    let stack = stack("e2e-pgtls", 2).await;
    stack.pool("pgtls").await;
    let endpoint = format!("127.0.0.1:{}", pg.port());
    stack
        .tls_datastore(
            "pgtls",
            "PostgreSQL",
            &endpoint,
            ("postgres", "pg-admin-pw"),
            &ca,
            &admin,
        )
        .await;
    let schemas = two_tenants_serve(&stack, "pgtls").await;
    let mut server = PgConnection::connect_with(&pg.socket_options("postgres"))
        .await
        .unwrap();
    for (t, schema) in schemas.iter().enumerate() {
        own_certificate(&stack, t, schema, &admin.cert_pem).await;
        // kine's connections as the server sees them: TLS, with the tenant's own certificate.
        let seen: Vec<(bool, Option<String>)> = sqlx::query_as(
            "select s.ssl, s.client_dn from pg_stat_ssl s join pg_stat_activity a using (pid) \
             where a.usename = $1 and a.datname = $1",
        )
        .bind(schema)
        .fetch_all(&mut server)
        .await
        .unwrap();
        assert!(!seen.is_empty(), "no kine connection of {schema}");
        assert!(
            seen.iter().all(|s| *s == (true, Some(format!("/CN={schema}")))),
            "{seen:?}"
        );
        let mut db = PgConnection::connect_with(&pg.socket_options(schema))
            .await
            .unwrap();
        let rows: Vec<String> = sqlx::query_scalar(ROWS).fetch_all(&mut db).await.unwrap();
        assert_own_rows(&rows, t, schema);
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_over_tls_serves_two_tenants_each_with_its_own_certificate_and_password() {
    let ca = Ca::new("e2e-my-tls-ca").unwrap();
    let tls = MariaDbTls {
        ca: &ca,
        password: "my-admin-pw",
    };
    let my = LocalMariaDb::start_tls(localenv::scratch_dir("e2e-my-tls").unwrap(), tls)
        .await
        .unwrap();
    // TCP without TLS is refused: every tenant connection below is TLS.
    let plain = format!(
        "mysql://{TLS_ADMIN}:my-admin-pw@127.0.0.1:{}/mysql?ssl-mode=disabled",
        my.port()
    );
    assert!(MySqlConnection::connect(&plain).await.is_err());
    let admin = ca.client(TLS_ADMIN, &[]).unwrap();
    let stack = stack("e2e-mytls", 2).await;
    stack.pool("mytls").await;
    let endpoint = format!("127.0.0.1:{}", my.port());
    stack
        .tls_datastore(
            "mytls",
            "MySQL",
            &endpoint,
            (TLS_ADMIN, "my-admin-pw"),
            &ca,
            &admin,
        )
        .await;
    let schemas = two_tenants_serve(&stack, "mytls").await;
    for (t, schema) in schemas.iter().enumerate() {
        own_certificate(&stack, t, schema, &admin.cert_pem).await;
        let mut db = MySqlConnection::connect(&my.socket_url(schema)).await.unwrap();
        let rows: Vec<String> = sqlx::query_scalar(ROWS).fetch_all(&mut db).await.unwrap();
        assert_own_rows(&rows, t, schema);
    }
    stack.stop().await;
}

async fn nats_streams(nats: &LocalNats) -> Vec<String> {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut streams = js.streams();
    let mut names = Vec::new();
    while let Some(info) = streams.next().await {
        names.push(info.unwrap().config.name);
    }
    // The ownership registry is the driver's, not a tenant's.
    let registry = format!("KV_{}", tenantplane::datastore::nats::REGISTRY_BUCKET);
    names.retain(|n| *n != registry);
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_through_kine_serves_one_tenant_and_the_api_refuses_a_second_on_the_same_pool() {
    let stack = stack("e2e-nats", 2).await;
    let nats = LocalNats::start(localenv::scratch_dir("e2e-nats").unwrap())
        .await
        .unwrap();
    stack.pool("nats").await;
    let ds = stack
        .basic_datastore("nats", "NATS", &nats.endpoint(), "", "", 1)
        .await;
    let created = stack
        .create(0, json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "nats"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();

    // The second tenant asks for the same pool: refused at once, naming the reason.
    let tenant = &stack.tenants[1];
    let refused = stack
        .app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{}/control-planes", tenant.slug),
            Some(&tenant.member),
            Some(json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "nats"}})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    assert_eq!(
        refused.body["detail"], "no DataStore fits: 1 NATS already in use",
        "{}",
        refused.text
    );

    let cp = stack.ready(0, &id, "v1.34.4").await;
    assert_eq!(cp["placement"]["dataStore"], Value::String(ds.clone()));
    let client = stack.tenant_client(0, &id).await;
    namespace_and_event(&client, "on-nats").await;
    assert!(namespaces(&client).await.contains("on-nats"));
    let schema = schema(&stack.kube, &stack.tenants[0].namespace, "prod").await;
    assert_eq!(nats_streams(&nats).await, vec![format!("KV_{schema}")]);
    stack.stop().await;
}

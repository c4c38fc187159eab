//! The datastore drivers against real servers: a TLS etcd with auth, the shared PostgreSQL and MariaDB,
//! and a NATS server per test (a NATS DataStore holds one tenant). Every test uses unique names.
//!
//! The local PostgreSQL trusts every connection (`initdb --auth=trust`), so there the isolation test
//! rests on the `CONNECT` privilege; passwords are proven on MariaDB, which checks them.

use futures_util::StreamExt as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, DnValue, IsCa, KeyPair, KeyUsagePurpose};
use sqlx::{Connection, MySqlConnection, PgConnection, Row};
use tenantplane::{
    datastore::{
        DatastoreError, Driver, EtcdCredentials, NatsCredentials, Owner, SqlCredentials, SqlSettings,
        TenantCredentials, TenantSpace,
        etcd::{EtcdDriver, EtcdSettings, marker_key},
        mysql::{MySqlDriver, TENANT_MAX_USER_CONNECTIONS},
        nats::{KINE_BUCKET_DESCRIPTION, NatsDriver, NatsSettings, REGISTRY_BUCKET, bucket_name},
        postgres::PostgresDriver,
    },
    pki::{Ca, CertKey, KeyAlgorithm},
    secret::Secret,
};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kine::LocalKine,
    nats::LocalNats,
    ports,
};

use crate::support;

/// A unique name that is valid everywhere (SQL, etcd, NATS): `<prefix>-<10 hex>`.
fn name(prefix: &str) -> String {
    support::unique(prefix)
}

/// A fresh owner: a new UID, as a new TenantControlPlane has.
pub fn owner() -> Owner {
    let uid = uuid::Uuid::new_v4().to_string();
    Owner::new(&uid, "tp-test", &format!("cp-{}", &uid[..8])).unwrap()
}

/// A tenant whose schema and user are both `name`, owned by a fresh owner.
fn tenant_named(name: &str) -> Result<TenantSpace, DatastoreError> {
    TenantSpace::new(name, name, owner())
}

pub(crate) fn etcd_creds(creds: TenantCredentials) -> EtcdCredentials {
    match creds {
        TenantCredentials::Etcd(c) => c,
        other => panic!("expected etcd credentials, got {other:?}"),
    }
}

pub(crate) fn sql_creds(creds: TenantCredentials) -> SqlCredentials {
    match creds {
        TenantCredentials::Sql(c) => c,
        other => panic!("expected SQL credentials, got {other:?}"),
    }
}

fn nats_creds(creds: TenantCredentials) -> NatsCredentials {
    match creds {
        TenantCredentials::Nats(c) => c,
        other => panic!("expected NATS credentials, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------- etcd

/// A CA whose subject has more than a CN, with a PrintableString attribute: minted certificates must
/// name it byte for byte as their issuer, or etcd (Go) cannot find the CA.
fn etcd_ca() -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(
        DnType::OrganizationName,
        DnValue::PrintableString("Tenantplane Tests".try_into().unwrap()),
    );
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "datastores");
    params.distinguished_name.push(DnType::CommonName, "etcd-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    let cert = params.self_signed(&key).unwrap();
    Ca::from_pem(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
    .unwrap()
}

pub(crate) async fn etcd_with_driver(prefix: &str) -> (LocalEtcd, EtcdDriver, Ca) {
    let ca = etcd_ca();
    let dir = localenv::scratch_dir(prefix).unwrap();
    let etcd = LocalEtcd::start(dir, EtcdOptions { tls_ca: Some(&ca) })
        .await
        .unwrap();
    let driver = EtcdDriver::new(etcd.root_driver_settings().unwrap()).unwrap();
    (etcd, driver, ca)
}

fn cert_key(creds: &EtcdCredentials) -> CertKey {
    CertKey {
        cert_pem: creds.client_cert_pem.clone(),
        key_pem: creds.client_key_pem.expose().clone(),
    }
}

/// `etcdctl role get` and `user get` as root: the permissions and roles as etcd itself reports them.
pub(crate) fn etcd_auth_state(
    etcd: &LocalEtcd,
    schema: &str,
    user: &str,
) -> (Result<String, String>, Result<String, String>) {
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    (
        root.run(&["role", "get", schema]),
        root.run(&["user", "get", user]),
    )
}

/// etcd's auth revision (`etcdctl auth status`), which every user, role or permission change raises.
fn auth_revision(etcd: &LocalEtcd) -> u64 {
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    let status = root.run(&["auth", "status"]).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("AuthRevision: "))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no AuthRevision in {status:?}"))
}

/// What a migration may freeze, read or thaw: only a space whose names carry the caller's marker.
#[tokio::test]
async fn etcd_check_owned_accepts_the_owners_space_only() {
    let (_etcd, driver, _ca) = etcd_with_driver("ds-etcd-owned").await;
    let (schema, user) = (name("cp"), name("u"));
    let ours = TenantSpace::new(&schema, &user, owner()).unwrap();
    driver.provision(&ours).await.unwrap();
    driver.check_owned(&ours).await.unwrap();

    let someone_else = TenantSpace::new(&schema, &user, owner()).unwrap();
    let err = driver.check_owned(&someone_else).await.unwrap_err();
    assert!(
        matches!(&err, DatastoreError::NameTaken { field: "schema", name, .. } if *name == schema),
        "{err}"
    );
    let never_provisioned = TenantSpace::new(name("cp"), name("u"), ours.owner().clone()).unwrap();
    let err = driver.check_owned(&never_provisioned).await.unwrap_err();
    assert!(matches!(err, DatastoreError::ForeignObject { .. }), "{err}");
    assert!(!err.is_transient(), "{err}");
}

#[tokio::test]
async fn etcd_provision_makes_a_certificate_user_with_exactly_its_prefix_and_deprovision_removes_it() {
    let (etcd, driver, ca) = etcd_with_driver("ds-etcd").await;
    driver.check().await.unwrap();
    let schema = name("cp");
    let user = name("u");
    let tenant = TenantSpace::new(&schema, &user, owner()).unwrap();

    let creds = etcd_creds(driver.provision(&tenant).await.unwrap());
    // Both names carry the owner's marker, outside every tenant's range.
    for key in [marker_key("schema", &schema), marker_key("user", &user)] {
        assert_eq!(
            etcd.http().unwrap().get(key.as_bytes()).await.unwrap().as_deref(),
            Some(tenant.owner().marker().as_bytes())
        );
    }
    assert_eq!(creds.user, user);
    assert_eq!(creds.prefix, format!("/{schema}/"));
    assert_eq!(creds.ca_cert_pem, ca.ca.cert_pem);
    let (role, user_info) = etcd_auth_state(&etcd, &schema, &user);
    let expected_role = format!(
        "Role {schema}\nKV Read:\n\t[/{schema}/, /{schema}0) (prefix /{schema}/)\nKV Write:\n\t[/{schema}/, /{schema}0) (prefix /{schema}/)\n"
    );
    assert_eq!(role.unwrap(), expected_role);
    assert_eq!(user_info.unwrap(), format!("User: {user}\nRoles: {schema}\n"));

    // The minted certificate: CN = user, issuer = the CA's subject byte for byte.
    let (_, cert_pem) = x509_parser::pem::parse_x509_pem(creds.client_cert_pem.as_bytes()).unwrap();
    let cert = cert_pem.parse_x509().unwrap();
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.ca.cert_pem.as_bytes()).unwrap();
    let ca_cert = ca_pem.parse_x509().unwrap();
    assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
    let cns: Vec<&str> = cert
        .subject()
        .iter_common_name()
        .map(|cn| cn.as_str().unwrap())
        .collect();
    assert_eq!(cns, vec![user.as_str()]);
    let days = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86_400;
    assert_eq!(
        days, 365,
        "one year plus the five minutes of skew allowance, rounded down"
    );

    // The certificate works over gRPC inside the prefix, and nowhere else.
    let tenant_ctl = etcd.etcdctl(&cert_key(&creds)).unwrap();
    tenant_ctl.run(&["put", &format!("/{schema}/k1"), "v1"]).unwrap();
    assert_eq!(
        tenant_ctl
            .run(&["get", &format!("/{schema}/k1"), "--print-value-only"])
            .unwrap(),
        "v1\n"
    );
    let outside = tenant_ctl.run(&["put", "/elsewhere", "x"]).unwrap_err();
    assert!(outside.contains("etcdserver: permission denied"), "{outside}");
    // A tenant certificate is not root: the driver's check refuses it as a permission problem.
    let as_tenant = EtcdDriver::new(EtcdSettings::new(
        vec![etcd.endpoint()],
        ca.ca.clone(),
        creds.client_cert_pem.clone(),
        creds.client_key_pem.clone(),
    ))
    .unwrap();
    let err = as_tenant.check().await.unwrap_err();
    assert_eq!(err.reason(), "DataStorePermissionDenied", "{err}");
    assert!(!err.is_transient());

    // Provisioning again changes nothing (not even etcd's auth revision: each auth change makes etcd
    // rebuild the permissions of every user) and returns a working certificate; the data stays.
    let revision = auth_revision(&etcd);
    let again = etcd_creds(driver.provision(&tenant).await.unwrap());
    assert_eq!(auth_revision(&etcd), revision);
    let (role_again, user_again) = etcd_auth_state(&etcd, &schema, &user);
    assert_eq!(role_again.unwrap(), expected_role);
    assert_eq!(user_again.unwrap(), format!("User: {user}\nRoles: {schema}\n"));
    let again_ctl = etcd.etcdctl(&cert_key(&again)).unwrap();
    assert_eq!(
        again_ctl
            .run(&["get", &format!("/{schema}/k1"), "--print-value-only"])
            .unwrap(),
        "v1\n"
    );

    // A foreign permission added to the role and a foreign role granted to the user are taken away.
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    root.run(&["role", "grant-permission", &schema, "read", "/", "--prefix"])
        .unwrap();
    root.run(&["role", "add", &format!("{schema}-extra")]).unwrap();
    root.run(&["user", "grant-role", &user, &format!("{schema}-extra")])
        .unwrap();
    driver.provision(&tenant).await.unwrap();
    let (role_fixed, user_fixed) = etcd_auth_state(&etcd, &schema, &user);
    assert_eq!(role_fixed.unwrap(), expected_role);
    assert_eq!(user_fixed.unwrap(), format!("User: {user}\nRoles: {schema}\n"));

    driver.deprovision(&tenant).await.unwrap();
    let (role_gone, user_gone) = etcd_auth_state(&etcd, &schema, &user);
    assert!(role_gone.unwrap_err().contains("role name not found"));
    assert!(user_gone.unwrap_err().contains("user name not found"));
    assert_eq!(
        etcd.http()
            .unwrap()
            .range_prefix(format!("/{schema}/").as_bytes())
            .await
            .unwrap(),
        vec![]
    );
    let denied = again_ctl.run(&["get", &format!("/{schema}/k1")]).unwrap_err();
    assert!(denied.contains("etcdserver:"), "{denied}");
    for key in [marker_key("schema", &schema), marker_key("user", &user)] {
        assert_eq!(etcd.http().unwrap().get(key.as_bytes()).await.unwrap(), None);
    }
    // Deprovisioning what is gone is fine; the other role made above is not the tenant's and stays.
    driver.deprovision(&tenant).await.unwrap();
    assert!(root.run(&["role", "get", &format!("{schema}-extra")]).is_ok());
}

/// The OID of a PEM certificate's public-key algorithm.
fn key_oid(cert_pem: &str) -> String {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    cert.public_key().algorithm.algorithm.to_id_string()
}

const RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";

#[tokio::test]
async fn etcd_tenant_certificates_follow_the_key_algorithm_and_authenticate() {
    let (etcd, driver, _ca) = etcd_with_driver("ds-etcd-rsa").await;
    let mut settings = etcd.root_driver_settings().unwrap();
    settings.key_algorithm = KeyAlgorithm::Rsa2048;
    let rsa_driver = EtcdDriver::new(settings).unwrap();
    for (driver, expected) in [(&driver, EC_PUBLIC_KEY), (&rsa_driver, RSA_ENCRYPTION)] {
        let schema = name("cp");
        let tenant = TenantSpace::new(&schema, name("u"), owner()).unwrap();
        let creds = etcd_creds(driver.provision(&tenant).await.unwrap());
        assert_eq!(key_oid(&creds.client_cert_pem), expected);
        let ctl = etcd.etcdctl(&cert_key(&creds)).unwrap();
        ctl.run(&["put", &format!("/{schema}/k"), "v"]).unwrap();
        assert_eq!(
            ctl.run(&["get", &format!("/{schema}/k"), "--print-value-only"])
                .unwrap(),
            "v\n"
        );
        driver.deprovision(&tenant).await.unwrap();
    }
}

/// Concurrent provisioning changes etcd's auth store under the other requests ("revision of auth store
/// is old"); each tenant still gets its space, as the controller's 16 concurrent reconciles need.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_concurrent_provisioning_and_deprovisioning_of_32_tenants_all_succeed() {
    let (etcd, driver, _ca) = etcd_with_driver("ds-etcd-concurrent").await;
    let tenants: Vec<TenantSpace> = (0..32)
        .map(|_| TenantSpace::new(name("cp"), name("u"), owner()).unwrap())
        .collect();
    let provisioned = futures::future::join_all(tenants.iter().map(|t| driver.provision(t))).await;
    let failed: Vec<String> = provisioned
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(failed, Vec::<String>::new());
    for (tenant, creds) in tenants.iter().zip(provisioned) {
        let (role, user) = etcd_auth_state(&etcd, tenant.schema(), tenant.user());
        assert_eq!(
            user.unwrap(),
            format!("User: {}\nRoles: {}\n", tenant.user(), tenant.schema())
        );
        assert!(role.unwrap().starts_with(&format!("Role {}\n", tenant.schema())));
        assert_eq!(etcd_creds(creds.unwrap()).user, tenant.user());
    }
    let removed = futures::future::join_all(tenants.iter().map(|t| driver.deprovision(t))).await;
    let failed: Vec<String> = removed
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(failed, Vec::<String>::new());
}

#[tokio::test]
async fn etcd_driver_keeps_working_across_an_etcd_restart() {
    let (mut etcd, driver, _ca) = etcd_with_driver("ds-etcd-restart").await;
    let before = TenantSpace::new(name("cp"), name("u"), owner()).unwrap();
    driver.provision(&before).await.unwrap();
    etcd.restart().await.unwrap();

    // The driver's kept connection broke with the restart: the next calls reconnect without an error.
    driver.check().await.unwrap();
    let after = TenantSpace::new(name("cp"), name("u"), owner()).unwrap();
    let creds = etcd_creds(driver.provision(&after).await.unwrap());
    for tenant in [&before, &after] {
        let (_, user) = etcd_auth_state(&etcd, tenant.schema(), tenant.user());
        assert_eq!(
            user.unwrap(),
            format!("User: {}\nRoles: {}\n", tenant.user(), tenant.schema())
        );
    }
    let ctl = etcd.etcdctl(&cert_key(&creds)).unwrap();
    ctl.run(&["put", &format!("/{}/k", after.schema()), "v"]).unwrap();
}

#[tokio::test]
async fn etcd_tenants_cannot_reach_each_other_and_removing_one_leaves_the_other_byte_identical() {
    let (etcd, driver, _ca) = etcd_with_driver("ds-etcd-two").await;
    // B's schema extends A's: only the trailing slash keeps A's range from covering B's keys.
    let a_schema = name("cp");
    let b_schema = format!("{a_schema}b");
    let a = TenantSpace::new(&a_schema, format!("{a_schema}-user"), owner()).unwrap();
    let b = TenantSpace::new(&b_schema, format!("{b_schema}-user"), owner()).unwrap();
    let a_creds = etcd_creds(driver.provision(&a).await.unwrap());
    let b_creds = etcd_creds(driver.provision(&b).await.unwrap());
    let a_ctl = etcd.etcdctl(&cert_key(&a_creds)).unwrap();
    let b_ctl = etcd.etcdctl(&cert_key(&b_creds)).unwrap();

    for i in 0..5 {
        b_ctl
            .run(&[
                "put",
                &format!("/{b_schema}/registry/k{i}"),
                &format!("b-value-{i}"),
            ])
            .unwrap();
        a_ctl
            .run(&[
                "put",
                &format!("/{a_schema}/registry/k{i}"),
                &format!("a-value-{i}"),
            ])
            .unwrap();
    }
    let b_key = format!("/{b_schema}/registry/k0");
    for attempt in [
        a_ctl.run(&["get", &b_key]),
        a_ctl.run(&["put", &b_key, "stolen"]),
        a_ctl.run(&["del", &b_key]),
        a_ctl.run(&["get", &format!("/{b_schema}/"), "--prefix"]),
    ] {
        let err = attempt.unwrap_err();
        assert!(err.contains("etcdserver: permission denied"), "{err}");
    }
    let b_ctl_into_a = b_ctl
        .run(&["get", &format!("/{a_schema}/registry/k0")])
        .unwrap_err();
    assert!(
        b_ctl_into_a.contains("etcdserver: permission denied"),
        "{b_ctl_into_a}"
    );

    let http = etcd.http().unwrap();
    let b_before = http
        .range_prefix(format!("/{b_schema}/").as_bytes())
        .await
        .unwrap();
    assert_eq!(b_before.len(), 5);
    driver.deprovision(&a).await.unwrap();
    assert_eq!(
        http.range_prefix(format!("/{b_schema}/").as_bytes())
            .await
            .unwrap(),
        b_before
    );
    assert_eq!(
        http.range_prefix(format!("/{a_schema}/").as_bytes())
            .await
            .unwrap(),
        vec![]
    );
    let (b_role, b_user) = etcd_auth_state(&etcd, &b_schema, b.user());
    assert!(b_role.unwrap().contains(&format!("[/{b_schema}/, /{b_schema}0)")));
    assert_eq!(
        b_user.unwrap(),
        format!("User: {}\nRoles: {b_schema}\n", b.user())
    );
    assert_eq!(
        b_ctl.run(&["get", &b_key, "--print-value-only"]).unwrap(),
        "b-value-0\n"
    );
}

// ---------------------------------------------------------------------------------------- PostgreSQL

/// The shared PostgreSQL as DataStore settings (its superuser).
pub(crate) fn pg_settings() -> SqlSettings {
    match support::postgres() {
        support::PgServer::Local(pg) => {
            SqlSettings::new(format!("127.0.0.1:{}", pg.port()), "postgres", None)
        }
        support::PgServer::External(url) => {
            let url = reqwest::Url::parse(url).unwrap();
            SqlSettings::new(
                format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432)),
                url.username(),
                url.password().map(|p| Secret::new(p.to_string())),
            )
        }
    }
}

async fn pg_admin() -> PgConnection {
    PgConnection::connect(&support::postgres().admin_url())
        .await
        .unwrap()
}

pub(crate) fn pg_url(creds: &SqlCredentials, database: &str) -> String {
    format!(
        "postgres://{}:{}@{}/{database}?sslmode=disable",
        creds.user,
        creds.password.expose(),
        creds.endpoint
    )
}

/// (owner, ACL entries) of a database, if it exists.
async fn pg_database(admin: &mut PgConnection, db: &str) -> Option<(String, Option<Vec<String>>)> {
    sqlx::query("select pg_get_userbyid(datdba)::text, datacl::text[] from pg_database where datname = $1")
        .bind(db)
        .fetch_optional(admin)
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// (login, superuser, createdb, createrole) of a role, if it exists.
async fn pg_role(admin: &mut PgConnection, role: &str) -> Option<(bool, bool, bool, bool)> {
    sqlx::query("select rolcanlogin, rolsuper, rolcreatedb, rolcreaterole from pg_roles where rolname = $1")
        .bind(role)
        .fetch_optional(admin)
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
}

async fn pg_privilege(admin: &mut PgConnection, role: &str, db: &str, privilege: &str) -> bool {
    sqlx::query_scalar("select has_database_privilege($1, $2, $3)")
        .bind(role)
        .bind(db)
        .bind(privilege)
        .fetch_one(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn postgres_provision_makes_an_owned_database_closed_to_others_and_deprovision_drops_both() {
    let driver = PostgresDriver::new(pg_settings()).unwrap();
    driver.check().await.unwrap();
    let tenant = tenant_named(&name("pg")).unwrap();
    let (db, user) = (tenant.schema().to_string(), tenant.user().to_string());
    let creds = sql_creds(driver.provision(&tenant).await.unwrap());
    assert_eq!(
        (creds.user.as_str(), creds.database.as_str()),
        (user.as_str(), db.as_str())
    );
    assert_eq!(creds.password.expose().len(), 32);

    let mut admin = pg_admin().await;
    // Only the owner has rights (C = CREATE, T = TEMPORARY, c = CONNECT); no entry for PUBLIC.
    let expected_db = (user.clone(), Some(vec![format!("\"{user}\"=CTc/\"{user}\"")]));
    assert_eq!(pg_database(&mut admin, &db).await, Some(expected_db.clone()));
    assert_eq!(
        pg_role(&mut admin, &user).await,
        Some((true, false, false, false))
    );
    for privilege in ["CONNECT", "CREATE", "TEMPORARY"] {
        assert!(
            pg_privilege(&mut admin, &user, &db, privilege).await,
            "{privilege}"
        );
    }
    // Another role (one that PUBLIC's rights would cover) may not even connect.
    let outsider = name("outsider");
    sqlx::query(sqlx::AssertSqlSafe(format!("create role \"{outsider}\" login")))
        .execute(&mut admin)
        .await
        .unwrap();
    assert!(!pg_privilege(&mut admin, &outsider, &db, "CONNECT").await);
    assert!(!pg_privilege(&mut admin, &outsider, &db, "TEMPORARY").await);

    // kine runs on exactly these credentials: it creates its table in the tenant's database.
    let kine = LocalKine::start(localenv::scratch_dir("ds-kine-pg").unwrap(), &pg_url(&creds, &db))
        .await
        .unwrap();
    drop(kine);
    let mut tenant_conn = PgConnection::connect(&pg_url(&creds, &db)).await.unwrap();
    let kine_owner: String = sqlx::query_scalar(
        "select tableowner::text from pg_tables where schemaname = 'public' and tablename = 'kine'",
    )
    .fetch_one(&mut tenant_conn)
    .await
    .unwrap();
    assert_eq!(kine_owner, user);
    tenant_conn.close().await.unwrap();

    // Again with the stored password: same state, same password. Without one: a new password.
    let again = sql_creds(
        driver
            .provision(&tenant.clone().with_password(creds.password.clone()))
            .await
            .unwrap(),
    );
    assert_eq!(again.password.expose(), creds.password.expose());
    assert_eq!(pg_database(&mut admin, &db).await, Some(expected_db));
    assert_eq!(
        pg_role(&mut admin, &user).await,
        Some((true, false, false, false))
    );
    let renewed = sql_creds(driver.provision(&tenant).await.unwrap());
    assert_ne!(renewed.password.expose(), creds.password.expose());

    // Deprovision while the tenant is connected: the database is dropped with FORCE.
    let mut lingering = PgConnection::connect(&pg_url(&renewed, &db)).await.unwrap();
    driver.deprovision(&tenant).await.unwrap();
    assert!(sqlx::query("select 1").execute(&mut lingering).await.is_err());
    assert_eq!(pg_database(&mut admin, &db).await, None);
    assert_eq!(pg_role(&mut admin, &user).await, None);
    driver.deprovision(&tenant).await.unwrap();
    assert_eq!(pg_database(&mut admin, &db).await, None);
}

#[tokio::test]
async fn postgres_tenants_cannot_connect_to_each_other_and_removing_one_leaves_the_other_intact() {
    let driver = PostgresDriver::new(pg_settings()).unwrap();
    let a = tenant_named(&name("pga")).unwrap();
    let b = tenant_named(&name("pgb")).unwrap();
    let a_creds = sql_creds(driver.provision(&a).await.unwrap());
    let b_creds = sql_creds(driver.provision(&b).await.unwrap());

    let mut b_conn = PgConnection::connect(&pg_url(&b_creds, b.schema()))
        .await
        .unwrap();
    sqlx::raw_sql(
        "create table kine (id bigserial primary key, name text not null, value bytea);
         insert into kine (name, value) select '/registry/k' || g, sha256(g::text::bytea) from generate_series(1, 20) g;",
    )
    .execute(&mut b_conn)
    .await
    .unwrap();
    let snapshot = "select id, name, value from kine order by id";
    let before: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(snapshot).fetch_all(&mut b_conn).await.unwrap();
    assert_eq!(before.len(), 20);

    let err = PgConnection::connect(&pg_url(&a_creds, b.schema()))
        .await
        .unwrap_err();
    let db_err = err.as_database_error().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(db_err.code().as_deref(), Some("42501"), "{err}");
    assert!(
        db_err.message().contains("permission denied for database"),
        "{err}"
    );
    let err = PgConnection::connect(&pg_url(&b_creds, a.schema()))
        .await
        .unwrap_err();
    assert_eq!(err.as_database_error().unwrap().code().as_deref(), Some("42501"));

    let mut admin = pg_admin().await;
    let b_db_before = pg_database(&mut admin, b.schema()).await;
    driver.deprovision(&a).await.unwrap();
    assert_eq!(pg_database(&mut admin, a.schema()).await, None);
    assert_eq!(pg_database(&mut admin, b.schema()).await, b_db_before);
    assert_eq!(
        pg_role(&mut admin, b.user()).await,
        Some((true, false, false, false))
    );
    let after: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(snapshot).fetch_all(&mut b_conn).await.unwrap();
    assert_eq!(after, before);
    b_conn.close().await.unwrap();
    driver.deprovision(&b).await.unwrap();
}

#[tokio::test]
async fn postgres_refuses_to_touch_a_database_owned_by_someone_else() {
    let driver = PostgresDriver::new(pg_settings()).unwrap();
    let mut admin = pg_admin().await;
    let (db, stranger) = (name("taken"), name("stranger"));
    for statement in [
        format!("create role \"{stranger}\""),
        format!("create database \"{db}\" owner \"{stranger}\""),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let tenant = TenantSpace::new(&db, name("u"), owner()).unwrap();
    let err = driver.provision(&tenant).await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreForeignObject", "{err}");
    assert!(
        err.to_string().contains(&format!(
            "database \"{db}\" exists but was not created for this TenantControlPlane"
        )),
        "{err}"
    );
    assert_eq!(
        driver.deprovision(&tenant).await.unwrap().left_alone,
        vec![format!(
            "schema \"{db}\" has no ownership marker of this TenantControlPlane"
        )]
    );
    assert_eq!(pg_database(&mut admin, &db).await.unwrap().0, stranger);
    assert_eq!(pg_role(&mut admin, tenant.user()).await, None);
}

#[tokio::test]
async fn postgres_works_with_a_datastore_user_that_has_only_createdb_and_createrole() {
    let mut admin = pg_admin().await;
    let operator = name("operator");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "create role \"{operator}\" login createdb createrole"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let mut settings = pg_settings();
    settings.username = operator.clone();
    let driver = PostgresDriver::new(settings).unwrap();
    driver.check().await.unwrap();
    let tenant = tenant_named(&name("pgop")).unwrap();
    let creds = sql_creds(driver.provision(&tenant).await.unwrap());
    let user = tenant.user().to_string();
    assert_eq!(
        pg_database(&mut admin, tenant.schema()).await,
        Some((user.clone(), Some(vec![format!("\"{user}\"=CTc/\"{user}\"")])))
    );
    PgConnection::connect(&pg_url(&creds, tenant.schema()))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    driver.provision(&tenant).await.unwrap();
    driver.deprovision(&tenant).await.unwrap();
    assert_eq!(pg_database(&mut admin, tenant.schema()).await, None);
    assert_eq!(pg_role(&mut admin, &user).await, None);
}

// ----------------------------------------------------------------------------------------- MariaDB

pub(crate) fn mysql_settings() -> SqlSettings {
    SqlSettings::new(format!("127.0.0.1:{}", support::mariadb().port()), "root", None)
}

async fn mysql_admin() -> MySqlConnection {
    MySqlConnection::connect(&support::mariadb().url_for("mysql"))
        .await
        .unwrap()
}

pub(crate) fn mysql_url(creds: &SqlCredentials, database: &str) -> String {
    format!(
        "mysql://{}:{}@{}/{database}",
        creds.user,
        creds.password.expose(),
        creds.endpoint
    )
}

pub(crate) async fn show_grants(admin: &mut MySqlConnection, user: &str) -> Result<Vec<String>, String> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("show grants for '{user}'@'%'")))
        .fetch_all(admin)
        .await
        .map_err(|e| e.to_string())
}

async fn mysql_database_exists(admin: &mut MySqlConnection, db: &str) -> bool {
    sqlx::query_scalar::<_, i64>("select count(*) from information_schema.schemata where schema_name = ?")
        .bind(db)
        .fetch_one(admin)
        .await
        .unwrap()
        == 1
}

#[tokio::test]
async fn mysql_provision_grants_kines_privileges_on_its_database_only_and_deprovision_drops_both() {
    let driver = MySqlDriver::new(mysql_settings()).unwrap();
    driver.check().await.unwrap();
    let tenant = tenant_named(&name("my")).unwrap();
    let (db, user) = (tenant.schema().to_string(), tenant.user().to_string());
    let creds = sql_creds(driver.provision(&tenant).await.unwrap());

    let mut admin = mysql_admin().await;
    assert!(mysql_database_exists(&mut admin, &db).await);
    let grants = show_grants(&mut admin, &user).await.unwrap();
    assert_eq!(grants.len(), 2, "{grants:?}");
    assert!(
        grants[0].starts_with(&format!(
            "GRANT USAGE ON *.* TO `{user}`@`%` IDENTIFIED BY PASSWORD '*"
        )),
        "{grants:?}"
    );
    assert_eq!(
        grants[1],
        format!("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX, ALTER ON `{db}`.* TO `{user}`@`%`")
    );

    // kine runs on exactly these credentials.
    let dsn = format!(
        "mysql://{user}:{}@tcp({})/{db}",
        creds.password.expose(),
        creds.endpoint
    );
    drop(
        LocalKine::start(localenv::scratch_dir("ds-kine-mysql").unwrap(), &dsn)
            .await
            .unwrap(),
    );
    let mut tenant_conn = MySqlConnection::connect(&mysql_url(&creds, &db)).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar("show tables")
        .fetch_all(&mut tenant_conn)
        .await
        .unwrap();
    assert_eq!(tables, vec!["kine".to_string()]);
    tenant_conn.close().await.unwrap();

    // A wrong password is refused by the server.
    let wrong = SqlCredentials {
        password: Secret::new("not-the-password".into()),
        ..creds.clone()
    };
    let err = MySqlConnection::connect(&mysql_url(&wrong, &db))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Access denied for user"), "{err}");

    // Again with the stored password: same grants, and the password still works.
    let again = sql_creds(
        driver
            .provision(&tenant.clone().with_password(creds.password.clone()))
            .await
            .unwrap(),
    );
    assert_eq!(again.password.expose(), creds.password.expose());
    assert_eq!(show_grants(&mut admin, &user).await.unwrap(), grants);
    MySqlConnection::connect(&mysql_url(&creds, &db))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    // Without a password: a new one that works, and the old one no longer does.
    let renewed = sql_creds(driver.provision(&tenant).await.unwrap());
    MySqlConnection::connect(&mysql_url(&renewed, &db))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    assert!(MySqlConnection::connect(&mysql_url(&creds, &db)).await.is_err());

    driver.deprovision(&tenant).await.unwrap();
    assert!(!mysql_database_exists(&mut admin, &db).await);
    let gone = show_grants(&mut admin, &user).await.unwrap_err();
    assert!(gone.contains("There is no such grant defined"), "{gone}");
    driver.deprovision(&tenant).await.unwrap();
}

#[tokio::test]
async fn mysql_passwords_with_quotes_and_backslashes_are_set_verbatim() {
    let driver = MySqlDriver::new(mysql_settings()).unwrap();
    let password = r#"it's a \'; drop user root; -- "pw"\"#;
    let tenant = tenant_named(&name("myq"))
        .unwrap()
        .with_password(Secret::new(password.into()));
    let creds = sql_creds(driver.provision(&tenant).await.unwrap());
    let options = sqlx::mysql::MySqlConnectOptions::new()
        .host("127.0.0.1")
        .port(support::mariadb().port())
        .username(&creds.user)
        .password(password)
        .database(&creds.database);
    MySqlConnection::connect_with(&options)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    driver.deprovision(&tenant).await.unwrap();
}

/// A frozen tenant's orphaned sessions cannot fill a shared server: its user holds at most
/// [`TENANT_MAX_USER_CONNECTIONS`], and re-provisioning an existing user sets the cap too.
#[tokio::test]
async fn mysql_tenant_users_are_capped_at_their_share_of_the_servers_connections() {
    let driver = MySqlDriver::new(mysql_settings()).unwrap();
    let tenant = tenant_named(&name("mycap")).unwrap();
    let mut admin = mysql_admin().await;
    let cap = async |admin: &mut MySqlConnection| -> i64 {
        sqlx::query_scalar("select cast(max_user_connections as signed) from mysql.user where user = ?")
            .bind(tenant.user())
            .fetch_one(admin)
            .await
            .unwrap()
    };
    driver.provision(&tenant).await.unwrap();
    assert_eq!(cap(&mut admin).await, i64::from(TENANT_MAX_USER_CONNECTIONS));
    let lifted = format!("alter user '{}'@'%' with max_user_connections 0", tenant.user());
    sqlx::query(sqlx::AssertSqlSafe(lifted))
        .execute(&mut admin)
        .await
        .unwrap();
    driver.provision(&tenant).await.unwrap();
    assert_eq!(cap(&mut admin).await, i64::from(TENANT_MAX_USER_CONNECTIONS));
    driver.deprovision(&tenant).await.unwrap();
}

#[tokio::test]
async fn mysql_tenants_cannot_use_each_others_database_and_removing_one_leaves_the_other_intact() {
    let driver = MySqlDriver::new(mysql_settings()).unwrap();
    let a = tenant_named(&name("mya")).unwrap();
    let b = tenant_named(&name("myb")).unwrap();
    let a_creds = sql_creds(driver.provision(&a).await.unwrap());
    let b_creds = sql_creds(driver.provision(&b).await.unwrap());

    let mut b_conn = MySqlConnection::connect(&mysql_url(&b_creds, b.schema()))
        .await
        .unwrap();
    sqlx::raw_sql(
        "create table kine (id bigint unsigned auto_increment primary key, name varchar(630), value mediumblob);
         insert into kine (name, value) values ('/registry/a', x'00ff10'), ('/registry/b', 'text'), ('/registry/c', null);",
    )
    .execute(&mut b_conn)
    .await
    .unwrap();
    let snapshot = "select id, name, value from kine order by id";
    let before: Vec<(u64, String, Option<Vec<u8>>)> =
        sqlx::query_as(snapshot).fetch_all(&mut b_conn).await.unwrap();
    assert_eq!(before.len(), 3);

    let err = MySqlConnection::connect(&mysql_url(&a_creds, b.schema()))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "Access denied for user '{}'@'%' to database '{}'",
            a.user(),
            b.schema()
        )),
        "{message}"
    );
    // Connected to its own database, A still cannot read B's tables.
    let mut a_conn = MySqlConnection::connect(&mysql_url(&a_creds, a.schema()))
        .await
        .unwrap();
    let err = sqlx::query(sqlx::AssertSqlSafe(format!(
        "select * from `{}`.kine",
        b.schema()
    )))
    .fetch_all(&mut a_conn)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("command denied"), "{err}");
    a_conn.close().await.unwrap();

    let mut admin = mysql_admin().await;
    let b_grants = show_grants(&mut admin, b.user()).await.unwrap();
    driver.deprovision(&a).await.unwrap();
    assert!(!mysql_database_exists(&mut admin, a.schema()).await);
    assert!(show_grants(&mut admin, a.user()).await.is_err());
    assert_eq!(show_grants(&mut admin, b.user()).await.unwrap(), b_grants);
    let after: Vec<(u64, String, Option<Vec<u8>>)> =
        sqlx::query_as(snapshot).fetch_all(&mut b_conn).await.unwrap();
    assert_eq!(after, before);
    b_conn.close().await.unwrap();
    driver.deprovision(&b).await.unwrap();
}

#[tokio::test]
async fn mysql_wrong_root_password_is_a_permanent_unauthorized_error() {
    let mut settings = mysql_settings();
    settings.password = Some(Secret::new("definitely-wrong-password".into()));
    let err = MySqlDriver::new(settings).unwrap().check().await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreUnauthorized", "{err}");
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(
        message.contains("rejected the DataStore's credentials"),
        "{message}"
    );
    assert!(!message.contains("definitely-wrong-password"), "{message}");
}

// -------------------------------------------------------------------------------------------- NATS

/// A NATS server of its own: a NATS DataStore holds one tenant, so tests cannot share one.
async fn nats_with_driver(prefix: &str) -> (LocalNats, NatsDriver) {
    let nats = LocalNats::start(localenv::scratch_dir(prefix).unwrap())
        .await
        .unwrap();
    let driver = NatsDriver::new(NatsSettings::new(vec![nats.endpoint()])).unwrap();
    (nats, driver)
}

/// (stream name, description, max messages per subject, replicas) of every stream on the server.
async fn nats_streams(nats: &LocalNats) -> Vec<(String, Option<String>, i64, usize)> {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut streams = js.streams();
    let mut out = Vec::new();
    while let Some(info) = streams.next().await {
        let config = info.unwrap().config;
        out.push((
            config.name,
            config.description,
            config.max_messages_per_subject,
            config.num_replicas,
        ));
    }
    out.sort();
    out
}

#[tokio::test]
async fn nats_provision_makes_a_kine_bucket_that_kine_accepts_and_deprovision_deletes_it() {
    let (nats, driver) = nats_with_driver("ds-nats").await;
    driver.check().await.unwrap();
    let tenant = tenant_named(&name("nats")).unwrap();
    let creds = nats_creds(driver.provision(&tenant).await.unwrap());
    assert_eq!(creds.bucket, tenant.schema());
    assert_eq!(creds.endpoints, vec![nats.endpoint()]);
    let expected = vec![(
        format!("KV_{}", creds.bucket),
        Some(KINE_BUCKET_DESCRIPTION.to_string()),
        10,
        1,
    )];
    let kine_streams = || async {
        let mut streams = nats_streams(&nats).await;
        streams.retain(|s| s.0 != format!("KV_{REGISTRY_BUCKET}"));
        streams
    };
    assert_eq!(kine_streams().await, expected);
    // The owner's marker sits in the registry bucket, under the bucket's name.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let registry = js.get_key_value(REGISTRY_BUCKET).await.unwrap();
    let marker = registry.get(&creds.bucket).await.unwrap().unwrap();
    assert_eq!(marker.as_ref(), tenant.owner().marker().as_bytes());

    // kine 0.17 calls CreateKeyValue with its own config on start: it must find ours identical.
    let dsn = format!("{}?noEmbed&bucket={}", nats.url(), creds.bucket);
    let kine = LocalKine::start(localenv::scratch_dir("ds-kine-nats").unwrap(), &dsn)
        .await
        .unwrap();
    drop(kine);
    assert_eq!(kine_streams().await, expected);

    assert_eq!(
        nats_creds(driver.provision(&tenant).await.unwrap()).bucket,
        creds.bucket
    );
    assert_eq!(kine_streams().await, expected);
    driver.deprovision(&tenant).await.unwrap();
    assert_eq!(kine_streams().await, vec![]);
    assert_eq!(registry.get(&creds.bucket).await.unwrap(), None);
    driver.deprovision(&tenant).await.unwrap();
}

#[tokio::test]
async fn nats_refuses_a_second_tenant_and_creates_no_bucket_for_it() {
    let (nats, driver) = nats_with_driver("ds-nats-two").await;
    // A KV bucket of some other application is not a tenant and does not block anyone.
    let client = async_nats::connect(nats.url()).await.unwrap();
    async_nats::jetstream::new(client)
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "other-app".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = tenant_named(&name("first")).unwrap();
    // A dotted legacy schema maps to an underscore in the bucket name.
    let second = TenantSpace::new(format!("default_{}.v2", name("second")), "second-user", owner()).unwrap();
    let first_bucket = nats_creds(driver.provision(&first).await.unwrap()).bucket;
    let before = nats_streams(&nats).await;
    assert_eq!(before.len(), 3, "{before:?}");

    let err = driver.provision(&second).await.unwrap_err();
    match &err {
        DatastoreError::NatsInUse {
            holder, requested, ..
        } => {
            assert_eq!(holder, &first_bucket);
            assert_eq!(requested, &bucket_name(second.schema()));
            assert!(requested.ends_with("_v2"), "{requested}");
        }
        other => panic!("expected NatsInUse, got {other:?}"),
    }
    assert_eq!(err.reason(), "NatsDataStoreInUse");
    assert!(!err.is_transient());
    assert!(err.to_string().contains(&first_bucket), "{err}");
    assert_eq!(nats_streams(&nats).await, before);

    // Deprovisioning the refused tenant touches nothing; once the first is gone, the second fits.
    driver.deprovision(&second).await.unwrap();
    assert_eq!(nats_streams(&nats).await, before);
    driver.deprovision(&first).await.unwrap();
    let second_bucket = nats_creds(driver.provision(&second).await.unwrap()).bucket;
    let names: Vec<String> = nats_streams(&nats).await.into_iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        vec![
            format!("KV_{second_bucket}"),
            "KV_other-app".to_string(),
            format!("KV_{REGISTRY_BUCKET}")
        ]
    );
}

#[tokio::test]
async fn nats_leaves_a_non_kine_bucket_with_the_tenants_name_alone() {
    let (nats, driver) = nats_with_driver("ds-nats-foreign").await;
    let tenant = tenant_named(&name("app")).unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let kv = async_nats::jetstream::new(client)
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: tenant.schema().into(),
            description: "an application's own bucket".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("key", "value".into()).await.unwrap();
    let before = nats_streams(&nats).await;
    let err = driver.provision(&tenant).await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreForeignObject", "{err}");
    assert!(err.to_string().contains("is not a kine bucket"), "{err}");
    assert_eq!(
        driver.deprovision(&tenant).await.unwrap().left_alone,
        vec![format!(
            "schema {:?} has no ownership marker of this TenantControlPlane",
            tenant.schema()
        )]
    );
    assert_eq!(nats_streams(&nats).await, before);
    assert_eq!(kv.get("key").await.unwrap().unwrap().as_ref(), b"value");
}

// ----------------------------------------------------------------------------------------- errors

#[tokio::test]
async fn check_against_a_closed_port_is_a_transient_unreachable_error_for_every_driver() {
    // A claimed port nobody listens on.
    let closed = ports::claim().unwrap();
    let endpoint = format!("127.0.0.1:{}", closed.port());
    let ca = Ca::new("closed-port-ca").unwrap();
    let client = ca.client("root", &[]).unwrap();
    let results = [
        EtcdDriver::new(EtcdSettings::new(
            vec![endpoint.clone()],
            ca.ca.clone(),
            client.cert_pem,
            Secret::new(client.key_pem),
        ))
        .unwrap()
        .check()
        .await,
        PostgresDriver::new(SqlSettings::new(&endpoint, "postgres", None))
            .unwrap()
            .check()
            .await,
        MySqlDriver::new(SqlSettings::new(&endpoint, "root", None))
            .unwrap()
            .check()
            .await,
        NatsDriver::new(NatsSettings::new(vec![endpoint.clone()]))
            .unwrap()
            .check()
            .await,
    ];
    for result in results {
        let err = result.unwrap_err();
        assert_eq!(err.reason(), "DataStoreUnreachable", "{err}");
        assert!(err.is_transient());
        let message = err.to_string();
        assert!(
            message.contains(&format!("datastore at {endpoint} is unreachable")),
            "{message}"
        );
        assert!(message.to_ascii_lowercase().contains("refused"), "{message}");
    }
}

// ------------------------------------------------------------------------ names from before markers

/// A tenant provisioned before ownership markers existed (user, role with its prefix, data, no marker)
/// is adopted with the client certificate it kept; a certificate from another CA, or for another user,
/// proves nothing.
#[tokio::test]
async fn etcd_adopts_an_unmarked_tenant_only_with_a_certificate_etcd_accepts_for_its_prefix() {
    let (etcd, driver, ca) = etcd_with_driver("ds-etcd-legacy").await;
    let name = name("legacy");
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    root.run(&["user", "add", &name, "--no-password"]).unwrap();
    root.run(&["role", "add", &name]).unwrap();
    root.run(&[
        "role",
        "grant-permission",
        &name,
        "readwrite",
        &format!("/{name}/"),
        "--prefix",
    ])
    .unwrap();
    root.run(&["user", "grant-role", &name, &name]).unwrap();
    root.run(&["put", &format!("/{name}/kept"), "v"]).unwrap();
    let kept = ca.client(&name, &[]).unwrap();

    let stranger = Ca::new("stranger-ca").unwrap().client(&name, &[]).unwrap();
    let other_user = ca.client("someone-else", &[]).unwrap();
    for (what, cert) in [
        ("no certificate", None),
        ("another CA", Some(&stranger)),
        ("another user", Some(&other_user)),
    ] {
        let mut tenant = tenant_named(&name).unwrap();
        if let Some(cert) = cert {
            tenant = tenant.with_client_certificate(cert.cert_pem.clone(), Secret::new(cert.key_pem.clone()));
        }
        let err = driver.provision(&tenant).await.unwrap_err();
        assert_eq!(err.reason(), "DataStoreForeignObject", "{what}: {err}");
    }
    let tenant = tenant_named(&name)
        .unwrap()
        .with_client_certificate(kept.cert_pem.clone(), Secret::new(kept.key_pem.clone()));
    driver.provision(&tenant).await.unwrap();
    assert_eq!(
        etcd.http()
            .unwrap()
            .get(marker_key("schema", &name).as_bytes())
            .await
            .unwrap()
            .as_deref(),
        Some(tenant.owner().marker().as_bytes())
    );
    assert_eq!(
        root.run(&["get", &format!("/{name}/kept"), "--print-value-only"])
            .unwrap(),
        "v\n"
    );
    // Adopted: deprovisioning now removes it.
    assert!(driver.deprovision(&tenant).await.unwrap().left_alone.is_empty());
    assert!(
        etcd_auth_state(&etcd, &name, &name)
            .1
            .unwrap_err()
            .contains("user name not found")
    );
}

/// MariaDB checks passwords: the kept password adopts the unmarked account and database, a wrong one
/// does not.
#[tokio::test]
async fn mysql_adopts_an_unmarked_tenant_only_with_its_own_password() {
    let driver = MySqlDriver::new(mysql_settings()).unwrap();
    let mut admin = mysql_admin().await;
    let name = name("legacy");
    for statement in [
        format!("create database `{name}`"),
        format!("create user '{name}'@'%' identified by 'kept-password'"),
        format!("grant select, insert, update, delete, create, alter, index on `{name}`.* to '{name}'@'%'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let wrong = tenant_named(&name)
        .unwrap()
        .with_password(Secret::new("guessed".into()));
    let err = driver.provision(&wrong).await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreForeignObject", "{err}");
    let right = tenant_named(&name)
        .unwrap()
        .with_password(Secret::new("kept-password".into()));
    let creds = sql_creds(driver.provision(&right).await.unwrap());
    assert_eq!(creds.password.expose(), "kept-password");
    let markers: Vec<String> =
        sqlx::query_scalar("select marker from tenantplane.owners where name = ? order by kind")
            .bind(&name)
            .fetch_all(&mut admin)
            .await
            .unwrap();
    assert_eq!(markers, vec![right.owner().marker(), right.owner().marker()]);
    assert!(driver.deprovision(&right).await.unwrap().left_alone.is_empty());
    assert!(!mysql_database_exists(&mut admin, &name).await);
}

/// PostgreSQL: the kept password adopts the unmarked role and its database (the local server trusts
/// every login, so the refusal of a wrong password is the server's; without a password nothing is
/// adopted).
#[tokio::test]
async fn postgres_adopts_an_unmarked_tenant_with_its_kept_password_and_not_without_one() {
    let driver = PostgresDriver::new(pg_settings()).unwrap();
    let mut admin = pg_admin().await;
    let name = name("legacy");
    for statement in [
        format!("create role \"{name}\" login password 'kept-password'"),
        format!("create database \"{name}\" owner \"{name}\""),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let err = driver.provision(&tenant_named(&name).unwrap()).await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreForeignObject", "{err}");
    let kept = tenant_named(&name)
        .unwrap()
        .with_password(Secret::new("kept-password".into()));
    driver.provision(&kept).await.unwrap();
    let marker: Option<String> =
        sqlx::query_scalar("select shobj_description(oid, 'pg_authid') from pg_roles where rolname = $1")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    assert_eq!(marker, Some(kept.owner().marker()));
    assert!(driver.deprovision(&kept).await.unwrap().left_alone.is_empty());
    assert_eq!(pg_role(&mut admin, &name).await, None);
}

//! A throwaway PostgreSQL cluster: `initdb` plus `postgres` of the installed server, on a free port.

use std::{path::PathBuf, time::Duration};

use sqlx::{Connection, PgConnection};

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec, run_to_completion},
    running_as_root, user_ids, wait_until,
};

/// A running local PostgreSQL server with trust authentication for user `postgres` (or, started with
/// [`LocalPostgres::start_tls`], TLS with client certificates on TCP).
#[derive(Debug)]
pub struct LocalPostgres {
    child: ChildProcess,
    port: ports::PortClaim,
    dir: PathBuf,
}

/// TLS for [`LocalPostgres::start_tls`]: TCP clients need TLS, a client certificate whose CN is their
/// user (`clientcert=verify-full`) and their password (SCRAM); the unix socket stays trusted.
#[derive(Debug, Clone, Copy)]
pub struct PgTls<'a> {
    /// Signs the server certificate (SAN 127.0.0.1, localhost) and is the only client CA.
    pub ca: &'a crate::pki::Ca,
    /// The password set for `postgres`.
    pub password: &'a str,
}

impl LocalPostgres {
    /// Initializes a cluster under `dir` and starts it (as user `postgres` when we are root).
    pub async fn start(dir: PathBuf) -> Result<Self> {
        Self::start_with(dir, None).await
    }

    /// Like [`LocalPostgres::start`], with TLS and client-certificate authentication on TCP.
    pub async fn start_tls(dir: PathBuf, tls: PgTls<'_>) -> Result<Self> {
        Self::start_with(dir, Some(tls)).await
    }

    /// Options for the unix socket, as `postgres`, database `db` (works with and without TLS).
    pub fn socket_options(&self, db: &str) -> sqlx::postgres::PgConnectOptions {
        sqlx::postgres::PgConnectOptions::new()
            .socket(self.dir.join("sockets"))
            .port(self.port())
            .username("postgres")
            .database(db)
    }

    async fn start_with(dir: PathBuf, tls: Option<PgTls<'_>>) -> Result<Self> {
        let user = running_as_root().then(|| "postgres".to_string());
        let data = dir.join("data");
        let sockets = dir.join("sockets");
        std::fs::create_dir_all(&data).context("create the PostgreSQL data dir")?;
        std::fs::create_dir_all(&sockets).context("create the PostgreSQL socket dir")?;
        if let Some(user) = &user {
            let (uid, gid) = user_ids(user).ok_or_else(|| {
                LocalEnvError::Other(
                    "running as root, but there is no `postgres` user to run PostgreSQL".into(),
                )
            })?;
            for path in [&dir, &data, &sockets] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .context(format!("chown {}", path.display()))?;
            }
        }
        let ids = user.as_deref().and_then(user_ids);
        let postgres = assets::system_program("postgres")?;
        let log = dir.join("postgres.log");
        initdb(&dir, &data, user.clone()).await?;

        let tls_args = match tls {
            Some(tls) => write_tls(&data, tls.ca, ids)?,
            None => Vec::new(),
        };
        let mut last = None;
        for _attempt in 0..3 {
            let port = ports::claim().context("claim a port for PostgreSQL")?;
            let spec = Spec::new("postgres", &postgres)
                .args([
                    "-D".as_ref(),
                    data.as_os_str(),
                    "-k".as_ref(),
                    sockets.as_os_str(),
                ])
                .args(["-p".to_string(), port.port().to_string()])
                .args([
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                ])
                .args([
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=400",
                    "-c",
                    "shared_buffers=128MB",
                ])
                // Statement counts for tests that assert how many SQL statements a request runs
                // (`create extension pg_stat_statements` in the database that needs them).
                .args(["-c", "shared_preload_libraries=pg_stat_statements"])
                // Room for every (database, statement) of a whole test run: a full table evicts
                // entries, and a statement count taken across an eviction comes out low.
                .args(["-c", "pg_stat_statements.max=50000"])
                .args(tls_args.iter())
                .user(user.clone());
            let mut child = ChildProcess::spawn(&spec, &log)?;
            let options = sqlx::postgres::PgConnectOptions::new()
                .socket(&sockets)
                .port(port.port())
                .username("postgres")
                .database("postgres");
            let ready = wait_until("PostgreSQL", Duration::from_secs(60), &mut child, || {
                let options = options.clone();
                async move {
                    let mut conn = PgConnection::connect_with(&options)
                        .await
                        .map_err(|e| e.to_string())?;
                    sqlx::query("select 1")
                        .execute(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(())
                }
            })
            .await;
            match ready {
                Ok(()) => {
                    let server = Self { child, port, dir };
                    if let Some(tls) = tls {
                        server.set_password(tls.password).await?;
                    }
                    return Ok(server);
                }
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("PostgreSQL did not start".into())))
    }

    async fn set_password(&self, password: &str) -> Result<()> {
        let mut conn = PgConnection::connect_with(&self.socket_options("postgres"))
            .await
            .map_err(|e| LocalEnvError::Other(format!("PostgreSQL socket: {e}")))?;
        let statement = format!("alter role postgres password '{}'", password.replace('\'', "''"));
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .map_err(|e| LocalEnvError::Other(format!("set the postgres password: {e}")))?;
        Ok(())
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// A connection URL for database `db`.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port())
    }

    /// The URL of the `postgres` maintenance database.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The data and log directory.
    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// Runs `initdb` (as `user`) unless `data` already holds a cluster.
async fn initdb(dir: &std::path::Path, data: &std::path::Path, user: Option<String>) -> Result<()> {
    if data.join("PG_VERSION").exists() {
        return Ok(());
    }
    let spec = Spec::new("initdb", assets::system_program("initdb")?)
        .args(["-D".as_ref(), data.as_os_str()])
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ])
        .user(user);
    run_to_completion(&spec, &dir.join("initdb.log"), Duration::from_secs(120))
        .await
        .context("initdb")?;
    Ok(())
}

/// Writes the server certificate, its key and the client CA into `data`, and a `pg_hba.conf` that
/// trusts the unix socket and wants TLS, a client certificate (CN = user) and a password on TCP.
/// Returns the server flags that turn TLS on.
fn write_tls(data: &std::path::Path, ca: &crate::pki::Ca, ids: Option<(u32, u32)>) -> Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt as _;
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let server = ca
        .server("postgres", &["localhost"], &[loopback])
        .map_err(|e| LocalEnvError::Other(format!("PostgreSQL server certificate: {e}")))?;
    let hba = "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n";
    for (name, content, mode) in [
        ("server.crt", server.cert_pem.as_str(), 0o644),
        ("server.key", server.key_pem.as_str(), 0o600),
        ("client-ca.crt", ca.ca.cert_pem.as_str(), 0o644),
        ("pg_hba.conf", hba, 0o600),
    ] {
        let path = data.join(name);
        std::fs::write(&path, content).context(format!("write {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).context("chmod")?;
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).context("chown")?;
        }
    }
    let settings = [
        "ssl=on",
        "ssl_cert_file=server.crt",
        "ssl_key_file=server.key",
        "ssl_ca_file=client-ca.crt",
    ];
    Ok(settings
        .into_iter()
        .flat_map(|setting| ["-c".to_string(), setting.to_string()])
        .collect())
}

/// Creates a fresh, uniquely named database on the server at `admin_url` and returns its URL.
pub async fn create_database(admin_url: &str, prefix: &str) -> Result<String> {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(admin_url)
        .await
        .map_err(|e| LocalEnvError::Other(format!("connect to PostgreSQL: {e}")))?;
    sqlx::query(sqlx::AssertSqlSafe(format!("create database \"{name}\"")))
        .execute(&mut conn)
        .await
        .map_err(|e| LocalEnvError::Other(format!("create database {name}: {e}")))?;
    let mut url = url_without_db(admin_url);
    url.push('/');
    url.push_str(&name);
    Ok(url)
}

/// `postgres://user@host:port/db?x` → `postgres://user@host:port` (query dropped).
fn url_without_db(url: &str) -> String {
    let without_query = url.split('?').next().unwrap_or(url);
    match without_query.find("://") {
        Some(scheme_end) => match without_query[scheme_end + 3..].find('/') {
            Some(slash) => without_query[..scheme_end + 3 + slash].to_string(),
            None => without_query.to_string(),
        },
        None => without_query.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::url_without_db;

    #[test]
    fn url_without_db_strips_path_and_query() {
        assert_eq!(
            url_without_db("postgres://u:p@h:5/db?sslmode=disable"),
            "postgres://u:p@h:5"
        );
        assert_eq!(url_without_db("postgres://u@h:5"), "postgres://u@h:5");
    }
}

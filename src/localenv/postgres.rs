//! A throwaway PostgreSQL cluster: `initdb` plus `postgres` of the installed server, on a free port.

use std::{path::PathBuf, time::Duration};

use sqlx::{Connection, PgConnection};

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec, run_to_completion},
    running_as_root, user_ids, wait_until,
};

/// A running local PostgreSQL server with trust authentication for user `postgres`.
#[derive(Debug)]
pub struct LocalPostgres {
    child: ChildProcess,
    port: ports::PortClaim,
    dir: PathBuf,
}

impl LocalPostgres {
    /// Initializes a cluster under `dir` and starts it (as user `postgres` when we are root).
    pub async fn start(dir: PathBuf) -> Result<Self> {
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
        let initdb = assets::system_program("initdb")?;
        let postgres = assets::system_program("postgres")?;
        let log = dir.join("postgres.log");
        if !data.join("PG_VERSION").exists() {
            let spec = Spec::new("initdb", initdb)
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
                .user(user.clone());
            run_to_completion(&spec, &dir.join("initdb.log"), Duration::from_secs(120))
                .await
                .context("initdb")?;
        }

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
                .user(user.clone());
            let mut child = ChildProcess::spawn(&spec, &log)?;
            let url = format!("postgres://postgres@127.0.0.1:{}/postgres", port.port());
            let ready = wait_until("PostgreSQL", Duration::from_secs(60), &mut child, || {
                let url = url.clone();
                async move {
                    let mut conn = PgConnection::connect(&url).await.map_err(|e| e.to_string())?;
                    sqlx::query("select 1")
                        .execute(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(())
                }
            })
            .await;
            match ready {
                Ok(()) => return Ok(Self { child, port, dir }),
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("PostgreSQL did not start".into())))
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

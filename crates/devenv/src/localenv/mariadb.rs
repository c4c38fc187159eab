//! A throwaway MariaDB server (Debian's `mariadb-server`) on a free port, with a passwordless
//! `root` reachable over TCP on 127.0.0.1.

use std::{path::PathBuf, time::Duration};

use sqlx::{Connection, MySqlConnection};

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec, run_to_completion},
    running_as_root, wait_until,
};

/// A running MariaDB server.
#[derive(Debug)]
pub struct LocalMariaDb {
    child: ChildProcess,
    port: ports::PortClaim,
    socket: PathBuf,
}

const INIT_SQL: &str = "\
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
";

/// TLS for [`LocalMariaDb::start_tls`]: every TCP connection needs TLS (`require_secure_transport`),
/// and the account [`TLS_ADMIN`] (all privileges) also a client certificate signed by `ca`.
#[derive(Debug, Clone, Copy)]
pub struct MariaDbTls<'a> {
    /// Signs the server certificate (SAN 127.0.0.1, localhost) and client certificates.
    pub ca: &'a crate::pki::Ca,
    /// The password of [`TLS_ADMIN`].
    pub password: &'a str,
}

/// The administrator account of a TLS server: `'tpadmin'@'%'`, `REQUIRE X509`.
pub const TLS_ADMIN: &str = "tpadmin";

impl LocalMariaDb {
    /// Initializes a data directory under `dir` and starts `mariadbd`.
    pub async fn start(dir: PathBuf) -> Result<Self> {
        Self::start_with(dir, None).await
    }

    /// Like [`LocalMariaDb::start`], with TLS required on TCP and a certificate-authenticated admin.
    /// `root` then connects through the unix socket only ([`LocalMariaDb::socket_url`]).
    pub async fn start_tls(dir: PathBuf, tls: MariaDbTls<'_>) -> Result<Self> {
        Self::start_with(dir, Some(tls)).await
    }

    async fn start_with(dir: PathBuf, tls: Option<MariaDbTls<'_>>) -> Result<Self> {
        let install_db = assets::system_program("mariadb-install-db")?;
        let mariadbd = assets::system_program("mariadbd")?;
        let data = dir.join("data");
        std::fs::create_dir_all(&data).context("create the MariaDB data dir")?;
        // A temporary directory of its own: installs running at once in a shared /tmp failed on
        // each other's temporary tables ("Unknown table 'mysql.tmp_user_sys'").
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).context("create the MariaDB tmp dir")?;
        let init_file = dir.join("init.sql");
        let mut init = INIT_SQL.to_string();
        let mut tls_args = Vec::new();
        if let Some(tls) = tls {
            tls_args = write_tls(&dir, tls.ca)?;
            init.push_str(&format!(
                "CREATE USER IF NOT EXISTS '{TLS_ADMIN}'@'%' IDENTIFIED BY '{}' REQUIRE X509;\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{TLS_ADMIN}'@'%' WITH GRANT OPTION;\nFLUSH PRIVILEGES;\n",
                tls.password.replace('\'', "''")
            ));
        }
        std::fs::write(&init_file, init).context("write the MariaDB init file")?;
        let root_flag: Vec<String> = if running_as_root() {
            vec!["--user=root".into()]
        } else {
            vec![]
        };

        let install = Spec::new("mariadb-install-db", install_db)
            .args([
                "--no-defaults".to_string(),
                format!("--datadir={}", data.display()),
                format!("--tmpdir={}", tmp.display()),
            ])
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(root_flag.clone());
        run_to_completion(&install, &dir.join("install-db.log"), Duration::from_secs(180))
            .await
            .context("mariadb-install-db")?;

        let mut last = None;
        for _attempt in 0..3 {
            let port = ports::claim().context("claim the MariaDB port")?;
            let spec = Spec::new("mariadbd", &mariadbd)
                .args([
                    "--no-defaults".to_string(),
                    format!("--datadir={}", data.display()),
                    format!("--tmpdir={}", tmp.display()),
                    format!("--port={}", port.port()),
                    "--bind-address=127.0.0.1".into(),
                    format!("--socket={}", dir.join("mysqld.sock").display()),
                    format!("--pid-file={}", dir.join("mysqld.pid").display()),
                    format!("--init-file={}", init_file.display()),
                    "--innodb-flush-log-at-trx-commit=0".into(),
                    "--innodb-buffer-pool-size=64M".into(),
                    "--skip-name-resolve".into(),
                    "--max-connections=300".into(),
                ])
                .args(tls_args.iter())
                .args(root_flag.clone());
            let mut child = ChildProcess::spawn(&spec, &dir.join("mariadbd.log"))?;
            let url = if tls.is_some() {
                format!(
                    "mysql://root@localhost/mysql?socket={}",
                    dir.join("mysqld.sock").display()
                )
            } else {
                format!("mysql://root@127.0.0.1:{}/mysql", port.port())
            };
            let ready = wait_until("MariaDB", Duration::from_secs(90), &mut child, || {
                let url = url.clone();
                async move {
                    let mut conn = MySqlConnection::connect(&url).await.map_err(|e| e.to_string())?;
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
                    return Ok(Self {
                        child,
                        port,
                        socket: dir.join("mysqld.sock"),
                    });
                }
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("MariaDB did not start".into())))
    }

    /// The port (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// A sqlx URL for the root user and database `db`.
    pub fn url_for(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port())
    }

    /// A sqlx URL for root over the unix socket (also works when TCP needs TLS).
    pub fn socket_url(&self, db: &str) -> String {
        format!("mysql://root@localhost/{db}?socket={}", self.socket.display())
    }

    /// A kine DSN for the root user and database `db`.
    pub fn kine_dsn(&self, db: &str) -> String {
        format!("mysql://root@tcp(127.0.0.1:{})/{db}", self.port())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// Writes the server certificate, its key and the CA into `dir`; returns the server's TLS flags.
fn write_tls(dir: &std::path::Path, ca: &crate::pki::Ca) -> Result<Vec<String>> {
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let server = ca
        .server("mariadb", &["localhost"], &[loopback])
        .map_err(|e| LocalEnvError::Other(format!("MariaDB server certificate: {e}")))?;
    let mut args = vec!["--require-secure-transport=ON".to_string()];
    for (name, content, flag) in [
        ("server.crt", &server.cert_pem, "ssl-cert"),
        ("server.key", &server.key_pem, "ssl-key"),
        ("ca.crt", &ca.ca.cert_pem, "ssl-ca"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, content).context(format!("write {}", path.display()))?;
        args.push(format!("--{flag}={}", path.display()));
    }
    Ok(args)
}

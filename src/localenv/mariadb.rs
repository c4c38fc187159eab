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
}

const INIT_SQL: &str = "\
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
";

impl LocalMariaDb {
    /// Initializes a data directory under `dir` and starts `mariadbd`.
    pub async fn start(dir: PathBuf) -> Result<Self> {
        let install_db = assets::system_program("mariadb-install-db")?;
        let mariadbd = assets::system_program("mariadbd")?;
        let data = dir.join("data");
        std::fs::create_dir_all(&data).context("create the MariaDB data dir")?;
        let init_file = dir.join("init.sql");
        std::fs::write(&init_file, INIT_SQL).context("write the MariaDB init file")?;
        let root_flag: Vec<String> = if running_as_root() {
            vec!["--user=root".into()]
        } else {
            vec![]
        };

        let install = Spec::new("mariadb-install-db", install_db)
            .args([
                "--no-defaults".to_string(),
                format!("--datadir={}", data.display()),
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
                .args(root_flag.clone());
            let mut child = ChildProcess::spawn(&spec, &dir.join("mariadbd.log"))?;
            let url = format!("mysql://root@127.0.0.1:{}/mysql", port.port());
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
                Ok(()) => return Ok(Self { child, port }),
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

    /// A kine DSN for the root user and database `db`.
    pub fn kine_dsn(&self, db: &str) -> String {
        format!("mysql://root@tcp(127.0.0.1:{})/{db}", self.port())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

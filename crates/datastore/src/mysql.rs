//! MySQL and MariaDB: each tenant gets a database `<schema>` and a user `'<user>'@'%'` with a password
//! and, like Kamaji, exactly the privileges kine uses on that database only: `SELECT, INSERT, UPDATE,
//! DELETE, CREATE, ALTER, INDEX ON `<schema>`.*` (narrower than `ALL PRIVILEGES`: no `DROP`, `GRANT
//! OPTION`, `TRIGGER`, `LOCK TABLES`, ...). The tests start a real kine with these credentials.
//!
//! Names and passwords cannot be bind parameters in `CREATE USER`/`GRANT`, so database names go through
//! [`quote_ident`] and account names and passwords through [`quote_literal`], which follows the
//! session's `NO_BACKSLASH_ESCAPES` mode. Statement logging is off on these connections, and server
//! messages are scrubbed of the password.
//!
//! In `GRANT ... ON db.*`, `_` and `%` are wildcards, so the database name is escaped there
//! ([`grant_pattern`]) and the grants are read back from `mysql.db` after every provisioning: exactly one
//! database-level grant, the tenant's own, with exactly kine's privileges.
//!
//! Ownership markers live in a registry table, `tenantplane.owners` (database [`REGISTRY_DATABASE`],
//! reserved), one row per schema and per user, claimed with `INSERT IGNORE`. An existing database or
//! account without a row is never adopted, altered or dropped.
//!
//! MySQL 8 limits user names to 32 characters (a UID has 36, which MariaDB's 80 accepts): a longer name
//! is a permanent error that says to set `spec.dataStoreUsername`.

use sqlx::{
    ConnectOptions, Connection, MySqlConnection,
    mysql::{MySqlConnectOptions, MySqlSslMode},
};

use super::{
    Claim, DatastoreError, Deprovisioned, Driver, Owner, SqlCredentials, SqlSettings, TenantCredentials,
    TenantSpace, refuse_reserved, split_host_port, sql, with_timeout,
};
use crate::k8s::crd;

/// The most sessions one tenant user may hold on a shared server (`max_user_connections`): four of
/// kine's pools of 64 (replicas and a rollout's surge). Writes asleep in a migration freeze keep their
/// server session after kine gives up on them and opens another, so without a cap one frozen tenant
/// fills the server's `max_connections` and locks out the admin account that must end the freeze.
pub const TENANT_MAX_USER_CONNECTIONS: u32 = 256;
const KIND: crd::Driver = crd::Driver::MySQL;

/// The privileges a tenant gets on its database: what kine needs (the same list as Kamaji).
pub const TENANT_PRIVILEGES: &str = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX";

/// `mysql.db`'s flags of [`TENANT_PRIVILEGES`], then `Drop_priv` and `Grant_priv`, as the tenant's grant
/// must have them.
const EXPECTED_FLAGS: &str = "YYYYYYYNN";

/// The database of the ownership registry; no tenant schema may use it.
pub const REGISTRY_DATABASE: &str = "tenantplane";

/// The database of live migrations' freeze flags (one table per frozen tenant database, see
/// the kine mover's freeze in `migrate::sql`); no tenant schema may use it.
pub const FREEZE_DATABASE: &str = "tenantplane_freeze";

/// ER_NO_SUCH_THREAD: the connection to kill is already gone.
pub(crate) const NO_SUCH_THREAD: u16 = 1094;

/// `information_schema.processlist.state` of a statement waiting for a table's metadata lock.
pub(crate) const WAITING_FOR_TABLE: &str = "Waiting for table metadata lock";

const REGISTRY_DDL: [&str; 2] = [
    "create database if not exists `tenantplane`",
    "create table if not exists `tenantplane`.`owners` (\
     kind varchar(8) character set ascii collate ascii_bin not null, \
     name varchar(128) character set ascii collate ascii_bin not null, \
     marker varchar(600) character set ascii collate ascii_bin not null, \
     primary key (kind, name))",
];

/// The MySQL/MariaDB driver.
#[derive(Debug)]
pub struct MySqlDriver {
    settings: SqlSettings,
    host: String,
    port: u16,
    registry_ready: std::sync::atomic::AtomicBool,
    /// `version()` of the server, read once (it decides the longest user name).
    server_version: std::sync::OnceLock<String>,
}

/// Escapes `_`, `%` and `\` in a database name for `GRANT ... ON <pattern>.*`, where `_` and `%` are
/// wildcards.
pub fn grant_pattern(database: &str) -> String {
    let mut pattern = String::with_capacity(database.len() + 4);
    for c in database.chars() {
        if matches!(c, '_' | '%' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// The longest user name the server takes: 80 characters on MariaDB, 32 on MySQL (from `version()`).
pub fn max_user_len(version: &str) -> usize {
    if version.to_ascii_lowercase().contains("mariadb") {
        80
    } else {
        32
    }
}

/// Quotes an identifier: backticks around it, inner backticks doubled.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Quotes a string literal. `'` is always doubled; backslashes are doubled unless the session runs with
/// `NO_BACKSLASH_ESCAPES` (where a backslash is an ordinary character).
pub fn quote_literal(value: &str, no_backslash_escapes: bool) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('\'');
    for c in value.chars() {
        match c {
            '\'' => quoted.push_str("''"),
            '\\' if !no_backslash_escapes => quoted.push_str("\\\\"),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// Whether `error` is MySQL error `number`.
fn is_error(error: &sqlx::Error, number: u16) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == number)
}

impl MySqlDriver {
    /// A driver for the server in `settings`.
    pub fn new(settings: SqlSettings) -> Result<Self, DatastoreError> {
        let (host, port) = split_host_port(KIND, &settings.endpoint)?;
        Ok(Self {
            settings,
            host,
            port,
            registry_ready: std::sync::atomic::AtomicBool::new(false),
            server_version: std::sync::OnceLock::new(),
        })
    }

    fn options(&self) -> MySqlConnectOptions {
        let mut options = MySqlConnectOptions::new()
            .host(&self.host)
            .port(self.port)
            .username(&self.settings.username)
            .disable_statement_logging();
        if let Some(password) = &self.settings.password {
            options = options.password(password.expose());
        }
        match &self.settings.tls {
            Some(tls) => {
                options = options
                    .ssl_mode(MySqlSslMode::VerifyIdentity)
                    .ssl_ca_from_pem(tls.ca_cert_pem.as_bytes().to_vec());
                if let (Some(cert), Some(key)) = (&tls.client_cert_pem, &tls.client_key_pem) {
                    options = options
                        .ssl_client_cert_from_pem(cert.as_bytes())
                        .ssl_client_key_from_pem(key.expose().as_bytes());
                }
                options
            }
            None => options.ssl_mode(MySqlSslMode::Disabled),
        }
    }

    /// An admin connection whose default database is `database` (a tenant's).
    pub(crate) async fn connect_to(&self, database: &str) -> Result<MySqlConnection, DatastoreError> {
        MySqlConnection::connect_with(&self.options().database(database))
            .await
            .map_err(|e| self.error("connect to the tenant database", e, None))
    }

    /// The admin settings this driver was built from.
    pub fn settings(&self) -> &SqlSettings {
        &self.settings
    }

    async fn connect(&self) -> Result<MySqlConnection, DatastoreError> {
        MySqlConnection::connect_with(&self.options())
            .await
            .map_err(|e| self.error("connect", e, None))
    }

    fn error(&self, operation: &'static str, error: sqlx::Error, secret: Option<&str>) -> DatastoreError {
        sql::error(KIND, &self.settings.endpoint, operation, error, secret)
    }

    async fn exec(
        &self,
        conn: &mut MySqlConnection,
        operation: &'static str,
        statement: String,
        secret: Option<&str>,
    ) -> Result<(), DatastoreError> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| self.error(operation, e, secret))
    }

    fn check_names(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let databases = [
            "mysql",
            "information_schema",
            "performance_schema",
            "sys",
            REGISTRY_DATABASE,
            FREEZE_DATABASE,
        ];
        refuse_reserved("schema", tenant.schema(), &databases, &[])?;
        refuse_reserved(
            "user",
            tenant.user(),
            &["root", "mysql", "mariadb.sys", "debian-sys-maint"],
            &["mysql."],
        )?;
        if tenant.user() == self.settings.username {
            return Err(DatastoreError::InvalidName {
                field: "user",
                value: tenant.user().to_string(),
                reason: "it is the DataStore's own user".into(),
            });
        }
        Ok(())
    }

    /// Whether the session runs with `NO_BACKSLASH_ESCAPES` (it decides how literals are quoted).
    pub(crate) async fn no_backslash_escapes(
        &self,
        conn: &mut MySqlConnection,
    ) -> Result<bool, DatastoreError> {
        let mode: String = sqlx::query_scalar("select @@session.sql_mode")
            .fetch_one(conn)
            .await
            .map_err(|e| self.error("read the session's sql_mode", e, None))?;
        Ok(mode
            .split(',')
            .any(|m| m.eq_ignore_ascii_case("NO_BACKSLASH_ESCAPES")))
    }

    /// Creates the registry database and table once per driver.
    async fn ensure_registry(&self, conn: &mut MySqlConnection) -> Result<(), DatastoreError> {
        use std::sync::atomic::Ordering;
        if self.registry_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        for statement in REGISTRY_DDL {
            self.exec(conn, "create the ownership registry", statement.to_string(), None)
                .await?;
        }
        self.registry_ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The marker recorded for `kind` (`schema` or `user`) `name`, if any.
    async fn marker(
        &self,
        conn: &mut MySqlConnection,
        kind: &str,
        name: &str,
    ) -> Result<Option<String>, DatastoreError> {
        sqlx::query_scalar("select marker from `tenantplane`.`owners` where kind = ? and name = ?")
            .bind(kind)
            .bind(name)
            .fetch_optional(conn)
            .await
            .map_err(|e| self.error("read the ownership registry", e, None))
    }

    /// Whether a database (`schema`) or an account of any host (`user`) named `name` exists.
    async fn exists(
        &self,
        conn: &mut MySqlConnection,
        kind: &str,
        name: &str,
    ) -> Result<bool, DatastoreError> {
        let query = if kind == "user" {
            "select count(*) from mysql.user where User = ?"
        } else {
            "select count(*) from information_schema.schemata where schema_name = ?"
        };
        let count: i64 = sqlx::query_scalar(query)
            .bind(name)
            .fetch_one(conn)
            .await
            .map_err(|e| self.error("look up an existing name", e, None))?;
        Ok(count > 0)
    }

    fn refused(&self, field: &'static str, name: &str, claim: Claim) -> Result<(), DatastoreError> {
        let kind = if field == "user" { "account" } else { "database" };
        claim.accept(KIND, &self.settings.endpoint, (field, kind), name)
    }

    /// Claims `field` `name` for `owner`: a name in the registry must be the owner's; a name nobody
    /// claimed must not exist yet; then one `INSERT IGNORE` takes it (a concurrent claim wins).
    async fn claim(
        &self,
        conn: &mut MySqlConnection,
        field: &'static str,
        name: &str,
        owner: &Owner,
        possessed: bool,
    ) -> Result<(), DatastoreError> {
        if let Some(marker) = self.marker(conn, field, name).await? {
            return self.refused(field, name, owner.judge(Some(&marker)));
        }
        if self.exists(conn, field, name).await? && !possessed {
            return self.refused(field, name, Claim::Unmarked);
        }
        sqlx::query("insert ignore into `tenantplane`.`owners` (kind, name, marker) values (?, ?, ?)")
            .bind(field)
            .bind(name)
            .bind(owner.marker())
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error("claim the tenant name", e, None))?;
        let marker = self.marker(conn, field, name).await?;
        self.refused(field, name, owner.judge(marker.as_deref()))
    }

    /// Refuses `tenant` unless the registry records its database and its account as its owner's.
    async fn check_owned_inner(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let mut conn = self.connect().await?;
        self.ensure_registry(&mut conn).await?;
        for (field, kind, name) in [
            ("schema", "database", tenant.schema()),
            ("user", "account", tenant.user()),
        ] {
            let marker = self.marker(&mut conn, field, name).await?;
            let marker = marker.ok_or_else(|| crate::missing(KIND, &self.settings.endpoint, kind, name))?;
            self.refused(field, name, tenant.owner().judge(Some(&marker)))?;
        }
        let _ = conn.close().await;
        Ok(())
    }

    /// Whether the tenant already holds its account and database from before ownership markers: the
    /// password it kept (from its own Secret) logs in to its database. A refusal is `false`.
    async fn possessed(&self, tenant: &TenantSpace) -> Result<bool, DatastoreError> {
        let Some(password) = tenant.password() else {
            return Ok(false);
        };
        let options = MySqlConnectOptions::new()
            .host(&self.host)
            .port(self.port)
            .username(tenant.user())
            .password(password.expose())
            .database(tenant.schema())
            .disable_statement_logging();
        // The tenant's own login: TLS (if any) without the DataStore's client certificate.
        let options = match &self.settings.tls {
            Some(tls) => options
                .ssl_mode(MySqlSslMode::VerifyIdentity)
                .ssl_ca_from_pem(tls.ca_cert_pem.as_bytes().to_vec()),
            None => options.ssl_mode(MySqlSslMode::Disabled),
        };
        match MySqlConnection::connect_with(&options).await {
            Ok(conn) => {
                let _ = conn.close().await;
                Ok(true)
            }
            Err(e) => match self.error("log in as the tenant", e, Some(password.expose())) {
                e @ (DatastoreError::Unreachable { .. } | DatastoreError::Timeout { .. }) => Err(e),
                _ => Ok(false),
            },
        }
    }

    /// Refuses a user name longer than the server takes (a permanent error, never a retry loop).
    async fn check_user_len(&self, conn: &mut MySqlConnection, user: &str) -> Result<(), DatastoreError> {
        // Every server takes 32 characters; only a longer name needs the server's own limit.
        if user.chars().count() <= 32 {
            return Ok(());
        }
        let version = match self.server_version.get() {
            Some(version) => version.clone(),
            None => {
                let version: String = sqlx::query_scalar("select version()")
                    .fetch_one(conn)
                    .await
                    .map_err(|e| self.error("read the server version", e, None))?;
                self.server_version.get_or_init(|| version).clone()
            }
        };
        let max = max_user_len(&version);
        if user.chars().count() > max {
            return Err(DatastoreError::InvalidName {
                field: "user",
                value: user.to_string(),
                reason: format!(
                    "this server ({version}) takes user names of at most {max} characters; \
                     set spec.dataStoreUsername to a shorter name"
                ),
            });
        }
        Ok(())
    }

    /// Revokes every database-level grant of the account but the tenant's, then checks that exactly
    /// the tenant's remains, with exactly kine's privileges.
    async fn converge_grants(
        &self,
        conn: &mut MySqlConnection,
        user: &str,
        account: &str,
        pattern: &str,
    ) -> Result<(), DatastoreError> {
        for (db, _) in self.grants(conn, user).await? {
            if db != pattern {
                let revoke = format!("revoke all privileges on {}.* from {account}", quote_ident(&db));
                self.exec(conn, "revoke a foreign grant of the tenant user", revoke, None)
                    .await?;
            }
        }
        let grants = self.grants(conn, user).await?;
        if grants != [(pattern.to_string(), EXPECTED_FLAGS.to_string())] {
            return Err(DatastoreError::Backend {
                driver: KIND,
                endpoint: self.settings.endpoint.clone(),
                operation: "check the tenant user's grants",
                message: format!(
                    "expected exactly {TENANT_PRIVILEGES} on {pattern}.*, found {}",
                    grants
                        .iter()
                        .map(|(db, flags)| format!("{db}.* ({flags})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(())
    }

    /// The account's database-level grants from `mysql.db`: `(Db pattern, flags)` as in [`EXPECTED_FLAGS`].
    async fn grants(
        &self,
        conn: &mut MySqlConnection,
        user: &str,
    ) -> Result<Vec<(String, String)>, DatastoreError> {
        sqlx::query_as(
            "select cast(Db as char character set utf8mb4), \
             cast(concat(Select_priv, Insert_priv, Update_priv, Delete_priv, Create_priv, Alter_priv, \
             Index_priv, Drop_priv, Grant_priv) as char character set utf8mb4) \
             from mysql.db where User = ? and Host = '%' order by Db",
        )
        .bind(user)
        .fetch_all(conn)
        .await
        .map_err(|e| self.error("read the tenant user's grants", e, None))
    }

    async fn provision_inner(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let password = tenant.password_or_random();
        if password.expose().contains('\0') {
            return Err(DatastoreError::InvalidConfig {
                driver: KIND,
                message: "the tenant password contains a NUL character".into(),
            });
        }
        let secret = Some(password.expose().as_str());
        let mut conn = self.connect().await?;
        self.check_user_len(&mut conn, user).await?;
        self.ensure_registry(&mut conn).await?;
        // An unmarked existing name is adopted only when the tenant proves it already holds it.
        let mut possessed = false;
        for (field, name) in [("schema", schema), ("user", user)] {
            match self
                .claim(&mut conn, field, name, tenant.owner(), possessed)
                .await
            {
                Err(DatastoreError::ForeignObject { .. }) if !possessed && self.possessed(tenant).await? => {
                    possessed = true;
                    self.claim(&mut conn, field, name, tenant.owner(), true).await?;
                }
                other => other?,
            }
        }
        let nbe = self.no_backslash_escapes(&mut conn).await?;
        let account = format!("{}@'%'", quote_literal(user, nbe));
        let literal = quote_literal(password.expose(), nbe);
        let database = quote_ident(schema);
        let pattern = grant_pattern(schema);
        let statements = [
            (
                "create the tenant database",
                format!("create database if not exists {database}"),
                None,
            ),
            (
                "create the tenant user",
                format!("create user if not exists {account} identified by {literal}"),
                secret,
            ),
            (
                "set the tenant user's password and connection cap",
                format!(
                    "alter user {account} identified by {literal} \
                     with max_user_connections {TENANT_MAX_USER_CONNECTIONS}"
                ),
                secret,
            ),
            (
                "grant the tenant user its database",
                format!(
                    "grant {TENANT_PRIVILEGES} on {}.* to {account}",
                    quote_ident(&pattern)
                ),
                None,
            ),
        ];
        for (operation, statement, secret) in statements {
            self.exec(&mut conn, operation, statement, secret).await?;
        }
        self.converge_grants(&mut conn, user, &account, &pattern).await?;
        let _ = conn.close().await;
        Ok(TenantCredentials::Sql(SqlCredentials {
            user: user.to_string(),
            password,
            database: schema.to_string(),
            endpoint: self.settings.endpoint.clone(),
        }))
    }

    /// Drops the tenant's database, then its migration freeze flag. Writes that sleep in a freeze hold
    /// the table's metadata lock until their session ends, so the drop waits; meanwhile every other
    /// session of the tenant (its user, or its database as the default) is killed. The kills start only
    /// once the drop waits for the table: from then on, new reads of the table wait behind it. kine
    /// answers a create whose insert failed as a success when it then reads the key and finds no row
    /// (`LogStructured.Create`), so a killed write must not find a read that works.
    async fn drop_database(
        &self,
        conn: &mut MySqlConnection,
        schema: &str,
        user: &str,
    ) -> Result<(), DatastoreError> {
        let mut dropper = self.connect().await?;
        let id: i64 = sqlx::query_scalar("select cast(connection_id() as signed)")
            .fetch_one(&mut dropper)
            .await
            .map_err(|e| self.error("read the connection id", e, None))?;
        let wait = format!(
            "set session lock_wait_timeout = {}",
            self.settings.timeout.as_secs().max(1)
        );
        self.exec(&mut dropper, "set the lock wait timeout", wait, None)
            .await?;
        let drop = format!("drop database if exists {}", quote_ident(schema));
        // The killer runs on a connection of its own: when the drop ends first its future is dropped
        // mid-query, which leaves that connection unreadable, so it is never used again.
        let mut killer = self.connect().await?;
        let dropped = tokio::select! {
            dropped = self.exec(&mut dropper, "drop the tenant database", drop, None) => dropped,
            failed = self.end_sessions(&mut killer, schema, user, id) => Err(failed),
        };
        std::mem::drop(killer);
        let _ = dropper.close().await;
        dropped?;
        let flag = format!(
            "drop table if exists {}.{}",
            quote_ident(FREEZE_DATABASE),
            quote_ident(schema)
        );
        self.exec(conn, "drop the tenant's freeze flag", flag, None).await
    }

    /// Kills the tenant's sessions whenever connection `dropper` waits for a table lock; returns only
    /// on a failure.
    async fn end_sessions(
        &self,
        conn: &mut MySqlConnection,
        schema: &str,
        user: &str,
        dropper: i64,
    ) -> DatastoreError {
        loop {
            if let Err(e) = self.kill_sessions(conn, schema, user, dropper).await {
                return e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Kills every session of the tenant but this one and `dropper`, if `dropper` waits for a table.
    async fn kill_sessions(
        &self,
        conn: &mut MySqlConnection,
        schema: &str,
        user: &str,
        dropper: i64,
    ) -> Result<(), DatastoreError> {
        let state: Option<Option<String>> = sqlx::query_scalar(
            "select cast(state as char character set utf8mb4) from information_schema.processlist \
             where id = ?",
        )
        .bind(dropper)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| self.error("read the drop's state", e, None))?;
        if state.flatten().as_deref() != Some(WAITING_FOR_TABLE) {
            return Ok(());
        }
        let sessions: Vec<i64> = sqlx::query_scalar(
            "select cast(id as signed) from information_schema.processlist \
             where (db = ? or user = ?) and id <> ? and id <> connection_id()",
        )
        .bind(schema)
        .bind(user)
        .bind(dropper)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.error("list the tenant's sessions", e, None))?;
        for session in sessions {
            let killed = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("kill connection {session}")))
                .execute(&mut *conn)
                .await;
            match killed {
                Err(e) if !is_error(&e, NO_SUCH_THREAD) => {
                    return Err(self.error("end a session of the tenant", e, None));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Drops the account and the database where the registry marks them the tenant's, then their rows.
    async fn deprovision_inner(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let mut conn = self.connect().await?;
        self.ensure_registry(&mut conn).await?;
        let nbe = self.no_backslash_escapes(&mut conn).await?;
        let mut outcome = Deprovisioned::default();
        for (field, name) in [("user", user), ("schema", schema)] {
            let Some(marker) = self.marker(&mut conn, field, name).await? else {
                if self.exists(&mut conn, field, name).await? {
                    outcome.note(field, name, &Claim::Unmarked);
                }
                continue;
            };
            let claim = tenant.owner().judge(Some(&marker));
            if claim != Claim::Ours {
                outcome.note(field, name, &claim);
                continue;
            }
            if field == "user" {
                let drop = format!("drop user if exists {}@'%'", quote_literal(user, nbe));
                self.exec(&mut conn, "drop the tenant user", drop, None).await?;
            } else {
                self.drop_database(&mut conn, schema, user).await?;
            }
            sqlx::query("delete from `tenantplane`.`owners` where kind = ? and name = ? and marker = ?")
                .bind(field)
                .bind(name)
                .bind(&marker)
                .execute(&mut conn)
                .await
                .map_err(|e| self.error("delete the ownership marker", e, None))?;
        }
        let _ = conn.close().await;
        Ok(outcome)
    }
}

impl Driver for MySqlDriver {
    fn kind(&self) -> crd::Driver {
        KIND
    }

    async fn check(&self) -> Result<(), DatastoreError> {
        with_timeout(
            KIND,
            &self.settings.endpoint,
            "check",
            self.settings.timeout,
            async {
                let mut conn = self.connect().await?;
                sqlx::query("select 1")
                    .execute(&mut conn)
                    .await
                    .map_err(|e| self.error("run select 1", e, None))?;
                let _ = conn.close().await;
                Ok(())
            },
        )
        .await
    }

    async fn provision(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        self.check_names(tenant)?;
        with_timeout(
            KIND,
            &self.settings.endpoint,
            "provision",
            self.settings.timeout * 3,
            self.provision_inner(tenant),
        )
        .await
    }

    /// A random identity recorded once in the ownership registry (MariaDB has no `@@server_uuid`).
    async fn server_identity(&self) -> Result<String, DatastoreError> {
        with_timeout(KIND, &self.settings.endpoint, "read the server identity", self.settings.timeout, async {
            let mut conn = self.connect().await?;
            self.ensure_registry(&mut conn).await?;
            sqlx::query(
                "insert ignore into `tenantplane`.`owners` (kind, name, marker) values ('server', 'identity', uuid())",
            )
            .execute(&mut conn)
            .await
            .map_err(|e| self.error("record the server identity", e, None))?;
            let id = self.marker(&mut conn, "server", "identity").await?.unwrap_or_default();
            let _ = conn.close().await;
            Ok(format!("MySQL server {id}"))
        })
        .await
    }

    async fn check_owned(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        self.check_names(tenant)?;
        with_timeout(
            KIND,
            &self.settings.endpoint,
            "check ownership",
            self.settings.timeout,
            self.check_owned_inner(tenant),
        )
        .await
    }

    async fn deprovision(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        self.check_names(tenant)?;
        with_timeout(
            KIND,
            &self.settings.endpoint,
            "deprovision",
            self.settings.timeout * 3,
            self.deprovision_inner(tenant),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_backquoted_with_inner_backquotes_doubled() {
        assert_eq!(quote_ident("3f8a-uid"), "`3f8a-uid`");
        assert_eq!(quote_ident("a`b"), "`a``b`");
    }

    #[test]
    fn literals_escape_quotes_always_and_backslashes_unless_the_mode_says_not_to() {
        assert_eq!(quote_literal("abc", false), "'abc'");
        assert_eq!(quote_literal("it's", false), "'it''s'");
        assert_eq!(
            quote_literal("a\\'; drop user x; --", false),
            "'a\\\\''; drop user x; --'"
        );
        assert_eq!(quote_literal("a\\b'c", true), "'a\\b''c'");
    }

    #[test]
    fn grant_patterns_escape_both_wildcards_and_the_escape_character() {
        assert_eq!(grant_pattern("3f8a-uid"), "3f8a-uid");
        assert_eq!(grant_pattern("default_my-cp"), "default\\_my-cp");
        assert_eq!(grant_pattern("a%b\\c"), "a\\%b\\\\c");
        assert_eq!(quote_ident(&grant_pattern("a_b")), "`a\\_b`");
    }

    #[test]
    fn mysql_takes_32_character_user_names_and_mariadb_80() {
        assert_eq!(max_user_len("8.0.36"), 32);
        assert_eq!(max_user_len("8.4.3-commercial"), 32);
        assert_eq!(max_user_len("10.11.6-MariaDB-0+deb12u1"), 80);
    }

    #[test]
    fn reserved_and_own_names_are_refused() {
        let driver = MySqlDriver::new(SqlSettings::new("127.0.0.1:3306", "admin", None)).unwrap();
        for (schema, user) in [
            ("mysql", "t"),
            ("SYS", "t"),
            ("tenantplane", "t"),
            ("tenantplane_freeze", "t"),
            ("t", "root"),
            ("t", "mariadb.sys"),
            ("t", "admin"),
        ] {
            let tenant = TenantSpace::new(schema, user, crate::tests::owner()).unwrap();
            assert_eq!(
                driver.check_names(&tenant).unwrap_err().reason(),
                "TenantNameInvalid",
                "{schema}/{user}"
            );
        }
    }
}

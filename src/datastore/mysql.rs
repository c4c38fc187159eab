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
//! MySQL 8 limits user names to 32 characters; a UID has 36, which MariaDB (80) accepts.

use sqlx::{
    ConnectOptions, Connection, MySqlConnection,
    mysql::{MySqlConnectOptions, MySqlSslMode},
};

use super::{
    DatastoreError, Driver, DriverKind, SqlCredentials, SqlSettings, TenantCredentials, TenantSpace,
    refuse_reserved, split_host_port, sql, with_timeout,
};

const KIND: DriverKind = DriverKind::MySql;

/// The privileges a tenant gets on its database: what kine needs (the same list as Kamaji).
pub const TENANT_PRIVILEGES: &str = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX";

/// The MySQL/MariaDB driver.
#[derive(Debug)]
pub struct MySqlDriver {
    settings: SqlSettings,
    host: String,
    port: u16,
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

impl MySqlDriver {
    /// A driver for the server in `settings`.
    pub fn new(settings: SqlSettings) -> Result<Self, DatastoreError> {
        let (host, port) = split_host_port(KIND, &settings.endpoint)?;
        Ok(Self { settings, host, port })
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
        let databases = ["mysql", "information_schema", "performance_schema", "sys"];
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

    async fn no_backslash_escapes(&self, conn: &mut MySqlConnection) -> Result<bool, DatastoreError> {
        let mode: String = sqlx::query_scalar("select @@session.sql_mode")
            .fetch_one(conn)
            .await
            .map_err(|e| self.error("read the session's sql_mode", e, None))?;
        Ok(mode
            .split(',')
            .any(|m| m.eq_ignore_ascii_case("NO_BACKSLASH_ESCAPES")))
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
        let nbe = self.no_backslash_escapes(&mut conn).await?;
        let account = format!("{}@'%'", quote_literal(user, nbe));
        let literal = quote_literal(password.expose(), nbe);
        let database = quote_ident(schema);
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
                "set the tenant user's password",
                format!("alter user {account} identified by {literal}"),
                secret,
            ),
            (
                "grant the tenant user its database",
                format!("grant {TENANT_PRIVILEGES} on {database}.* to {account}"),
                None,
            ),
        ];
        for (operation, statement, secret) in statements {
            self.exec(&mut conn, operation, statement, secret).await?;
        }
        let _ = conn.close().await;
        Ok(TenantCredentials::Sql(SqlCredentials {
            user: user.to_string(),
            password,
            database: schema.to_string(),
            endpoint: self.settings.endpoint.clone(),
        }))
    }

    async fn deprovision_inner(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let mut conn = self.connect().await?;
        let nbe = self.no_backslash_escapes(&mut conn).await?;
        let account = format!("{}@'%'", quote_literal(tenant.user(), nbe));
        let statements = [
            ("drop the tenant user", format!("drop user if exists {account}")),
            (
                "drop the tenant database",
                format!("drop database if exists {}", quote_ident(tenant.schema())),
            ),
        ];
        for (operation, statement) in statements {
            self.exec(&mut conn, operation, statement, None).await?;
        }
        let _ = conn.close().await;
        Ok(())
    }
}

impl Driver for MySqlDriver {
    fn kind(&self) -> DriverKind {
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

    async fn deprovision(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
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
    fn reserved_and_own_names_are_refused() {
        let driver = MySqlDriver::new(SqlSettings::new("127.0.0.1:3306", "admin", None)).unwrap();
        for (schema, user) in [
            ("mysql", "t"),
            ("SYS", "t"),
            ("t", "root"),
            ("t", "mariadb.sys"),
            ("t", "admin"),
        ] {
            let tenant = TenantSpace::new(schema, user).unwrap();
            assert_eq!(
                driver.check_names(&tenant).unwrap_err().reason(),
                "TenantNameInvalid",
                "{schema}/{user}"
            );
        }
    }
}

//! PostgreSQL: each tenant gets a LOGIN role `<user>` with a password and a database `<schema>` that the
//! role owns (so kine can create its table in the `public` schema, which PostgreSQL 15+ gives to the
//! database owner). `CONNECT` and `TEMPORARY` are revoked from `PUBLIC` on the database, so other
//! tenants' roles cannot connect to it.
//!
//! Statements that take names or passwords cannot use bind parameters (`CREATE ROLE`, `CREATE DATABASE`,
//! ...), so names go through [`quote_ident`] and passwords through [`quote_literal`]; names are also
//! validated by [`TenantSpace`]. Statement logging is off on these connections, and server messages are
//! scrubbed of the password. The driver refuses to touch a database with the tenant's name that is owned
//! by anybody but the tenant's role or the DataStore's user ([`DatastoreError::ForeignObject`]).
//!
//! The DataStore's user must be a superuser, or have `CREATEDB` and `CREATEROLE`; in the latter case the
//! driver grants it membership in each tenant role, which `CREATE DATABASE ... OWNER`, `ALTER DATABASE
//! ... OWNER` and `DROP DATABASE` need.

use sqlx::{ConnectOptions, Connection, PgConnection, postgres::PgConnectOptions, postgres::PgSslMode};

use super::{
    DatastoreError, Driver, DriverKind, SqlCredentials, SqlSettings, TenantCredentials, TenantSpace,
    refuse_reserved, split_host_port, sql, with_timeout,
};

const KIND: DriverKind = DriverKind::PostgreSql;

/// The PostgreSQL driver.
#[derive(Debug)]
pub struct PostgresDriver {
    settings: SqlSettings,
    host: String,
    port: u16,
    admin_database: String,
}

/// Quotes an identifier: `"` around it, inner `"` doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal as PostgreSQL's `quote_literal` does: `'` doubled, and when there is a
/// backslash, the `E'...'` form with backslashes doubled (right whatever `standard_conforming_strings` is).
pub fn quote_literal(value: &str) -> String {
    let quoted = value.replace('\'', "''");
    if value.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

impl PostgresDriver {
    /// A driver for the server in `settings`; `postgres` is the maintenance database it connects to.
    pub fn new(settings: SqlSettings) -> Result<Self, DatastoreError> {
        let (host, port) = split_host_port(KIND, &settings.endpoint)?;
        Ok(Self {
            settings,
            host,
            port,
            admin_database: "postgres".into(),
        })
    }

    /// Connects to another maintenance database than `postgres`.
    pub fn with_admin_database(mut self, database: impl Into<String>) -> Self {
        self.admin_database = database.into();
        self
    }

    fn options(&self) -> PgConnectOptions {
        let mut options = PgConnectOptions::new_without_pgpass()
            .host(&self.host)
            .port(self.port)
            .username(&self.settings.username)
            .database(&self.admin_database)
            .application_name("tenantplane")
            .disable_statement_logging();
        if let Some(password) = &self.settings.password {
            options = options.password(password.expose());
        }
        match &self.settings.tls {
            Some(tls) => {
                options = options
                    .ssl_mode(PgSslMode::VerifyFull)
                    .ssl_root_cert_from_pem(tls.ca_cert_pem.as_bytes().to_vec());
                if let (Some(cert), Some(key)) = (&tls.client_cert_pem, &tls.client_key_pem) {
                    options = options
                        .ssl_client_cert_from_pem(cert.as_bytes())
                        .ssl_client_key_from_pem(key.expose().as_bytes());
                }
                options
            }
            None => options.ssl_mode(PgSslMode::Prefer),
        }
    }

    async fn connect(&self) -> Result<PgConnection, DatastoreError> {
        PgConnection::connect_with(&self.options())
            .await
            .map_err(|e| self.error("connect", e, None))
    }

    fn error(&self, operation: &'static str, error: sqlx::Error, secret: Option<&str>) -> DatastoreError {
        sql::error(KIND, &self.settings.endpoint, operation, error, secret)
    }

    async fn exec(
        &self,
        conn: &mut PgConnection,
        operation: &'static str,
        statement: String,
        secret: Option<&str>,
    ) -> Result<(), DatastoreError> {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| self.error(operation, e, secret))
    }

    fn check_names(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let databases = ["postgres", "template0", "template1", self.admin_database.as_str()];
        refuse_reserved("schema", tenant.schema(), &databases, &[])?;
        let users = [
            "postgres",
            "public",
            "none",
            "current_user",
            "session_user",
            "current_role",
        ];
        refuse_reserved("user", tenant.user(), &users, &["pg_"])?;
        if tenant.user() == self.settings.username {
            return Err(DatastoreError::InvalidName {
                field: "user",
                value: tenant.user().to_string(),
                reason: "it is the DataStore's own user".into(),
            });
        }
        Ok(())
    }

    /// The owner of database `schema`, if it exists.
    async fn database_owner(
        &self,
        conn: &mut PgConnection,
        schema: &str,
    ) -> Result<Option<String>, DatastoreError> {
        sqlx::query_scalar("select pg_get_userbyid(datdba)::text from pg_database where datname = $1")
            .bind(schema)
            .fetch_optional(conn)
            .await
            .map_err(|e| self.error("look up the tenant database", e, None))
    }

    async fn refuse_foreign_owner(
        &self,
        conn: &mut PgConnection,
        tenant: &TenantSpace,
        owner: &str,
    ) -> Result<(), DatastoreError> {
        let me: String = sqlx::query_scalar("select current_user::text")
            .fetch_one(conn)
            .await
            .map_err(|e| self.error("read the current user", e, None))?;
        if owner != tenant.user() && owner != me {
            return Err(DatastoreError::ForeignObject {
                driver: KIND,
                endpoint: self.settings.endpoint.clone(),
                message: format!(
                    "database {:?} is owned by role {owner:?}, not by the tenant's role {:?}",
                    tenant.schema(),
                    tenant.user()
                ),
            });
        }
        Ok(())
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

        let owner = self.database_owner(&mut conn, schema).await?;
        if let Some(owner) = &owner {
            self.refuse_foreign_owner(&mut conn, tenant, owner).await?;
        }

        let role_exists: bool =
            sqlx::query_scalar("select exists (select 1 from pg_roles where rolname = $1)")
                .bind(user)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.error("look up the tenant role", e, None))?;
        let literal = quote_literal(password.expose());
        let alter = format!("alter role {} with login password {literal}", quote_ident(user));
        if role_exists {
            self.exec(&mut conn, "set the tenant role's password", alter, secret)
                .await?;
        } else {
            let create = format!("create role {} login password {literal}", quote_ident(user));
            match self
                .exec(&mut conn, "create the tenant role", create, secret)
                .await
            {
                Ok(()) => {}
                // Created concurrently: set the password instead.
                Err(DatastoreError::Backend { message, .. }) if message.contains("already exists") => {
                    self.exec(&mut conn, "set the tenant role's password", alter, secret)
                        .await?;
                }
                Err(e) => return Err(e),
            }
        }

        let superuser: bool =
            sqlx::query_scalar("select rolsuper from pg_roles where rolname = current_user")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.error("read the DataStore user's attributes", e, None))?;
        if !superuser {
            let grant = format!("grant {} to current_user", quote_ident(user));
            self.exec(&mut conn, "join the tenant role", grant, None).await?;
        }

        let database = quote_ident(schema);
        if owner.is_none() {
            let create = format!("create database {database} owner {}", quote_ident(user));
            match self
                .exec(&mut conn, "create the tenant database", create, None)
                .await
            {
                Ok(()) => {}
                Err(DatastoreError::Backend { message, .. }) if message.contains("already exists") => {}
                Err(e) => return Err(e),
            }
        }
        let statements = [
            (
                "make the tenant role own its database",
                format!("alter database {database} owner to {}", quote_ident(user)),
            ),
            (
                "revoke PUBLIC's access to the tenant database",
                format!("revoke all on database {database} from public"),
            ),
        ];
        for (operation, statement) in statements {
            self.exec(&mut conn, operation, statement, None).await?;
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
        let (schema, user) = (tenant.schema(), tenant.user());
        let mut conn = self.connect().await?;
        if let Some(owner) = self.database_owner(&mut conn, schema).await? {
            self.refuse_foreign_owner(&mut conn, tenant, &owner).await?;
            let drop = format!("drop database if exists {} with (force)", quote_ident(schema));
            self.exec(&mut conn, "drop the tenant database", drop, None)
                .await?;
        }
        let drop = format!("drop role if exists {}", quote_ident(user));
        self.exec(&mut conn, "drop the tenant role", drop, None).await?;
        let _ = conn.close().await;
        Ok(())
    }
}

impl Driver for PostgresDriver {
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
    fn identifiers_are_double_quoted_with_inner_quotes_doubled() {
        assert_eq!(quote_ident("3f8a-uid"), "\"3f8a-uid\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(
            quote_ident("x\"; drop database y; --"),
            "\"x\"\"; drop database y; --\""
        );
    }

    #[test]
    fn literals_double_quotes_and_use_the_escape_form_for_backslashes() {
        assert_eq!(quote_literal("abc"), "'abc'");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b'c"), "E'a\\\\b''c'");
    }

    #[test]
    fn reserved_and_own_names_are_refused() {
        let driver = PostgresDriver::new(SqlSettings::new("127.0.0.1:5432", "admin", None)).unwrap();
        for (schema, user) in [
            ("postgres", "t"),
            ("template1", "t"),
            ("t", "pg_monitor"),
            ("t", "admin"),
        ] {
            let tenant = TenantSpace::new(schema, user).unwrap();
            assert_eq!(
                driver.check_names(&tenant).unwrap_err().reason(),
                "TenantNameInvalid",
                "{schema}/{user}"
            );
        }
        driver
            .check_names(&TenantSpace::from_uid("3f8a1c2e-5b7d").unwrap())
            .unwrap();
    }
}

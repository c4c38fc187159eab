//! PostgreSQL: each tenant gets a LOGIN role `<user>` with a password and a database `<schema>` that the
//! role owns (so kine can create its table in the `public` schema, which PostgreSQL 15+ gives to the
//! database owner). `CONNECT` and `TEMPORARY` are revoked from `PUBLIC` on the database, so other
//! tenants' roles cannot connect to it.
//!
//! Statements that take names or passwords cannot use bind parameters (`CREATE ROLE`, `CREATE DATABASE`,
//! ...), so names go through [`quote_ident`] and passwords through [`quote_literal`]; names are also
//! validated by [`TenantSpace`]. Statement logging is off on these connections, and server messages are
//! scrubbed of the password.
//!
//! Ownership markers are `COMMENT ON ROLE` and `COMMENT ON DATABASE` ([`super::Owner::marker`]). A role
//! is created together with its comment in one transaction; a database (which cannot be created inside
//! a transaction) gets its comment right after creation, and an unmarked database owned by a role marked
//! with the caller's UID is the caller's (only this driver makes tenant roles own databases). Any other
//! existing role or database is never adopted, altered or dropped.
//!
//! The DataStore's user must be a superuser, or have `CREATEDB` and `CREATEROLE`; in the latter case the
//! driver grants it membership in each tenant role, which `CREATE DATABASE ... OWNER`, `ALTER DATABASE
//! ... OWNER` and `DROP DATABASE` need.

use sqlx::{ConnectOptions, Connection, PgConnection, postgres::PgConnectOptions, postgres::PgSslMode};

use super::{
    Claim, DatastoreError, Deprovisioned, Driver, SqlCredentials, SqlSettings, TenantCredentials,
    TenantSpace, refuse_reserved, split_host_port, sql, with_timeout,
};
use crate::k8s::crd;

const KIND: crd::Driver = crd::Driver::PostgreSQL;

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

    /// An admin connection to `database` (a tenant's) instead of the maintenance database.
    pub(crate) async fn connect_to(&self, database: &str) -> Result<PgConnection, DatastoreError> {
        PgConnection::connect_with(&self.options().database(database))
            .await
            .map_err(|e| self.error("connect to the tenant database", e, None))
    }

    /// The admin settings this driver was built from.
    pub fn settings(&self) -> &SqlSettings {
        &self.settings
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

    /// The comment (ownership marker) of role `user`; `None` when the role does not exist.
    async fn role_marker(
        &self,
        conn: &mut PgConnection,
        user: &str,
    ) -> Result<Option<Option<String>>, DatastoreError> {
        sqlx::query_scalar("select shobj_description(oid, 'pg_authid') from pg_roles where rolname = $1")
            .bind(user)
            .fetch_optional(conn)
            .await
            .map_err(|e| self.error("look up the tenant role", e, None))
    }

    /// The comment (ownership marker) and owner of database `schema`; `None` when it does not exist.
    async fn database_marker(
        &self,
        conn: &mut PgConnection,
        schema: &str,
    ) -> Result<Option<(Option<String>, String)>, DatastoreError> {
        sqlx::query_as(
            "select shobj_description(oid, 'pg_database'), pg_get_userbyid(datdba)::text \
             from pg_database where datname = $1",
        )
        .bind(schema)
        .fetch_optional(conn)
        .await
        .map_err(|e| self.error("look up the tenant database", e, None))
    }

    fn refused(&self, field: &'static str, name: &str, claim: Claim) -> Result<(), DatastoreError> {
        let kind = if field == "user" { "role" } else { "database" };
        claim.accept(KIND, &self.settings.endpoint, (field, kind), name)
    }

    /// Whether the tenant already holds its role from before ownership markers: the password it kept
    /// (from its own Secret) logs in to its database. A refusal is `false`; a transient error is one.
    async fn possessed(&self, tenant: &TenantSpace) -> Result<bool, DatastoreError> {
        let Some(password) = tenant.password() else {
            return Ok(false);
        };
        // The tenant's own login: TLS (if any) without the DataStore's client certificate.
        let options = PgConnectOptions::new_without_pgpass()
            .host(&self.host)
            .port(self.port)
            .username(tenant.user())
            .password(password.expose())
            .database(tenant.schema())
            .application_name("tenantplane")
            .disable_statement_logging();
        let options = match &self.settings.tls {
            Some(tls) => options
                .ssl_mode(PgSslMode::VerifyFull)
                .ssl_root_cert_from_pem(tls.ca_cert_pem.as_bytes().to_vec()),
            None => options.ssl_mode(PgSslMode::Prefer),
        };
        match PgConnection::connect_with(&options).await {
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

    /// How the existing database stands towards the tenant: its marker, else (unmarked) ours when the
    /// tenant's role, already checked to be ours, owns it.
    fn database_claim(tenant: &TenantSpace, marker: Option<&str>, owner: &str) -> Claim {
        match tenant.owner().judge(marker) {
            Claim::Unmarked if owner == tenant.user() => Claim::Ours,
            claim => claim,
        }
    }

    /// Creates the tenant role with its password and ownership comment in one transaction, or sets the
    /// password of the role when it is already the tenant's.
    async fn ensure_role(
        &self,
        conn: &mut PgConnection,
        tenant: &TenantSpace,
        literal: &str,
        secret: Option<&str>,
    ) -> Result<(), DatastoreError> {
        let user = quote_ident(tenant.user());
        let alter = format!("alter role {user} with login password {literal}");
        if let Some(marker) = self.role_marker(conn, tenant.user()).await? {
            let claim = tenant.owner().judge(marker.as_deref());
            if claim == Claim::Unmarked && self.possessed(tenant).await? {
                let comment = format!(
                    "comment on role {user} is {}",
                    quote_literal(&tenant.owner().marker())
                );
                self.exec(conn, "mark the tenant role", comment, None).await?;
            } else {
                self.refused("user", tenant.user(), claim)?;
            }
            return self
                .exec(conn, "set the tenant role's password", alter, secret)
                .await;
        }
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| self.error("begin a transaction", e, None))?;
        let create = format!("create role {user} login password {literal}");
        let comment = format!(
            "comment on role {user} is {}",
            quote_literal(&tenant.owner().marker())
        );
        let created = async {
            self.exec(&mut tx, "create the tenant role", create, secret)
                .await?;
            self.exec(&mut tx, "mark the tenant role", comment, None).await
        }
        .await;
        match created {
            Ok(()) => tx
                .commit()
                .await
                .map_err(|e| self.error("commit the tenant role", e, None)),
            // Created concurrently: whoever did it marked it; judge that marker.
            Err(DatastoreError::Backend { message, .. }) if message.contains("already exists") => {
                drop(tx);
                let marker = self.role_marker(conn, tenant.user()).await?.flatten();
                self.refused("user", tenant.user(), tenant.owner().judge(marker.as_deref()))?;
                self.exec(conn, "set the tenant role's password", alter, secret)
                    .await
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the tenant database owned by the tenant role and marks it, or accepts it when it is
    /// already the tenant's.
    async fn ensure_database(
        &self,
        conn: &mut PgConnection,
        tenant: &TenantSpace,
    ) -> Result<(), DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let database = quote_ident(schema);
        match self.database_marker(conn, schema).await? {
            Some((marker, owner)) => self.refused(
                "schema",
                schema,
                Self::database_claim(tenant, marker.as_deref(), &owner),
            )?,
            None => {
                let create = format!("create database {database} owner {}", quote_ident(user));
                match self.exec(conn, "create the tenant database", create, None).await {
                    Ok(()) => {}
                    Err(DatastoreError::Backend { message, .. }) if message.contains("already exists") => {
                        let (marker, owner) = self
                            .database_marker(conn, schema)
                            .await?
                            .unwrap_or((None, String::new()));
                        self.refused(
                            "schema",
                            schema,
                            Self::database_claim(tenant, marker.as_deref(), &owner),
                        )?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let statements = [
            (
                "mark the tenant database",
                format!(
                    "comment on database {database} is {}",
                    quote_literal(&tenant.owner().marker())
                ),
            ),
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
            self.exec(conn, operation, statement, None).await?;
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
        // Refuse a database that is not the tenant's before touching any role.
        if let Some((marker, owner)) = self.database_marker(&mut conn, schema).await?
            && owner != user
        {
            self.refused("schema", schema, tenant.owner().judge(marker.as_deref()))?;
        }
        let literal = quote_literal(password.expose());
        self.ensure_role(&mut conn, tenant, &literal, secret).await?;

        let superuser: bool =
            sqlx::query_scalar("select rolsuper from pg_roles where rolname = current_user")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.error("read the DataStore user's attributes", e, None))?;
        if !superuser {
            let grant = format!("grant {} to current_user", quote_ident(user));
            self.exec(&mut conn, "join the tenant role", grant, None).await?;
        }
        self.ensure_database(&mut conn, tenant).await?;
        let _ = conn.close().await;
        Ok(TenantCredentials::Sql(SqlCredentials {
            user: user.to_string(),
            password,
            database: schema.to_string(),
            endpoint: self.settings.endpoint.clone(),
        }))
    }

    /// Takes the tenant role's privileges on the tables of its database, before the drop ends its
    /// sessions. kine answers a create whose insert failed as a success when it then reads the key and
    /// finds no row (`LogStructured.Create`), so a write that sleeps in a migration's freeze when its
    /// session is ended must find the reads failing too: privileges are checked at every statement.
    async fn revoke_table_privileges(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let mut conn = match self.connect_to(tenant.schema()).await {
            Ok(conn) => conn,
            // Gone meanwhile: nothing to drop either.
            Err(DatastoreError::InvalidConfig { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let role: bool = sqlx::query_scalar("select exists (select from pg_roles where rolname = $1)")
            .bind(tenant.user())
            .fetch_one(&mut conn)
            .await
            .map_err(|e| self.error("look up the tenant role", e, None))?;
        if role {
            let revoke = format!(
                "revoke all on all tables in schema public from {}",
                quote_ident(tenant.user())
            );
            self.exec(&mut conn, "revoke the tenant's table privileges", revoke, None)
                .await?;
        }
        let _ = conn.close().await;
        Ok(())
    }

    /// Refuses `tenant` unless its role and its database exist and are its owner's.
    async fn check_owned_inner(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let mut conn = self.connect().await?;
        let role = self.role_marker(&mut conn, user).await?;
        let database = self.database_marker(&mut conn, schema).await?;
        let _ = conn.close().await;
        let endpoint = &self.settings.endpoint;
        let marker = role.ok_or_else(|| crate::missing(KIND, endpoint, "role", user))?;
        self.refused("user", user, tenant.owner().judge(marker.as_deref()))?;
        let (marker, owner) = database.ok_or_else(|| crate::missing(KIND, endpoint, "database", schema))?;
        self.refused(
            "schema",
            schema,
            Self::database_claim(tenant, marker.as_deref(), &owner),
        )
    }

    /// Drops the database and the role where they are the tenant's; reports what it left alone.
    async fn deprovision_inner(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let mut conn = self.connect().await?;
        let mut outcome = Deprovisioned::default();
        let role = self
            .role_marker(&mut conn, user)
            .await?
            .map(|marker| tenant.owner().judge(marker.as_deref()));
        if let Some((marker, owner)) = self.database_marker(&mut conn, schema).await? {
            // An unmarked database counts as the tenant's only while its role is the tenant's too.
            let claim = match role {
                Some(Claim::Ours) => Self::database_claim(tenant, marker.as_deref(), &owner),
                _ => tenant.owner().judge(marker.as_deref()),
            };
            if claim == Claim::Ours {
                self.revoke_table_privileges(tenant).await?;
                let drop = format!("drop database if exists {} with (force)", quote_ident(schema));
                self.exec(&mut conn, "drop the tenant database", drop, None)
                    .await?;
            } else {
                outcome.note("schema", schema, &claim);
            }
        }
        match &role {
            Some(Claim::Ours) => {
                let drop = format!("drop role if exists {}", quote_ident(user));
                self.exec(&mut conn, "drop the tenant role", drop, None).await?;
            }
            Some(other) => outcome.note("user", user, other),
            None => {}
        }
        let _ = conn.close().await;
        Ok(outcome)
    }
}

impl Driver for PostgresDriver {
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

    /// The cluster's system identifier (`pg_control_system()`), unique per `initdb`.
    async fn server_identity(&self) -> Result<String, DatastoreError> {
        with_timeout(
            KIND,
            &self.settings.endpoint,
            "read the system identifier",
            self.settings.timeout,
            async {
                let mut conn = self.connect().await?;
                let id: String =
                    sqlx::query_scalar("select system_identifier::text from pg_control_system()")
                        .fetch_one(&mut conn)
                        .await
                        .map_err(|e| self.error("read the system identifier", e, None))?;
                let _ = conn.close().await;
                Ok(format!("PostgreSQL system {id}"))
            },
        )
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
            let tenant = TenantSpace::new(schema, user, crate::tests::owner()).unwrap();
            assert_eq!(
                driver.check_names(&tenant).unwrap_err().reason(),
                "TenantNameInvalid",
                "{schema}/{user}"
            );
        }
        driver
            .check_names(&TenantSpace::from_owner(crate::tests::owner()).unwrap())
            .unwrap();
    }
}

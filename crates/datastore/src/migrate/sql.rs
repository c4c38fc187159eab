//! kine on PostgreSQL → PostgreSQL and MySQL/MariaDB → MySQL/MariaDB: [`KineMover`] copies the
//! tenant's `kine` table row for row, **keeping every row's id**.
//!
//! **Why revisions survive.** kine keeps one table, `kine`; a row's `id` (auto-increment) is the
//! revision kube-apiserver sees (`resourceVersion` = `mod_revision`, `create_revision`, the watch
//! position), `prev_revision` points at the key's previous row, `compact_rev_key` records kine's
//! compaction, and kine fills id gaps with `gap-<id>` rows when a transaction's id commits late. Every
//! tenant has a database of its own, so nothing else occupies the target's id space: the target gets
//! exactly the source's rows with the same ids, and its sequence (PostgreSQL) or `AUTO_INCREMENT`
//! (MySQL) is set above the highest copied id. kine on the target then answers every request exactly as
//! the source did, and every revision a client holds means the same object version there; new writes
//! get revisions above the source's last. There is no resourceVersion hazard and no re-list.
//!
//! **The schema** is created on the target with kine v0.17.5's own statements
//! (`pkg/drivers/pgsql`, `pkg/drivers/mysql`), so kine's `CREATE ... IF NOT EXISTS` find it. On
//! PostgreSQL the statements run as the tenant's role (`SET LOCAL ROLE`), so the tenant owns the table,
//! its sequence and indexes, as when kine creates them; MySQL has no table owners (the tenant's
//! database-level grant covers the table).
//!
//! **Copying** reads rows `id > cursor` up to the snapshot (the highest id at the first step) in pages of
//! at most [`PAGE_ROWS`] rows and [`PAGE_BYTES`] bytes of values, and writes the ids the target lacks in
//! multi-row inserts (PostgreSQL: `ON CONFLICT (id) DO NOTHING`). A page is re-done after a crash
//! between the write and the checkpoint: the ids already on the target are skipped. `INSERT IGNORE` is
//! not used on MySQL: it would also drop a row that collides on kine's unique `(name, prev_revision)`.
//! Such a collision means the target still holds a row that kine's compaction deleted on the source (a
//! key deleted, compacted and created again has `(name, 0)` twice in its history): the target's stale
//! row is deleted and the insert repeated.
//!
//! **Late ids.** An id is taken when kine's insert runs and becomes visible at its commit, so a reader
//! can see id `n + 1` before `n`. Catching up therefore compares the id sets of both sides in the
//! [`LATE_WINDOW`] ids below `applied_through` and copies what the target lacks, then copies the rows
//! above it. A later straggler cannot escape: [`Mover::finish_step`] runs after the freeze, which waits
//! until no write of the tenant is in flight, and compares the complete id sets.
//!
//! **Compaction on the source.** Rows kine deletes on the source may stay on the target while catching
//! up (they are never a key's latest state, and the target's kine compacts them itself later); finishing
//! deletes them so that the target holds exactly the source's rows, and copies `compact_rev_key`'s
//! `prev_revision` (the one row kine updates in place).
//!
//! **Freeze: writes wait, they are never refused.** kine v0.17.5's `LogStructured.Create` drops an
//! insert's error when the key then reads as absent: it answers the create as a success (at the current
//! revision; `pkg/logstructured/logstructured.go`, `Create`). A freeze that refuses writes (revoked
//! privileges, a read-only grant) therefore makes kine acknowledge creates it never stored. This freeze
//! makes the tenant's `INSERT`, `UPDATE`, `DELETE` (and `TRUNCATE` on PostgreSQL) on `kine` *wait* in a
//! trigger while a flag is set; kine sees a slow statement, never an error, and reads keep working. It
//! lives in the database only: no session of the mover holds it, so a controller killed mid-freeze
//! leaves the writes waiting, and a new mover freezes again (idempotent, with writers asleep),
//! finishes, verifies and thaws. The tenant cannot lift it: the flag is in objects it has no privilege
//! on, the trigger functions run as the DataStore's user, and dropping or disabling a trigger is DDL on
//! its table that kine never issues (PostgreSQL's `session_replication_role` needs a superuser; MySQL
//! grants the tenant no `TRIGGER` privilege).
//!
//! - PostgreSQL: in the tenant's database, schema `tenantplane_freeze` (the DataStore user's, no
//!   privilege for the tenant) holds a one-row flag and a `SECURITY DEFINER` plpgsql function with a
//!   fixed `search_path` that loops over `pg_sleep(0.05)` while the flag is set (each loop reads it
//!   with a new snapshot). Freezing sets the flag, then creates a statement-level `BEFORE` trigger on
//!   `kine` running it; statement-level `BEFORE` triggers fire before the rows are made, so a sleeper
//!   has not taken an id. The **barrier**: `CREATE TRIGGER` takes a lock that waits for every
//!   transaction holding a write lock on `kine` (under `lock_timeout`; a timeout is a transient error,
//!   and writes queued behind the lock meanwhile just wait), and every write after it runs the
//!   trigger, sees the flag and sleeps. A second freeze must not touch the trigger (sleepers hold
//!   their lock until they end, so DDL would wait forever): it sets the flag and waits until every
//!   session holding a write lock on `kine` sleeps in `pg_sleep` (kine never sleeps otherwise), which
//!   also covers a thaw interrupted between clearing the flag and dropping the trigger.
//! - MySQL/MariaDB: triggers are row-level, and a trigger's tables stay locked for its whole statement
//!   (prelocking): a sleeper reading a flag table, even MyISAM or Aria, would block the statement that
//!   clears the flag, and an InnoDB flag would be read in the statement's snapshot. So the flag is the
//!   *existence* of table `tenantplane_freeze.<tenant database>` (a database the driver reserves; the
//!   tenant has no privilege there), which `BEFORE INSERT/UPDATE/DELETE` row triggers (`DEFINER` the
//!   DataStore's user) look up in `information_schema.tables` before each `DO SLEEP(0.05)`: that takes
//!   no lock on the flag, so it can be dropped while writers sleep. `CREATE TRIGGER` needs an exclusive
//!   metadata lock, which sleepers hold shared, so the triggers are created first, while the flag is
//!   clear (missing ones only; while one waits, under `lock_wait_timeout`, for the statements already
//!   on `kine`, new ones wait behind it, reads included), then the flag. The **barrier** then waits (up
//!   to the DataStore's timeout) until every other session of the tenant (its user, or its database as
//!   the default: inside a trigger a session shows the definer as its user) sleeps in a trigger (`User
//!   sleep`) or is idle without an open InnoDB transaction, as `SHOW ENGINE INNODB STATUS` lists them
//!   (not `information_schema.innodb_trx`: InnoDB refills its cache only after 100 ms without a read,
//!   so while anyone reads it more often it lists transactions long ended and misses new ones). A write that
//!   passed the triggers before the flag is neither until it has committed or rolled back; one that
//!   sleeps after an earlier write of its transaction cannot commit while frozen.
//!
//! **Why no acknowledged write is lost.** When [`Mover::freeze`] returns, every write that did not
//! sleep has ended, and every other one sleeps and cannot commit, so [`Mover::finish_step`] reads the
//! source's final state. A sleeper ends in one of two ways. [`Mover::thaw`] (abort, or a failure
//! before the switch) clears the flag first, so sleepers go on and commit to the source, which still
//! serves, then removes the triggers and the flag objects. After the switch, the driver's
//! `deprovision` of the source ends the sleepers' sessions, so their statements roll back; but kine
//! then reads the key and, finding no row, would acknowledge the create. So reads are made to fail
//! first: PostgreSQL revokes the tenant's table privileges (checked at every statement) before
//! `DROP DATABASE ... WITH (FORCE)` terminates the sessions (new connections wait for the drop, then
//! find no database); MySQL drops the account first, starts `DROP DATABASE` (which waits for the
//! sleepers' metadata locks, and from then on new reads of `kine` wait behind it), and only then kills
//! the tenant's sessions, then drops the flag table. A write whose kine gave up first (its context
//! ended) is answered with that error, never a success. Ending a sleeper any other way while reads
//! work (a server restart, killing it by hand) makes kine acknowledge a create it did not store,
//! exactly as any failed insert does outside a migration.
//!
//! **Sealed while frozen.** A write can still fail while frozen for reasons of its own: a session
//! ended, a connection kine could not open (a server's `max_connections`, MySQL's per-user cap). kine
//! then reads the key, finds no row and acknowledges the create. Under load the end-to-end tests lost
//! creates this way, answered "stored" and never inserted on either server. So after the freeze the
//! controller [`Mover::seal`]s the source, and no failed write can be answered as a success:
//! - PostgreSQL: the tenant loses `select` on `kine` (checked at every statement). New inserts fail
//!   at once (they read the table), writes already asleep keep sleeping.
//! - MySQL/MariaDB: a database grant is checked when a session connects, so the tenant's grant is
//!   revoked (new sessions are refused), then its sessions are killed. Before the kills, the admin
//!   asks for `LOCK TABLES kine WRITE`, which (granted, or waiting for the sleepers) holds back every
//!   new statement on `kine`: a write failing on a killed session finds no session whose read could
//!   still complete.
//!
//! The old apiserver serves what its cache holds until the new one is ready. [`Mover::thaw`] gives
//! the grant back first.
//!
//! **Connections.** Each waiting write holds one of kine's connections. kine's pool is unlimited by
//! default, so a long freeze under writes opened connections until the server refused them ("too
//! many clients", "Too many connections"); an insert that fails to connect is a failed insert, and
//! kine acknowledged it when its follow-up read found the key absent. The controller therefore caps
//! kine's pool (`--datastore-max-open-connections`, `KINE_MAX_OPEN_CONNECTIONS` in the controller):
//! past the cap, writes wait for a connection inside kine instead of failing.
//!
//! Keep the freeze short all the same: every write of the tenant waits through it
//! (`benches/migrate_kine.rs`).

mod mysql;
mod postgres;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use sqlx::{MySqlConnection, PgConnection};

use super::{Checkpoint, Mover, Step, Verification};
use crate::{
    DatastoreError, SqlSettings, TenantSpace, k8s::crd, mysql::MySqlDriver, postgres::PostgresDriver,
    with_timeout,
};

/// Most rows read from the source in one page.
pub const PAGE_ROWS: i64 = 1000;

/// Most bytes of values and old values in one page (a single larger row still makes a page).
pub const PAGE_BYTES: i64 = 4 << 20;

/// Ids below `applied_through` whose presence on the target each catch-up step re-checks.
pub const LATE_WINDOW: i64 = 1000;

/// Most rows and bytes in one insert statement.
const INSERT_ROWS: usize = 250;
const INSERT_BYTES: usize = 2 << 20;

/// Ids compared per query when finishing.
const RECONCILE_IDS: i64 = 20_000;

/// Keys read per query when verifying.
const VERIFY_KEYS: i64 = 10_000;

/// How long one catch-up step copies before it reports the lag.
const CATCH_UP_BUDGET: Duration = Duration::from_secs(5);

/// kine's unique index whose collisions mean a row compacted on the source.
const PAIR_INDEX: &str = "kine_name_prev_revision_uindex";

/// One row of kine's table.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct KineRow {
    id: i64,
    name: Option<String>,
    created: Option<i32>,
    deleted: Option<i32>,
    create_revision: Option<i64>,
    prev_revision: Option<i64>,
    lease: Option<i32>,
    value: Option<Vec<u8>>,
    old_value: Option<Vec<u8>>,
}

impl KineRow {
    fn bytes(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len) + self.old_value.as_ref().map_or(0, Vec::len)
    }
}

/// A key's latest row up to a revision: its id, whether it is a deletion, and the SHA-256 of its value.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct Latest {
    name: String,
    id: i64,
    deleted: Option<i32>,
    hash: Option<String>,
}

/// One side of a kine migration: a SQL DataStore's admin settings and the tenant's space on it.
#[derive(Debug, Clone)]
pub struct KineSpace {
    /// The DataStore's admin connection settings.
    pub settings: SqlSettings,
    /// The tenant's database and user there (already provisioned).
    pub tenant: TenantSpace,
}

/// A driver that can reach one side.
#[derive(Debug)]
enum Server {
    Postgres(PostgresDriver),
    MySql(MySqlDriver),
}

#[derive(Debug)]
struct Side {
    server: Server,
    tenant: TenantSpace,
}

/// Moves a tenant's kine table between two PostgreSQL or two MySQL/MariaDB DataStores (module docs).
#[derive(Debug)]
pub struct KineMover {
    kind: crd::Driver,
    source: Side,
    target: Side,
}

enum Db {
    Pg(PgConnection),
    My(MySqlConnection),
}

/// An admin connection to one side's tenant database.
struct Conn {
    db: Db,
    kind: crd::Driver,
    endpoint: String,
}

/// Runs the backend function `$f` of the connection's driver and maps its error to `$op`.
macro_rules! dispatch {
    ($conn:expr, $op:expr, $f:ident($($arg:expr),*)) => {{
        let conn: &mut Conn = $conn;
        let result = match &mut conn.db {
            Db::Pg(c) => postgres::$f(c $(, $arg)*).await,
            Db::My(c) => mysql::$f(c $(, $arg)*).await,
        };
        result.map_err(|e| conn.error($op, e))
    }};
}

impl Conn {
    fn error(&self, operation: &'static str, error: sqlx::Error) -> DatastoreError {
        crate::sql::error(self.kind, &self.endpoint, operation, error, None)
    }

    async fn close(self) {
        use sqlx::Connection as _;
        let _ = match self.db {
            Db::Pg(c) => c.close().await,
            Db::My(c) => c.close().await,
        };
    }

    /// Creates kine's table and indexes as kine v0.17.5 does, owned by `user` (PostgreSQL).
    async fn ensure_schema(&mut self, user: &str) -> Result<(), DatastoreError> {
        dispatch!(self, "create the kine table", ensure_schema(user))
    }

    async fn max_id(&mut self) -> Result<i64, DatastoreError> {
        dispatch!(self, "read the highest kine id", max_id())
    }

    async fn count_after(&mut self, after: i64) -> Result<i64, DatastoreError> {
        dispatch!(self, "count the kine rows not yet copied", count_after(after))
    }

    async fn ids(&mut self, after: i64, upto: i64, limit: i64) -> Result<Vec<i64>, DatastoreError> {
        dispatch!(self, "read kine ids", ids(after, upto, limit))
    }

    /// The next page after `after`, up to `upto`: at most [`PAGE_ROWS`] rows and about [`PAGE_BYTES`].
    async fn page(&mut self, after: i64, upto: i64) -> Result<Vec<KineRow>, DatastoreError> {
        let sizes = dispatch!(self, "read kine row sizes", sizes(after, upto, PAGE_ROWS))?;
        let Some(end) = page_end(&sizes) else {
            return Ok(Vec::new());
        };
        dispatch!(self, "read kine rows", rows_between(after, end))
    }

    async fn rows_with_ids(&mut self, ids: &[i64]) -> Result<Vec<KineRow>, DatastoreError> {
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_ROWS) {
            rows.extend(dispatch!(self, "read kine rows", rows_with_ids(chunk))?);
        }
        Ok(rows)
    }

    async fn delete_ids(&mut self, ids: &[i64]) -> Result<(), DatastoreError> {
        for chunk in ids.chunks(INSERT_ROWS) {
            dispatch!(
                self,
                "delete kine rows compacted on the source",
                delete_ids(chunk)
            )?;
        }
        Ok(())
    }

    /// Inserts `rows` (none of whose ids the target has), replacing rows compacted on the source that
    /// collide on `(name, prev_revision)`.
    async fn insert(&mut self, rows: &[&KineRow]) -> Result<(), DatastoreError> {
        let first = match &mut self.db {
            Db::Pg(c) => postgres::insert(c, rows).await,
            Db::My(c) => mysql::insert(c, rows).await,
        };
        match first {
            Ok(()) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() && e.message().contains(PAIR_INDEX) => {
                dispatch!(
                    self,
                    "delete kine rows compacted on the source",
                    delete_pairs(rows)
                )?;
                dispatch!(self, "insert kine rows", insert(rows))
            }
            Err(e) => Err(self.error("insert kine rows", e)),
        }
    }

    /// Writes the rows whose ids the target lacks; returns how many it wrote.
    async fn write(&mut self, rows: &[KineRow]) -> Result<u64, DatastoreError> {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Ok(0);
        };
        let (low, high) = (first.id.min(last.id), first.id.max(last.id));
        let present: BTreeSet<i64> = self.ids(low - 1, high, i64::MAX).await?.into_iter().collect();
        let fresh: Vec<&KineRow> = rows.iter().filter(|r| !present.contains(&r.id)).collect();
        let mut start = 0;
        while start < fresh.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < fresh.len() && end - start < INSERT_ROWS && (end == start || bytes < INSERT_BYTES) {
                bytes += fresh[end].bytes();
                end += 1;
            }
            self.insert(&fresh[start..end]).await?;
            start = end;
        }
        Ok(fresh.len() as u64)
    }

    /// Makes the next id above `max` (never lowers it).
    async fn raise_next_id(&mut self, max: i64) -> Result<(), DatastoreError> {
        if max < 1 {
            return Ok(());
        }
        dispatch!(self, "set the next kine id", raise_next_id(max))
    }

    async fn compact_revs(&mut self) -> Result<Vec<(i64, Option<i64>)>, DatastoreError> {
        dispatch!(self, "read kine's compact revision", compact_revs())
    }

    async fn set_prev_revision(&mut self, id: i64, prev: Option<i64>) -> Result<(), DatastoreError> {
        dispatch!(self, "copy kine's compact revision", set_prev_revision(id, prev))
    }

    /// Every key's latest row with an id up to `upto`, by name.
    async fn latest(&mut self, upto: i64) -> Result<BTreeMap<String, Latest>, DatastoreError> {
        let mut all = BTreeMap::new();
        let mut after = String::new();
        loop {
            let page = dispatch!(
                self,
                "read the latest kine rows",
                latest(upto, &after, VERIFY_KEYS)
            )?;
            let full = page.len() as i64 >= VERIFY_KEYS;
            for row in page {
                after.clone_from(&row.name);
                all.insert(row.name.clone(), row);
            }
            if !full {
                return Ok(all);
            }
        }
    }
}

/// The last id of a page: rows in order until [`PAGE_BYTES`] would be exceeded, at least one.
fn page_end(sizes: &[(i64, i64)]) -> Option<i64> {
    let mut total = 0;
    let mut end = None;
    for &(id, size) in sizes {
        if end.is_some() && total + size > PAGE_BYTES {
            break;
        }
        total += size;
        end = Some(id);
    }
    end
}

/// The elements of `a` that are not in `b` (both sorted).
fn missing(a: &[i64], b: &[i64]) -> Vec<i64> {
    let b: BTreeSet<i64> = b.iter().copied().collect();
    a.iter().copied().filter(|id| !b.contains(id)).collect()
}

/// The copy cursor of a checkpoint: the last row id copied.
fn cursor(checkpoint: &Checkpoint, kind: crd::Driver) -> Result<i64, DatastoreError> {
    match &checkpoint.cursor {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| DatastoreError::InvalidConfig {
            driver: kind,
            message: format!("the checkpoint's cursor {text:?} is not a kine row id"),
        }),
    }
}

impl Side {
    fn new(kind: crd::Driver, space: KineSpace) -> Result<Self, DatastoreError> {
        let server = match kind {
            crd::Driver::PostgreSQL => Server::Postgres(PostgresDriver::new(space.settings)?),
            crd::Driver::MySQL => Server::MySql(MySqlDriver::new(space.settings)?),
            other => {
                return Err(DatastoreError::InvalidConfig {
                    driver: other,
                    message: "a kine SQL migration needs two PostgreSQL or two MySQL DataStores".into(),
                });
            }
        };
        Ok(Self {
            server,
            tenant: space.tenant,
        })
    }

    fn settings(&self) -> &SqlSettings {
        match &self.server {
            Server::Postgres(d) => d.settings(),
            Server::MySql(d) => d.settings(),
        }
    }

    async fn connect(&self) -> Result<Conn, DatastoreError> {
        let schema = self.tenant.schema();
        let (db, kind) = match &self.server {
            Server::Postgres(d) => (Db::Pg(d.connect_to(schema).await?), crd::Driver::PostgreSQL),
            Server::MySql(d) => (Db::My(d.connect_to(schema).await?), crd::Driver::MySQL),
        };
        Ok(Conn {
            db,
            kind,
            endpoint: self.settings().endpoint.clone(),
        })
    }

    /// Runs `future` within `factor` times this side's timeout.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        factor: u32,
        future: impl Future<Output = Result<T, DatastoreError>>,
    ) -> Result<T, DatastoreError> {
        let settings = self.settings();
        let kind = match self.server {
            Server::Postgres(_) => crd::Driver::PostgreSQL,
            Server::MySql(_) => crd::Driver::MySQL,
        };
        with_timeout(
            kind,
            &settings.endpoint,
            operation,
            settings.timeout * factor,
            future,
        )
        .await
    }

    /// Blocks the tenant's writes and waits until none that could still commit is in flight (module
    /// docs).
    async fn freeze(&self) -> Result<(), DatastoreError> {
        let mut conn = self.connect().await?;
        conn.ensure_schema(self.tenant.user()).await?;
        let wait = self.settings().timeout;
        let user = self.tenant.user();
        let done = match (&self.server, &mut conn.db) {
            (Server::Postgres(_), Db::Pg(c)) => postgres::freeze(c, wait).await,
            (Server::MySql(d), Db::My(c)) => {
                let nbe = d.no_backslash_escapes(c).await?;
                mysql::freeze(c, self.tenant.schema(), user, nbe, wait).await
            }
            _ => Ok(()),
        };
        let done = done.map_err(|e| conn.error("freeze the tenant's kine table", e));
        conn.close().await;
        done
    }

    /// Makes the tenant's reads fail while frozen (module docs).
    async fn seal(&self) -> Result<(), DatastoreError> {
        let mut conn = self.connect().await?;
        let (schema, user, wait) = (self.tenant.schema(), self.tenant.user(), self.settings().timeout);
        let done = match (&self.server, &mut conn.db) {
            (Server::Postgres(_), Db::Pg(c)) => postgres::seal(c, user).await,
            (Server::MySql(d), Db::My(c)) => {
                let nbe = d.no_backslash_escapes(c).await?;
                let mut locker = d.connect_to(schema).await?;
                let done = mysql::seal(c, &mut locker, schema, user, nbe, wait).await;
                let _ = sqlx::Connection::close(locker).await;
                done
            }
            _ => Ok(()),
        };
        let done = done.map_err(|e| conn.error("seal the tenant's kine table", e));
        conn.close().await;
        done
    }

    /// Lets the blocked writes go on and removes the freeze (module docs).
    async fn thaw(&self) -> Result<(), DatastoreError> {
        let mut conn = self.connect().await?;
        let wait = self.settings().timeout;
        let (schema, user) = (self.tenant.schema(), self.tenant.user());
        let done = match (&self.server, &mut conn.db) {
            (Server::Postgres(_), Db::Pg(c)) => postgres::thaw(c, wait, user).await,
            (Server::MySql(d), Db::My(c)) => {
                let nbe = d.no_backslash_escapes(c).await?;
                mysql::thaw(c, schema, user, nbe, wait).await
            }
            _ => Ok(()),
        };
        let done = done.map_err(|e| conn.error("thaw the tenant's kine table", e));
        conn.close().await;
        done
    }
}

impl KineMover {
    /// A mover between `source` and `target`, both of `driver` (`PostgreSQL` or `MySQL`).
    pub fn new(driver: crd::Driver, source: KineSpace, target: KineSpace) -> Result<Self, DatastoreError> {
        Ok(Self {
            kind: driver,
            source: Side::new(driver, source)?,
            target: Side::new(driver, target)?,
        })
    }

    async fn connect(&self) -> Result<(Conn, Conn), DatastoreError> {
        Ok((self.source.connect().await?, self.target.connect().await?))
    }

    async fn copy_inner(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        let (mut src, mut dst) = self.connect().await?;
        dst.ensure_schema(self.target.tenant.user()).await?;
        if checkpoint.snapshot_revision == 0 {
            checkpoint.snapshot_revision = src.max_id().await?;
        }
        let snapshot = checkpoint.snapshot_revision;
        let after = cursor(checkpoint, self.kind)?;
        if after < snapshot {
            let rows = src.page(after, snapshot).await?;
            if let Some(last) = rows.last().map(|r| r.id) {
                // The page's rows, written now or before a crash that lost the checkpoint.
                dst.write(&rows).await?;
                checkpoint.copied += rows.len() as u64;
                checkpoint.cursor = Some(last.to_string());
                if last < snapshot {
                    src.close().await;
                    dst.close().await;
                    return Ok(Step::More);
                }
            }
        }
        let copied = dst.max_id().await?;
        dst.raise_next_id(copied).await?;
        checkpoint.cursor = Some(snapshot.to_string());
        checkpoint.applied_through = checkpoint.applied_through.max(snapshot);
        src.close().await;
        dst.close().await;
        Ok(Step::Done)
    }

    async fn catch_up_inner(&self, checkpoint: &mut Checkpoint) -> Result<u64, DatastoreError> {
        let started = Instant::now();
        let (mut src, mut dst) = self.connect().await?;
        let mut applied = checkpoint.applied_through;
        if applied > 0 {
            let low = (applied - LATE_WINDOW).max(0);
            let late = missing(
                &src.ids(low, applied, i64::MAX).await?,
                &dst.ids(low, applied, i64::MAX).await?,
            );
            let rows = src.rows_with_ids(&late).await?;
            checkpoint.copied += dst.write(&rows).await?;
        }
        while started.elapsed() < CATCH_UP_BUDGET {
            let rows = src.page(applied, i64::MAX).await?;
            let Some(last) = rows.last().map(|r| r.id) else {
                break;
            };
            dst.write(&rows).await?;
            checkpoint.copied += rows.len() as u64;
            applied = last;
            checkpoint.applied_through = applied;
        }
        let lag = src.count_after(applied).await?;
        src.close().await;
        dst.close().await;
        Ok(lag.max(0) as u64)
    }

    /// Makes the target's ids up to the source's highest exactly the source's, then its sequence and
    /// compact revision.
    async fn finish_inner(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        let (mut src, mut dst) = self.connect().await?;
        dst.ensure_schema(self.target.tenant.user()).await?;
        let high = src.max_id().await?;
        let mut after = 0;
        while after < high {
            let source_ids = src.ids(after, high, RECONCILE_IDS).await?;
            let end = match source_ids.last() {
                Some(&last) if source_ids.len() as i64 >= RECONCILE_IDS => last,
                _ => high,
            };
            let target_ids = dst.ids(after, end, i64::MAX).await?;
            dst.delete_ids(&missing(&target_ids, &source_ids)).await?;
            for chunk in missing(&source_ids, &target_ids).chunks(PAGE_ROWS as usize) {
                let rows = src.rows_with_ids(chunk).await?;
                checkpoint.copied += dst.write(&rows).await?;
            }
            after = end;
        }
        for (id, prev) in src.compact_revs().await? {
            dst.set_prev_revision(id, prev).await?;
        }
        dst.raise_next_id(high).await?;
        checkpoint.applied_through = checkpoint.applied_through.max(high);
        src.close().await;
        dst.close().await;
        Ok(Step::Done)
    }

    async fn verify_inner(&self) -> Result<Verification, DatastoreError> {
        let (mut src, mut dst) = self.connect().await?;
        let high = src.max_id().await?;
        let (source, target) = (src.latest(high).await?, dst.latest(high).await?);
        let target_high = dst.ids(high - 1, high, 1).await?;
        let target_compacted = dst.compact_revs().await?;
        src.close().await;
        dst.close().await;
        let live = |map: &BTreeMap<String, Latest>| -> BTreeMap<String, (i64, Option<String>)> {
            map.values()
                .filter(|l| l.deleted == Some(0))
                .map(|l| (l.name.clone(), (l.id, l.hash.clone())))
                .collect()
        };
        let (source, target) = (live(&source), live(&target));
        let names: BTreeSet<&String> = source.keys().chain(target.keys()).collect();
        let mut verification = Verification {
            keys: names.len() as u64,
            ..Verification::default()
        };
        let mut differ = |what: String| {
            verification.mismatch_count += 1;
            if verification.mismatches.len() < 10 {
                verification.mismatches.push(what);
            }
        };
        if high > 0 && target_high != [high] {
            differ(format!("(revision {high}: missing on the target)"));
        }
        if let Some(compacted) = target_compacted.iter().filter_map(|(_, p)| *p).max()
            && compacted > high
        {
            differ(format!(
                "(the target compacted past revision {high}, to {compacted})"
            ));
        }
        for name in names {
            if source.get(name) != target.get(name) {
                differ(name.clone());
            }
        }
        Ok(verification)
    }
}

impl Mover for KineMover {
    async fn copy_step(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        let mut next = checkpoint.clone();
        let step = self
            .source
            .bounded("copy kine rows", 6, self.copy_inner(&mut next))
            .await?;
        *checkpoint = next;
        Ok(step)
    }

    async fn catch_up_step(&self, checkpoint: &mut Checkpoint) -> Result<u64, DatastoreError> {
        let mut next = checkpoint.clone();
        let lag = self
            .source
            .bounded("catch up kine rows", 6, self.catch_up_inner(&mut next))
            .await?;
        *checkpoint = next;
        Ok(lag)
    }

    async fn freeze(&self) -> Result<(), DatastoreError> {
        self.source
            .bounded("freeze the source", 3, self.source.freeze())
            .await
    }

    async fn seal(&self) -> Result<(), DatastoreError> {
        self.source
            .bounded("seal the source", 3, self.source.seal())
            .await
    }

    async fn thaw(&self) -> Result<(), DatastoreError> {
        self.source
            .bounded("thaw the source", 3, self.source.thaw())
            .await
    }

    async fn finish_step(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        let mut next = checkpoint.clone();
        let step = self
            .source
            .bounded("finish copying kine rows", 60, self.finish_inner(&mut next))
            .await?;
        *checkpoint = next;
        Ok(step)
    }

    async fn verify(&self) -> Result<Verification, DatastoreError> {
        self.source
            .bounded("verify the kine copy", 60, self.verify_inner())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_ends_before_the_byte_budget_but_holds_at_least_one_row() {
        assert_eq!(page_end(&[]), None);
        assert_eq!(page_end(&[(7, PAGE_BYTES * 2), (8, 1)]), Some(7));
        assert_eq!(page_end(&[(1, 10), (2, PAGE_BYTES - 10), (3, 1)]), Some(2));
        assert_eq!(page_end(&[(1, 10), (5, 20)]), Some(5));
    }

    #[test]
    fn missing_ids_are_those_only_on_the_first_side() {
        assert_eq!(missing(&[1, 2, 3, 5], &[2, 5, 9]), vec![1, 3]);
        assert_eq!(missing(&[], &[1]), Vec::<i64>::new());
    }

    #[test]
    fn only_sql_drivers_make_a_kine_mover_and_cursors_must_be_ids() {
        let space = KineSpace {
            settings: SqlSettings::new("127.0.0.1:5432", "admin", None),
            tenant: TenantSpace::from_owner(crate::tests::owner()).unwrap(),
        };
        let err = KineMover::new(crd::Driver::Etcd, space.clone(), space.clone()).unwrap_err();
        assert_eq!(err.reason(), "DataStoreInvalidConfig");
        assert!(KineMover::new(crd::Driver::MySQL, space.clone(), space).is_ok());
        let checkpoint = Checkpoint {
            cursor: Some("/registry/x".into()),
            ..Checkpoint::default()
        };
        assert_eq!(
            cursor(&checkpoint, crd::Driver::MySQL).unwrap_err().to_string(),
            "invalid MySQL datastore configuration: the checkpoint's cursor \"/registry/x\" is not a kine row id"
        );
    }
}

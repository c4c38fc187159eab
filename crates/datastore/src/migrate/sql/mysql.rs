//! The MySQL/MariaDB statements of the kine mover.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::{KineRow, Latest};
use crate::mysql::{
    FREEZE_DATABASE, NO_SUCH_THREAD, TENANT_PRIVILEGES, WAITING_FOR_TABLE, grant_pattern, quote_ident,
    quote_literal,
};

/// kine v0.17.5's schema (`pkg/drivers/mysql/mysql.go`), statement for statement.
pub(super) const SCHEMA: [&str; 6] = [
    "CREATE TABLE IF NOT EXISTS kine
			(
				id BIGINT UNSIGNED AUTO_INCREMENT,
				name VARCHAR(630) CHARACTER SET ascii,
				created INTEGER,
				deleted INTEGER,
				create_revision BIGINT UNSIGNED,
				prev_revision BIGINT UNSIGNED,
				lease INTEGER,
				value MEDIUMBLOB,
				old_value MEDIUMBLOB,
				PRIMARY KEY (id)
			);",
    "CREATE INDEX kine_name_index ON kine (name)",
    "CREATE INDEX kine_name_id_index ON kine (name,id)",
    "CREATE INDEX kine_id_deleted_index ON kine (id,deleted)",
    "CREATE INDEX kine_prev_revision_index ON kine (prev_revision)",
    "CREATE UNIQUE INDEX kine_name_prev_revision_uindex ON kine (name, prev_revision)",
];

/// ER_DUP_KEYNAME: kine ignores it when it creates an index that exists.
const DUP_KEYNAME: u16 = 1061;

const COLUMNS: &str = "cast(id as signed) as id, name, created, deleted, \
    cast(create_revision as signed) as create_revision, cast(prev_revision as signed) as prev_revision, \
    lease, value, old_value";

const INSERT_COLUMNS: &str =
    "id, name, created, deleted, create_revision, prev_revision, lease, value, old_value";

async fn exec(conn: &mut MySqlConnection, statement: String) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(conn)
        .await
        .map(|_| ())
}

fn is_error(error: &sqlx::Error, number: u16) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == number)
}

async fn table_exists(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let count: i64 = sqlx::query_scalar(
        "select count(*) from information_schema.tables where table_schema = database() and table_name = 'kine'",
    )
    .fetch_one(conn)
    .await?;
    Ok(count > 0)
}

/// Runs kine's schema when the table is missing, as kine's `setup` does (an existing index is fine).
pub(super) async fn ensure_schema(conn: &mut MySqlConnection, _user: &str) -> Result<(), sqlx::Error> {
    if table_exists(conn).await? {
        return Ok(());
    }
    for statement in SCHEMA {
        match exec(conn, statement.to_string()).await {
            Err(e) if !is_error(&e, DUP_KEYNAME) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

pub(super) async fn max_id(conn: &mut MySqlConnection) -> Result<i64, sqlx::Error> {
    if !table_exists(conn).await? {
        return Ok(0);
    }
    sqlx::query_scalar("select cast(coalesce(max(id), 0) as signed) from kine")
        .fetch_one(conn)
        .await
}

pub(super) async fn count_after(conn: &mut MySqlConnection, after: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from kine where id > ?")
        .bind(after)
        .fetch_one(conn)
        .await
}

pub(super) async fn ids(
    conn: &mut MySqlConnection,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("select cast(id as signed) from kine where id > ? and id <= ? order by id limit ?")
        .bind(after)
        .bind(upto)
        .bind(limit)
        .fetch_all(conn)
        .await
}

pub(super) async fn sizes(
    conn: &mut MySqlConnection,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "select cast(id as signed), cast(coalesce(length(value), 0) + coalesce(length(old_value), 0) as signed) \
         from kine where id > ? and id <= ? order by id limit ?",
    )
    .bind(after)
    .bind(upto)
    .bind(limit)
    .fetch_all(conn)
    .await
}

pub(super) async fn rows_between(
    conn: &mut MySqlConnection,
    after: i64,
    upto: i64,
) -> Result<Vec<KineRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {COLUMNS} from kine where id > ? and id <= ? order by id"
    )))
    .bind(after)
    .bind(upto)
    .fetch_all(conn)
    .await
}

/// `<prefix> (?, ?, ...)` over `ids`.
fn with_ids(prefix: String, ids: &[i64]) -> QueryBuilder<MySql> {
    let mut builder = QueryBuilder::<MySql>::new(prefix);
    builder.push(" (");
    let mut list = builder.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    builder.push(")");
    builder
}

pub(super) async fn rows_with_ids(
    conn: &mut MySqlConnection,
    ids: &[i64],
) -> Result<Vec<KineRow>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut builder = with_ids(format!("select {COLUMNS} from kine where id in"), ids);
    builder.push(" order by id");
    builder.build_query_as().fetch_all(conn).await
}

pub(super) async fn delete_ids(conn: &mut MySqlConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut builder = with_ids("delete from kine where id in".into(), ids);
    builder.build().execute(conn).await.map(|_| ())
}

/// Deletes the rows that share a `(name, prev_revision)` with one of `rows` under another id.
pub(super) async fn delete_pairs(conn: &mut MySqlConnection, rows: &[&KineRow]) -> Result<(), sqlx::Error> {
    for row in rows {
        sqlx::query("delete from kine where name = ? and prev_revision = ? and id <> ?")
            .bind(&row.name)
            .bind(row.prev_revision)
            .bind(row.id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// A plain insert: the caller skips the ids the target has, and a `(name, prev_revision)` collision
/// must fail (module docs of [`super`]).
pub(super) async fn insert(conn: &mut MySqlConnection, rows: &[&KineRow]) -> Result<(), sqlx::Error> {
    let mut builder = QueryBuilder::<MySql>::new(format!("insert into kine ({INSERT_COLUMNS}) "));
    builder.push_values(rows, |mut b, row| {
        b.push_bind(row.id)
            .push_bind(&row.name)
            .push_bind(row.created)
            .push_bind(row.deleted)
            .push_bind(row.create_revision)
            .push_bind(row.prev_revision)
            .push_bind(row.lease)
            .push_bind(&row.value)
            .push_bind(&row.old_value);
    });
    builder.build().execute(conn).await.map(|_| ())
}

/// Moves `AUTO_INCREMENT` above `max` (InnoDB never sets it below the highest id).
pub(super) async fn raise_next_id(conn: &mut MySqlConnection, max: i64) -> Result<(), sqlx::Error> {
    exec(conn, format!("alter table kine auto_increment = {}", max + 1)).await
}

pub(super) async fn compact_revs(conn: &mut MySqlConnection) -> Result<Vec<(i64, Option<i64>)>, sqlx::Error> {
    sqlx::query_as(
        "select cast(id as signed), cast(prev_revision as signed) from kine \
         where name = 'compact_rev_key' order by id",
    )
    .fetch_all(conn)
    .await
}

pub(super) async fn set_prev_revision(
    conn: &mut MySqlConnection,
    id: i64,
    prev: Option<i64>,
) -> Result<(), sqlx::Error> {
    sqlx::query("update kine set prev_revision = ? where id = ? and not (prev_revision <=> ?)")
        .bind(prev)
        .bind(id)
        .bind(prev)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Up to `limit` keys after `after` (byte order: `ascii_bin`, as kine's `ascii_general_ci` folds case)
/// with their latest row up to `upto`.
pub(super) async fn latest(
    conn: &mut MySqlConnection,
    upto: i64,
    after: &str,
    limit: i64,
) -> Result<Vec<Latest>, sqlx::Error> {
    sqlx::query_as(
        "select k.name, cast(k.id as signed) as id, k.deleted, sha2(k.value, 256) as hash from kine k \
         join (select max(id) as id from kine where name collate ascii_bin > ? and id <= ? \
         group by name collate ascii_bin order by name collate ascii_bin limit ?) m on k.id = m.id \
         order by k.name collate ascii_bin",
    )
    .bind(after)
    .bind(upto)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The freeze's triggers on `kine`: name and event.
const TRIGGERS: [(&str, &str); 3] = [
    ("tenantplane_freeze_insert", "insert"),
    ("tenantplane_freeze_update", "update"),
    ("tenantplane_freeze_delete", "delete"),
];

/// `information_schema.processlist.state` of a session in `SLEEP()` (sleeping in a freeze trigger).
const SLEEPING: &str = "User sleep";

/// The flag of `schema`'s freeze: a table named as the tenant's database in [`FREEZE_DATABASE`].
fn flag(schema: &str) -> String {
    format!("{}.{}", quote_ident(FREEZE_DATABASE), quote_ident(schema))
}

/// A `BEFORE <event>` row trigger on the tenant's `kine` that sleeps while the flag table exists. It
/// reads `information_schema` (never a table: a trigger's tables stay locked for the whole statement,
/// so the flag could not be dropped while a writer sleeps), as the DataStore's user (`DEFINER`).
fn trigger(schema: &str, name: &str, event: &str, nbe: bool) -> String {
    let (db, table) = (quote_ident(schema), quote_literal(schema, nbe));
    format!(
        "create definer = current_user trigger {db}.{name} before {event} on {db}.kine for each row \
         while exists (select 1 from information_schema.tables where table_schema = '{FREEZE_DATABASE}' \
         and table_name = {table} and binary table_name = binary {table}) do do sleep(0.05); end while",
        name = quote_ident(name),
    )
}

async fn triggers(conn: &mut MySqlConnection, schema: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select cast(trigger_name as char character set utf8mb4) from information_schema.triggers \
         where trigger_schema = ? and event_object_table = 'kine'",
    )
    .bind(schema)
    .fetch_all(conn)
    .await
}

async fn set_lock_wait(conn: &mut MySqlConnection, wait: Duration) -> Result<(), sqlx::Error> {
    exec(
        conn,
        format!("set session lock_wait_timeout = {}", wait.as_secs().max(1)),
    )
    .await
}

/// Blocks the tenant's writes on `kine` (module docs of [`super`]): creates the missing triggers while
/// the flag is clear (their exclusive lock waits for statements on `kine`, sleepers never end), sets
/// the flag, and waits until no write of the tenant that passed the triggers is in flight.
pub(super) async fn freeze(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
    nbe: bool,
    wait: Duration,
) -> Result<(), sqlx::Error> {
    let present = triggers(conn, schema).await?;
    set_lock_wait(conn, wait).await?;
    for (name, event) in TRIGGERS {
        if !present.iter().any(|p| p == name) {
            exec(conn, trigger(schema, name, event, nbe)).await?;
        }
    }
    exec(
        conn,
        format!("create database if not exists {}", quote_ident(FREEZE_DATABASE)),
    )
    .await?;
    exec(
        conn,
        format!(
            "create table if not exists {} (frozen_at timestamp not null default current_timestamp)",
            flag(schema)
        ),
    )
    .await?;
    wait_for_sleepers(conn, schema, user, wait).await
}

/// Waits until every other session of the tenant (its user, or its database as the default: a
/// session in a trigger shows the trigger's definer as its user) sleeps in the freeze, or is idle
/// without an open InnoDB transaction ([`open_transactions`]). A write that passed the triggers before
/// the flag is neither until it has committed or rolled back.
async fn wait_for_sleepers(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
    wait: Duration,
) -> Result<(), sqlx::Error> {
    let deadline = Instant::now() + wait;
    loop {
        let sessions = tenant_sessions(conn, schema, user).await?;
        let trxs = open_transactions(conn).await?;
        let writing: Vec<&Session> = sessions.iter().filter(|s| s.writing(trxs.as_ref())).collect();
        if writing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let seen: Vec<String> = writing.iter().map(|s| s.describe(trxs.as_ref())).collect();
            return Err(sqlx::Error::Protocol(format!(
                "{} sessions of the tenant were still writing after {}s: {}",
                writing.len(),
                wait.as_secs(),
                seen.join("; ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A session of the tenant in `information_schema.processlist`.
#[derive(sqlx::FromRow)]
struct Session {
    id: i64,
    command: Option<String>,
    state: Option<String>,
    /// The start of its statement (kine's SQL: placeholders first, no values in this much).
    info: Option<String>,
}

/// How much of a session's statement an error shows.
const INFO_CHARS: i64 = 80;

/// The open InnoDB transactions by session id, each with its state (`ACTIVE 2 sec`, `LOCK WAIT`...).
type Transactions = BTreeMap<i64, String>;

impl Session {
    /// Neither asleep in the freeze nor idle without an open transaction (`trxs`: `None` when unknown).
    fn writing(&self, trxs: Option<&Transactions>) -> bool {
        let sleeping = self.state.as_deref() == Some(SLEEPING);
        let idle =
            self.command.as_deref() == Some("Sleep") && trxs.is_some_and(|t| !t.contains_key(&self.id));
        !sleeping && !idle
    }

    /// Its id, command, state, statement and transaction, for an error.
    fn describe(&self, trxs: Option<&Transactions>) -> String {
        let trx = match trxs.map(|t| t.get(&self.id)) {
            None => "transactions unknown (InnoDB's status was truncated)".to_string(),
            Some(None) => "no transaction".to_string(),
            Some(Some(state)) => format!("transaction {state}"),
        };
        let info = self.info.as_deref().unwrap_or_default().split_whitespace();
        format!(
            "session {} ({}, state {:?}, {trx}): {:?}",
            self.id,
            self.command.as_deref().unwrap_or("?"),
            self.state.as_deref().unwrap_or_default(),
            info.collect::<Vec<_>>().join(" "),
        )
    }
}

/// The tenant's sessions other than this one (its user, or its database as the default).
async fn tenant_sessions(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
) -> Result<Vec<Session>, sqlx::Error> {
    sqlx::query_as(
        "select cast(id as signed) as id, cast(command as char character set utf8mb4) as command, \
         cast(state as char character set utf8mb4) as state, \
         cast(left(info, ?) as char character set utf8mb4) as info from information_schema.processlist \
         where id <> connection_id() and (db = ? or user = ?)",
    )
    .bind(INFO_CHARS)
    .bind(schema)
    .bind(user)
    .fetch_all(conn)
    .await
}

/// The open InnoDB transactions, from `SHOW ENGINE INNODB STATUS`, which InnoDB writes when asked.
/// Not `information_schema.innodb_trx`: InnoDB refills its cache only after 100 ms without a read of
/// it, so while anyone reads it more often (this barrier, another tenant's, a monitor) it keeps listing
/// transactions that ended long ago and misses new ones. `None` when the status was truncated.
async fn open_transactions(conn: &mut MySqlConnection) -> Result<Option<Transactions>, sqlx::Error> {
    let row = sqlx::raw_sql("show engine innodb status").fetch_one(conn).await?;
    let status: Vec<u8> = sqlx::Row::try_get(&row, 2)?;
    Ok(active_transactions(&String::from_utf8_lossy(&status)))
}

/// InnoDB's status marks a transaction list it shortened with this.
const TRUNCATED: &str = "... truncated...";

/// The transactions of `status` (`SHOW ENGINE INNODB STATUS`) by session id, each with its state: the
/// rest of its `---TRANSACTION <id>, ` line, and its `LOCK WAIT ...` line when it waits for a lock.
/// `None` when InnoDB truncated the list.
fn active_transactions(status: &str) -> Option<Transactions> {
    if status.contains(TRUNCATED) {
        return None;
    }
    let mut found = Transactions::new();
    let mut current: Option<String> = None;
    for line in status.lines() {
        if line == "FILE I/O" {
            break;
        }
        if let Some(header) = line.strip_prefix("---TRANSACTION ") {
            let state = header.split_once(", ").map_or(header, |(_, state)| state);
            current = (!state.starts_with("not started")).then(|| state.to_string());
        } else if let (Some(state), true) = (current.as_mut(), line.starts_with("LOCK WAIT")) {
            *state = format!("{state}, {line}");
        } else if let Some(id) = thread_id(line)
            && let Some(state) = current.take()
        {
            found.insert(id, state);
        }
    }
    Some(found)
}

/// The session of a transaction's `MariaDB thread id <n>, ...` (`MySQL thread id` on MySQL) line.
fn thread_id(line: &str) -> Option<i64> {
    let rest = line
        .strip_prefix("MariaDB thread id ")
        .or_else(|| line.strip_prefix("MySQL thread id "))?;
    rest.split(',').next()?.trim().parse().ok()
}

/// The tenant's account, quoted: `'<user>'@'%'`.
fn account(user: &str, nbe: bool) -> String {
    format!("{}@'%'", quote_literal(user, nbe))
}

/// Whether `'<user>'@'%'` exists, and whether it holds a grant on `schema` (its pattern in `mysql.db`).
async fn account_and_grant(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
) -> Result<(bool, bool), sqlx::Error> {
    let (account, grant): (i64, i64) = sqlx::query_as(
        "select (select count(*) from mysql.user where User = ? and Host = '%'), \
         (select count(*) from mysql.db where User = ? and Host = '%' and Db = ?)",
    )
    .bind(user)
    .bind(user)
    .bind(grant_pattern(schema))
    .fetch_one(conn)
    .await?;
    Ok((account > 0, grant > 0))
}

/// After [`freeze`]: makes every read of the tenant fail, so that kine cannot answer a write that
/// failed while frozen as a success by reading its key as absent (`LogStructured.Create`). MySQL
/// checks a database grant when a session connects, so revoking it turns new sessions away but
/// reaches no open one; those are killed. Killing them one by one would leave a window: a write on a
/// killed session fails, and kine's read on one not yet killed finds its key absent. So `locker` first
/// asks for `LOCK TABLES kine WRITE`: granted or waiting (for the writers asleep in the freeze), it
/// holds every new statement on `kine` back, so no read completes until every session is gone.
pub(super) async fn seal(
    conn: &mut MySqlConnection,
    locker: &mut MySqlConnection,
    schema: &str,
    user: &str,
    nbe: bool,
    wait: Duration,
) -> Result<(), sqlx::Error> {
    if let (true, true) = account_and_grant(conn, schema, user).await? {
        let pattern = quote_ident(&grant_pattern(schema));
        let revoke = format!("revoke all privileges on {pattern}.* from {}", account(user, nbe));
        exec(conn, revoke).await?;
    }
    let deadline = Instant::now() + wait;
    let locker_id: i64 = sqlx::query_scalar("select cast(connection_id() as signed)")
        .fetch_one(&mut *locker)
        .await?;
    set_lock_wait(locker, wait).await?;
    {
        let lock = exec(locker, format!("lock tables {}.kine write", quote_ident(schema)));
        tokio::pin!(lock);
        let mut granted = false;
        while !granted && !waits_for_a_table(conn, locker_id).await? {
            if Instant::now() > deadline {
                return Err(sqlx::Error::Protocol(
                    "the seal's table lock was never asked for".into(),
                ));
            }
            tokio::select! {
                locked = &mut lock => { locked?; granted = true; }
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        let ending = end_sessions(conn, schema, user, locker_id, deadline);
        if granted {
            ending.await?;
        } else {
            tokio::try_join!(lock, ending)?;
        }
    }
    exec(locker, "unlock tables".into()).await
}

/// Whether session `id` waits for a table's metadata lock.
async fn waits_for_a_table(conn: &mut MySqlConnection, id: i64) -> Result<bool, sqlx::Error> {
    let state: Option<Option<String>> = sqlx::query_scalar(
        "select cast(state as char character set utf8mb4) from information_schema.processlist where id = ?",
    )
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(state.flatten().as_deref() == Some(WAITING_FOR_TABLE))
}

/// Kills the tenant's sessions (its user, or its database as the default) other than this one and
/// `locker`, until none of them is left.
async fn end_sessions(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
    locker: i64,
    deadline: Instant,
) -> Result<(), sqlx::Error> {
    loop {
        let sessions: Vec<i64> = sqlx::query_scalar(
            "select cast(id as signed) from information_schema.processlist \
             where id <> connection_id() and id <> ? and (db = ? or user = ?)",
        )
        .bind(locker)
        .bind(schema)
        .bind(user)
        .fetch_all(&mut *conn)
        .await?;
        if sessions.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(sqlx::Error::Protocol(format!(
                "{} sessions of the tenant were still open after the seal killed them",
                sessions.len()
            )));
        }
        for id in sessions {
            match exec(conn, format!("kill connection {id}")).await {
                Err(e) if !is_error(&e, NO_SUCH_THREAD) => return Err(e),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lifts the freeze: gives the tenant its grant back ([`seal`]), drops the flag (the sleepers go on),
/// then the triggers (their lock waits for the sleepers' statements to end).
pub(super) async fn thaw(
    conn: &mut MySqlConnection,
    schema: &str,
    user: &str,
    nbe: bool,
    wait: Duration,
) -> Result<(), sqlx::Error> {
    if let (true, false) = account_and_grant(conn, schema, user).await? {
        let pattern = quote_ident(&grant_pattern(schema));
        let grant = format!(
            "grant {TENANT_PRIVILEGES} on {pattern}.* to {}",
            account(user, nbe)
        );
        exec(conn, grant).await?;
    }
    let flagged: i64 = sqlx::query_scalar(
        "select count(*) from information_schema.tables where table_schema = ? and table_name = ?",
    )
    .bind(FREEZE_DATABASE)
    .bind(schema)
    .fetch_one(&mut *conn)
    .await?;
    if flagged > 0 {
        exec(conn, format!("drop table if exists {}", flag(schema))).await?;
    }
    let present = triggers(conn, schema).await?;
    set_lock_wait(conn, wait).await?;
    for (name, _) in TRIGGERS {
        if present.iter().any(|p| p == name) {
            exec(
                conn,
                format!(
                    "drop trigger if exists {}.{}",
                    quote_ident(schema),
                    quote_ident(name)
                ),
            )
            .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transaction section of MariaDB 10.11's `SHOW ENGINE INNODB STATUS`, with a session waiting
    /// for a lock, one asleep in a trigger, and what follows the section.
    const STATUS: &str = "------------
TRANSACTIONS
------------
Trx id counter 3660
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 3659, ACTIVE 3 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)
MariaDB thread id 812, OS thread handle 140381345044160, query id 14990 127.0.0.1 t_1 Updating
update kine set prev_revision = 1 where id = 2
------- TRX HAS BEEN WAITING 3 SEC FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 9 page no 3 n bits 72 index PRIMARY of table `t_1`.`kine` trx id 3659 lock_mode X
------------------
---TRANSACTION (0x7fad2c20cb80), ACTIVE 1 sec
0 lock struct(s), heap size 1128, 0 row lock(s)
MariaDB thread id 769, OS thread handle 140381345044161, query id 14722 127.0.0.1 root User sleep
do sleep(0.05)
---TRANSACTION 421, not started
MariaDB thread id 7, OS thread handle 140381345044162, query id 1 localhost root
--------
FILE I/O
--------
MariaDB thread id 1, OS thread handle 1
";

    #[test]
    fn the_open_transactions_are_read_from_innodb_status_by_session() {
        let found = active_transactions(STATUS).unwrap();
        assert_eq!(
            found,
            Transactions::from([
                (769, "ACTIVE 1 sec".to_string()),
                (
                    812,
                    "ACTIVE 3 sec starting index read, LOCK WAIT 2 lock struct(s), heap size 1128, \
                     1 row lock(s)"
                        .to_string()
                ),
            ])
        );
        assert_eq!(thread_id("MySQL thread id 44, OS thread handle 1"), Some(44));
        assert_eq!(thread_id("mysql tables in use 1, locked 1"), None);
    }

    #[test]
    fn a_truncated_innodb_status_tells_no_transactions() {
        let truncated = STATUS.replace("LIST OF TRANSACTIONS FOR EACH SESSION:\n", "... truncated...\n");
        assert_eq!(active_transactions(&truncated), None);
        assert_eq!(active_transactions(""), Some(Transactions::new()));
    }

    #[test]
    fn a_freeze_trigger_looks_up_its_own_flag_table_exactly_and_sleeps() {
        assert_eq!(
            trigger("t_1.a-b", "tenantplane_freeze_insert", "insert", false),
            "create definer = current_user trigger `t_1.a-b`.`tenantplane_freeze_insert` before insert \
             on `t_1.a-b`.kine for each row while exists (select 1 from information_schema.tables \
             where table_schema = 'tenantplane_freeze' and table_name = 't_1.a-b' \
             and binary table_name = binary 't_1.a-b') do do sleep(0.05); end while"
        );
        assert_eq!(flag("t_1"), "`tenantplane_freeze`.`t_1`");
    }
}

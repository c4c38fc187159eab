//! The PostgreSQL statements of the kine mover.

use std::time::{Duration, Instant};

use sqlx::{Connection as _, PgConnection, Postgres, QueryBuilder};

use super::{KineRow, Latest};
use crate::postgres::quote_ident;

/// kine v0.17.5's schema (`pkg/drivers/pgsql/pgsql.go`), statement for statement.
pub(super) const SCHEMA: [&str; 7] = [
    r#"CREATE TABLE IF NOT EXISTS kine
 			(
				id BIGSERIAL PRIMARY KEY,
				name text COLLATE "C",
				created INTEGER,
				deleted INTEGER,
				create_revision BIGINT,
				prev_revision BIGINT,
 				lease INTEGER,
 				value bytea,
 				old_value bytea
 			);"#,
    "CREATE INDEX IF NOT EXISTS kine_name_index ON kine (name)",
    "CREATE INDEX IF NOT EXISTS kine_name_id_index ON kine (name,id)",
    "CREATE INDEX IF NOT EXISTS kine_id_deleted_index ON kine (id,deleted)",
    "CREATE INDEX IF NOT EXISTS kine_prev_revision_index ON kine (prev_revision)",
    "CREATE UNIQUE INDEX IF NOT EXISTS kine_name_prev_revision_uindex ON kine (name, prev_revision)",
    "CREATE INDEX IF NOT EXISTS kine_list_query_index on kine(name, id DESC, deleted)",
];

const COLUMNS: &str = "id, name, created, deleted, create_revision, prev_revision, lease, value, old_value";

async fn exec(conn: &mut PgConnection, statement: String) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(statement))
        .execute(conn)
        .await
        .map(|_| ())
}

async fn table_exists(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select to_regclass('public.kine') is not null")
        .fetch_one(conn)
        .await
}

/// Runs kine's schema as the tenant's role, which then owns the table, its sequence and indexes.
pub(super) async fn ensure_schema(conn: &mut PgConnection, user: &str) -> Result<(), sqlx::Error> {
    if table_exists(conn).await? {
        return Ok(());
    }
    let mut tx = conn.begin().await?;
    exec(&mut tx, format!("set local role {}", quote_ident(user))).await?;
    for statement in SCHEMA {
        exec(&mut tx, statement.to_string()).await?;
    }
    tx.commit().await
}

pub(super) async fn max_id(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    if !table_exists(conn).await? {
        return Ok(0);
    }
    sqlx::query_scalar("select coalesce(max(id), 0)::int8 from kine")
        .fetch_one(conn)
        .await
}

pub(super) async fn count_after(conn: &mut PgConnection, after: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from kine where id > $1")
        .bind(after)
        .fetch_one(conn)
        .await
}

pub(super) async fn ids(
    conn: &mut PgConnection,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("select id from kine where id > $1 and id <= $2 order by id limit $3")
        .bind(after)
        .bind(upto)
        .bind(limit)
        .fetch_all(conn)
        .await
}

pub(super) async fn sizes(
    conn: &mut PgConnection,
    after: i64,
    upto: i64,
    limit: i64,
) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "select id, (coalesce(octet_length(value), 0) + coalesce(octet_length(old_value), 0))::int8 \
         from kine where id > $1 and id <= $2 order by id limit $3",
    )
    .bind(after)
    .bind(upto)
    .bind(limit)
    .fetch_all(conn)
    .await
}

pub(super) async fn rows_between(
    conn: &mut PgConnection,
    after: i64,
    upto: i64,
) -> Result<Vec<KineRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {COLUMNS} from kine where id > $1 and id <= $2 order by id"
    )))
    .bind(after)
    .bind(upto)
    .fetch_all(conn)
    .await
}

pub(super) async fn rows_with_ids(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<KineRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {COLUMNS} from kine where id = any($1) order by id"
    )))
    .bind(ids)
    .fetch_all(conn)
    .await
}

pub(super) async fn delete_ids(conn: &mut PgConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    sqlx::query("delete from kine where id = any($1)")
        .bind(ids)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Deletes the rows that share a `(name, prev_revision)` with one of `rows` under another id.
pub(super) async fn delete_pairs(conn: &mut PgConnection, rows: &[&KineRow]) -> Result<(), sqlx::Error> {
    for row in rows {
        sqlx::query("delete from kine where name = $1 and prev_revision = $2 and id <> $3")
            .bind(&row.name)
            .bind(row.prev_revision)
            .bind(row.id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

pub(super) async fn insert(conn: &mut PgConnection, rows: &[&KineRow]) -> Result<(), sqlx::Error> {
    let mut builder = QueryBuilder::<Postgres>::new(format!("insert into kine ({COLUMNS}) "));
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
    builder.push(" on conflict (id) do nothing");
    builder.build().execute(conn).await.map(|_| ())
}

/// Moves the sequence to at least `max`, so that the next id kine takes is above it.
pub(super) async fn raise_next_id(conn: &mut PgConnection, max: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "select setval(pg_get_serial_sequence('kine', 'id'), \
         greatest($1, (select case when is_called then last_value else 0 end from kine_id_seq)))",
    )
    .bind(max)
    .execute(conn)
    .await
    .map(|_| ())
}

pub(super) async fn compact_revs(conn: &mut PgConnection) -> Result<Vec<(i64, Option<i64>)>, sqlx::Error> {
    sqlx::query_as("select id, prev_revision from kine where name = 'compact_rev_key' order by id")
        .fetch_all(conn)
        .await
}

pub(super) async fn set_prev_revision(
    conn: &mut PgConnection,
    id: i64,
    prev: Option<i64>,
) -> Result<(), sqlx::Error> {
    sqlx::query("update kine set prev_revision = $2 where id = $1 and prev_revision is distinct from $2")
        .bind(id)
        .bind(prev)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Up to `limit` keys after `after` (byte order, kine's `COLLATE "C"`) with their latest row up to `upto`.
pub(super) async fn latest(
    conn: &mut PgConnection,
    upto: i64,
    after: &str,
    limit: i64,
) -> Result<Vec<Latest>, sqlx::Error> {
    sqlx::query_as(
        "select name, id, deleted, encode(sha256(value), 'hex') as hash from (\
         select distinct on (name) name, id, deleted, value from kine \
         where name > $1 and id <= $2 order by name, id desc limit $3) latest order by name",
    )
    .bind(after)
    .bind(upto)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The admin-owned schema of the freeze in the tenant's database: the flag and the function.
const FREEZE_SCHEMA: &str = "tenantplane_freeze";

/// The trigger on `kine` that makes the tenant's writes wait while the flag is set.
const FREEZE_TRIGGER: &str = "tenantplane_freeze";

/// `pg_stat_activity.wait_event` of a backend in `pg_sleep` (sleeping in the freeze's function).
const SLEEPING: &str = "PgSleep";

/// Creates [`FREEZE_SCHEMA`].
const CREATE_FREEZE_SCHEMA: &str = "create schema if not exists tenantplane_freeze";

/// The one-row flag and the function the trigger runs, owned by the DataStore's user; the tenant gets
/// no privilege on them. The function is `SECURITY DEFINER` with a fixed `search_path`: the tenant's
/// session runs it, but it reads the flag as its owner and resolves nothing in the tenant's schemas.
/// Each `select` in the loop takes a new snapshot (volatile function), so a sleeper sees the flag clear.
const FREEZE_OBJECTS: [&str; 4] = [
    "revoke all on schema tenantplane_freeze from public",
    "create table if not exists tenantplane_freeze.flag \
     (one boolean primary key default true check (one), frozen boolean not null)",
    "create or replace function tenantplane_freeze.wait() returns trigger \
     language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$ \
     begin \
       while exists (select from tenantplane_freeze.flag where frozen) loop \
         perform pg_sleep(0.05); \
       end loop; \
       return null; \
     end $$",
    "revoke all on function tenantplane_freeze.wait() from public",
];

/// Whether the freeze's trigger is on `kine`.
async fn trigger_exists(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "select exists (select from pg_trigger where tgrelid = 'public.kine'::regclass and tgname = $1)",
    )
    .bind(FREEZE_TRIGGER)
    .fetch_one(conn)
    .await
}

/// Creates the freeze's schema, flag and function, and checks that the DataStore's user owns the
/// schema (the tenant owns its database, so it could have made one of that name first).
async fn ensure_freeze_objects(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    exec(conn, CREATE_FREEZE_SCHEMA.to_string()).await?;
    let ours: bool = sqlx::query_scalar(
        "select nspowner = (select oid from pg_roles where rolname = current_user) \
         from pg_namespace where nspname = $1",
    )
    .bind(FREEZE_SCHEMA)
    .fetch_one(&mut *conn)
    .await?;
    if !ours {
        return Err(sqlx::Error::Protocol(format!(
            "schema {FREEZE_SCHEMA} in the tenant's database is not the DataStore user's; left it alone"
        )));
    }
    for statement in FREEZE_OBJECTS {
        exec(conn, statement.to_string()).await?;
    }
    Ok(())
}

/// Blocks the tenant's writes on `kine` (module docs of [`super`]): sets the flag, then creates the
/// trigger, whose lock waits for every write in flight (the barrier); when the trigger exists already
/// (a second freeze, maybe with writers asleep in it), waits until every writer is asleep instead.
pub(super) async fn freeze(conn: &mut PgConnection, wait: Duration) -> Result<(), sqlx::Error> {
    ensure_freeze_objects(conn).await?;
    exec(
        conn,
        "insert into tenantplane_freeze.flag (one, frozen) values (true, true) \
         on conflict (one) do update set frozen = true"
            .into(),
    )
    .await?;
    if !trigger_exists(conn).await? {
        let mut tx = conn.begin().await?;
        exec(
            &mut tx,
            format!("set local lock_timeout = '{}ms'", wait.as_millis()),
        )
        .await?;
        let created = exec(
            &mut tx,
            format!(
                "create trigger {FREEZE_TRIGGER} before insert or update or delete or truncate \
                 on public.kine for each statement execute function tenantplane_freeze.wait()"
            ),
        )
        .await;
        match created {
            Ok(()) => return tx.commit().await,
            // Another mover made it meanwhile: wait for the writers as for a second freeze.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42710") => drop(tx),
            Err(e) => return Err(e),
        }
    }
    wait_for_sleepers(conn, wait).await
}

/// Waits until every session but this one that holds a write lock on `kine` sleeps in the freeze: a
/// write that passed the trigger before the flag was set holds its lock until it commits, and never
/// sleeps (kine calls no `pg_sleep`).
async fn wait_for_sleepers(conn: &mut PgConnection, wait: Duration) -> Result<(), sqlx::Error> {
    let deadline = Instant::now() + wait;
    loop {
        let writing: i64 = sqlx::query_scalar(
            "select count(*) from pg_locks l left join pg_stat_activity a on a.pid = l.pid \
             where l.locktype = 'relation' and l.relation = 'public.kine'::regclass \
             and l.database = (select oid from pg_database where datname = current_database()) \
             and l.granted and l.mode in ('RowExclusiveLock', 'AccessExclusiveLock') \
             and l.pid is distinct from pg_backend_pid() and a.wait_event is distinct from $1",
        )
        .bind(SLEEPING)
        .fetch_one(&mut *conn)
        .await?;
        if writing == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(sqlx::Error::Protocol(format!(
                "{writing} writes of the tenant were still in flight after {}s",
                wait.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether role `user` exists.
async fn role_exists(conn: &mut PgConnection, user: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select from pg_roles where rolname = $1)")
        .bind(user)
        .fetch_one(conn)
        .await
}

/// Takes the tenant's `select` on `kine` (its inserts read the table too, so they fail from then on,
/// and so does kine's read after a failed insert). `REVOKE` waits for no lock: writers asleep in the
/// freeze keep sleeping (they passed their privilege check) and end as before.
pub(super) async fn seal(conn: &mut PgConnection, user: &str) -> Result<(), sqlx::Error> {
    set_select(conn, user, false).await
}

/// Grants (`on`) or revokes the tenant's `select` on `kine`, if both the table and the role exist.
async fn set_select(conn: &mut PgConnection, user: &str, on: bool) -> Result<(), sqlx::Error> {
    if !(table_exists(conn).await? && role_exists(conn, user).await?) {
        return Ok(());
    }
    let user = quote_ident(user);
    let statement = if on {
        format!("grant select on public.kine to {user}")
    } else {
        format!("revoke select on public.kine from {user}")
    };
    exec(conn, statement).await
}

/// Lifts the freeze: gives the tenant its `select` back ([`seal`]), clears the flag (the sleepers go
/// on), then drops the trigger (its lock waits for them to finish) and the schema.
pub(super) async fn thaw(conn: &mut PgConnection, wait: Duration, user: &str) -> Result<(), sqlx::Error> {
    set_select(conn, user, true).await?;
    let schema: bool = sqlx::query_scalar("select to_regnamespace($1) is not null")
        .bind(FREEZE_SCHEMA)
        .fetch_one(&mut *conn)
        .await?;
    if !schema {
        return Ok(());
    }
    exec(conn, "update tenantplane_freeze.flag set frozen = false".into()).await?;
    let mut tx = conn.begin().await?;
    exec(
        &mut tx,
        format!("set local lock_timeout = '{}ms'", wait.as_millis()),
    )
    .await?;
    if table_exists(&mut tx).await? {
        exec(
            &mut tx,
            format!("drop trigger if exists {FREEZE_TRIGGER} on public.kine"),
        )
        .await?;
    }
    exec(&mut tx, format!("drop schema {FREEZE_SCHEMA} cascade")).await?;
    tx.commit().await
}

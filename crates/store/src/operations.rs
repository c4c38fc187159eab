//! Operations: what a write asked for, the stages it has reached, and how it ended. Every change of an
//! operation sends `NOTIFY operation_progress, '<tenant>:<id>'` in the same statement, so a long poll or a
//! subscription hears of it only once it is committed.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// The channel every operation change is announced on (payload `<tenant>:<operation>`).
pub const CHANNEL: &str = "operation_progress";

/// An operation row.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationRow {
    /// Id.
    pub id: Uuid,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Control plane.
    pub control_plane_id: Uuid,
    /// `create`, `update` or `delete`.
    pub kind: String,
    /// `pending`, `running`, `succeeded` or `failed`.
    pub state: String,
    /// Message of a failed operation.
    pub error: Option<String>,
    /// Request id of the call that started it.
    pub request_id: Option<String>,
    /// The control plane generation it asks for.
    pub generation: i64,
    /// `[{stage, at}]`, in the order reached.
    pub stages: serde_json::Value,
    /// Machine-readable reason of a failure.
    pub reason: Option<String>,
    /// When an unfinished operation fails.
    pub deadline_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
}

/// A new operation: its kind, the generation it asks for, and its first stage (stamped now).
#[derive(Debug, Clone, Copy)]
pub struct NewOperation<'a> {
    /// `create`, `update` or `delete`.
    pub kind: &'a str,
    /// The control plane generation it asks for.
    pub generation: i64,
    /// The stage reached by recording it (`placed`, or `requested` for a delete).
    pub first_stage: &'a str,
    /// Seconds until it fails unless done.
    pub deadline_seconds: f64,
}

/// Inserts an operation (pending, with its first stage).
pub async fn insert(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
    new: NewOperation<'_>,
    request_id: Option<&str>,
) -> Result<OperationRow, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "insert into operations (id, tenant_id, control_plane_id, kind, request_id, generation, stages, deadline_at)
         values ($1, $2, $3, $4, $5, $6, jsonb_build_array(jsonb_build_object('stage', $7::text, 'at', now())),
                 now() + make_interval(secs => $8))
         returning id, tenant_id, control_plane_id, kind, state, error, request_id, generation, stages, reason,
                   deadline_at, created_at, updated_at",
        Uuid::new_v4(),
        tenant,
        control_plane,
        new.kind,
        request_id,
        new.generation,
        new.first_stage,
        new.deadline_seconds
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// An operation of `tenant`.
pub async fn get(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select id, tenant_id, control_plane_id, kind, state, error, request_id, generation, stages, reason,
                deadline_at, created_at, updated_at
         from operations where tenant_id = $1 and id = $2",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?)
}

/// The pending or running delete of a control plane, if any.
pub async fn open_delete(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
) -> Result<Option<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select id, tenant_id, control_plane_id, kind, state, error, request_id, generation, stages, reason,
                deadline_at, created_at, updated_at
         from operations where tenant_id = $1 and control_plane_id = $2 and kind = 'delete'
           and state in ('pending', 'running')
         order by created_at desc limit 1",
        tenant,
        control_plane
    )
    .fetch_optional(&mut *tx)
    .await?)
}

/// The newest operation of each of `tenant`'s control planes in `ids` (one query for a whole page).
pub async fn latest(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<Vec<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select distinct on (control_plane_id)
                id, tenant_id, control_plane_id, kind, state, error, request_id, generation, stages, reason,
                deadline_at, created_at, updated_at
         from operations where tenant_id = $1 and control_plane_id = any($2)
         order by control_plane_id, created_at desc, id desc",
        tenant,
        ids
    )
    .fetch_all(db)
    .await?)
}

/// The `per` newest operations of each of `tenant`'s control planes in `ids`, newest first (one query).
pub async fn recent(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[Uuid],
    per: i64,
) -> Result<Vec<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        r#"select id as "id!", tenant_id as "tenant_id!", control_plane_id as "control_plane_id!", kind as "kind!",
                  state as "state!", error, request_id, generation as "generation!", stages as "stages!", reason,
                  deadline_at as "deadline_at!", created_at as "created_at!", updated_at as "updated_at!"
           from (select o.*, row_number() over (partition by control_plane_id order by created_at desc, id desc) as n
                 from operations o where tenant_id = $1 and control_plane_id = any($2)) r
           where n <= $3
           order by control_plane_id, created_at desc, id desc"#,
        tenant,
        ids,
        per
    )
    .fetch_all(db)
    .await?)
}

/// Filters and position of a page of operations.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only this control plane's.
    pub control_plane: Option<Uuid>,
    /// Only in this state.
    pub state: Option<String>,
    /// Only of this kind.
    pub kind: Option<String>,
    /// Start after this `(created_at, id)`, going back in time.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// A page of `tenant`'s operations, newest first (`(created_at, id)` descending).
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    q: &ListQuery,
) -> Result<Vec<OperationRow>, StoreError> {
    let (before_ts, before_id) = q.before.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        OperationRow,
        "select id, tenant_id, control_plane_id, kind, state, error, request_id, generation, stages, reason,
                deadline_at, created_at, updated_at
         from operations
         where tenant_id = $1
           and ($2::uuid is null or control_plane_id = $2)
           and ($3::text is null or state = $3)
           and ($4::text is null or kind = $4)
           and ($5::timestamptz is null or (created_at, id) < ($5, $6::uuid))
         order by created_at desc, id desc
         limit $7",
        tenant,
        q.control_plane,
        q.state,
        q.kind,
        before_ts,
        before_id,
        q.limit
    )
    .fetch_all(db)
    .await?)
}

/// What the status of a control plane's TenantControlPlane says about its open creates and updates.
#[derive(Debug, Clone, PartialEq)]
pub struct Advance<'a> {
    /// The row generation the TCP was rendered from: operations asking for more are not concerned.
    pub generation: i64,
    /// The stages reached, in order (a prefix of a create's stages).
    pub stages: &'a [&'a str],
    /// The control plane is Ready (or asleep, when scaled to zero) at that generation.
    pub done: bool,
    /// A permanent failure: `(reason, message)`.
    pub failed: Option<(&'a str, &'a str)>,
}

/// Applies `advance` to the open creates and updates of a control plane that ask for at most its
/// generation: stamps the stages not yet reached, and succeeds or fails them. Returns how many changed.
pub async fn advance(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    control_plane: Uuid,
    advance: &Advance<'_>,
) -> Result<usize, StoreError> {
    let stages: Vec<String> = advance.stages.iter().map(|s| (*s).to_string()).collect();
    let (reason, message) = advance.failed.unzip();
    let changed = sqlx::query_scalar!(
        // The missing stages are computed from `o.stages` in the statement itself (not in a CTE): a
        // concurrent `reach` that wins the row lock is then seen, and no stage is stamped twice.
        r#"with changed as (
             update operations o
             set stages = o.stages || coalesce(
                   (select jsonb_agg(jsonb_build_object('stage', s, 'at', now()) order by i)
                    from unnest($4::text[]) with ordinality as t(s, i)
                    where not o.stages @> jsonb_build_array(jsonb_build_object('stage', s))), '[]'::jsonb),
                 state = case when $5 then 'succeeded' when $6::text is not null then 'failed' else 'running' end,
                 reason = case when $5 then null else $6 end,
                 error = case when $5 then null else $7 end,
                 updated_at = now()
             where o.tenant_id = $1 and o.control_plane_id = $2 and o.kind in ('create', 'update')
               and o.state in ('pending', 'running') and o.generation <= $3
               and ($5 or $6::text is not null or o.state = 'pending'
                    or exists (select 1 from unnest($4::text[]) as t(s)
                               where not o.stages @> jsonb_build_array(jsonb_build_object('stage', s))))
             returning o.tenant_id, o.id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        tenant,
        control_plane,
        advance.generation,
        &stages,
        advance.done,
        reason,
        message
    )
    .fetch_all(db)
    .await?;
    Ok(changed.len())
}

/// Stamps `stage` on the open operations of `kind` of a control plane that ask for at most `generation`
/// and lack it, and marks them running.
pub async fn reach(
    tx: &mut PgConnection,
    control_plane: Uuid,
    kinds: &[&str],
    generation: i64,
    stage: &str,
) -> Result<(), StoreError> {
    let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_string()).collect();
    sqlx::query_scalar!(
        r#"with changed as (
             update operations
             set stages = stages || jsonb_build_array(jsonb_build_object('stage', $4::text, 'at', now())),
                 state = 'running', updated_at = now()
             where control_plane_id = $1 and kind = any($2) and state in ('pending', 'running') and generation <= $3
               and not stages @> jsonb_build_array(jsonb_build_object('stage', $4::text))
             returning tenant_id, id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        control_plane,
        &kinds,
        generation,
        stage
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(())
}

/// How an open operation ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum End<'a> {
    /// Done, after reaching this last stage.
    Succeeded(&'a str),
    /// Failed: `(reason, message)`.
    Failed(&'a str, &'a str),
}

/// Ends operation `id` unless it has ended already (a status event may have been first).
pub async fn end(tx: &mut PgConnection, id: Uuid, end: End<'_>) -> Result<(), StoreError> {
    let (state, stage, reason, message) = match end {
        End::Succeeded(stage) => ("succeeded", Some(stage), None, None),
        End::Failed(reason, message) => ("failed", None, Some(reason), Some(message)),
    };
    sqlx::query_scalar!(
        r#"with changed as (
             update operations
             set state = $2, reason = $4, error = $5, updated_at = now(),
                 stages = case when $3::text is null or stages @> jsonb_build_array(jsonb_build_object('stage', $3::text))
                               then stages
                               else stages || jsonb_build_array(jsonb_build_object('stage', $3::text, 'at', now())) end
             where id = $1 and state in ('pending', 'running')
             returning tenant_id, id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        id,
        state,
        stage,
        reason,
        message
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(())
}

/// Marks operation `id` running (a retry is coming), unless it has ended.
pub async fn running(tx: &mut PgConnection, id: Uuid) -> Result<(), StoreError> {
    sqlx::query_scalar!(
        r#"with changed as (
             update operations set state = 'running', updated_at = now()
             where id = $1 and state = 'pending'
             returning tenant_id, id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(())
}

/// Fails the open creates and updates of a control plane that is being deleted (`Superseded`).
pub async fn supersede(tx: &mut PgConnection, tenant: Uuid, control_plane: Uuid) -> Result<(), StoreError> {
    sqlx::query_scalar!(
        r#"with changed as (
             update operations
             set state = 'failed', reason = 'Superseded', updated_at = now(),
                 error = 'the control plane was deleted before this change was done'
             where tenant_id = $1 and control_plane_id = $2 and kind in ('create', 'update')
               and state in ('pending', 'running')
             returning tenant_id, id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        tenant,
        control_plane
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(())
}

/// Fails every open operation past its deadline (`DeadlineExceeded`), naming the last stage it reached and
/// the control plane's `Ready` condition. Returns how many failed.
pub async fn expire(db: impl PgExecutor<'_>) -> Result<usize, StoreError> {
    let expired = sqlx::query_scalar!(
        r#"with changed as (
             update operations o
             set state = 'failed', reason = 'DeadlineExceeded', updated_at = now(),
                 error = format('not done within %s s (its deadline); last stage: %s%s',
                                round(extract(epoch from o.deadline_at - o.created_at)),
                                coalesce(o.stages -> -1 ->> 'stage', 'none'),
                                coalesce((select format('; Ready=%s (%s): %s', c ->> 'status', c ->> 'reason', c ->> 'message')
                                          from control_planes cp,
                                               jsonb_array_elements(case when jsonb_typeof(cp.status -> 'conditions') = 'array'
                                                                         then cp.status -> 'conditions' else '[]'::jsonb end) c
                                          where cp.id = o.control_plane_id and c ->> 'type' = 'Ready' limit 1), ''))
             where o.state in ('pending', 'running') and o.deadline_at < now()
             returning o.tenant_id, o.id
           )
           select pg_notify('operation_progress', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#
    )
    .fetch_all(db)
    .await?;
    Ok(expired.len())
}

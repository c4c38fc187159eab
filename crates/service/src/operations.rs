//! Operations: one, a long poll on one, and a tenant's list.

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::{
    Ctx, FieldError, Result, ServiceError,
    events::Hub,
    model::{Operation, OperationPage},
    page::{MAX_PAGE, decode_cursor, encode_cursor},
    stored::{load_operation, operation_model},
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::{OperationKind, OperationStage, OperationState, Role};
use tenantplane_store::{self as store, operations::OperationRow};

/// The longest long poll (`waitSeconds`).
pub const MAX_WAIT_SECONDS: u64 = 60;

/// One operation of tenant `slug` (tenant viewer). With `wait`, answers once the operation changes (a
/// stage, its state) or is done, or when `wait` has passed, whichever comes first; a done operation
/// answers at once.
pub async fn get(
    ctx: &Ctx,
    hub: &Hub,
    who: &Principal,
    slug: &str,
    id: &str,
    wait: Option<u64>,
) -> Result<Operation> {
    if let Some(seconds) = wait
        && seconds > MAX_WAIT_SECONDS
    {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "waitSeconds",
            format!("must be between 0 and {MAX_WAIT_SECONDS}"),
        )]));
    }
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    let id = super::parse_id(id, "operation")?;
    let Some(seconds) = wait.filter(|s| *s > 0) else {
        return load_operation(&ctx.db, tenant.id, id).await;
    };
    // Listen first, then read: a change committed in between is heard.
    let mut changes = hub.operations(&ctx.db, tenant.id).await?;
    let first = load_operation(&ctx.db, tenant.id, id).await?;
    if first.done {
        return Ok(first);
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        match tokio::time::timeout_at(until, changes.recv()).await {
            Err(_) => return load_operation(&ctx.db, tenant.id, id).await,
            Ok(Ok(event)) if event.tenant_id == tenant.id && event.operation.id == id => {
                if event.operation != first {
                    return Ok(event.operation.clone());
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(RecvError::Lagged(_))) => {
                let now = load_operation(&ctx.db, tenant.id, id).await?;
                if now != first {
                    return Ok(now);
                }
            }
            Ok(Err(RecvError::Closed)) => return load_operation(&ctx.db, tenant.id, id).await,
        }
    }
}

/// Subscribes `who` to the operation changes of tenant `slug` (tenant viewer; another tenant is not
/// found). Returns the tenant's id and the receiver of its operations' changes.
pub async fn subscribe(
    ctx: &Ctx,
    hub: &Hub,
    who: &Principal,
    slug: &str,
) -> Result<(
    Uuid,
    tokio::sync::broadcast::Receiver<std::sync::Arc<super::events::OperationEvent>>,
)> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    Ok((tenant.id, hub.operations(&ctx.db, tenant.id).await?))
}

/// Filters of an operation list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this control plane's (its id).
    pub control_plane: Option<String>,
    /// Only in this state.
    pub state: Option<OperationState>,
    /// Only of this kind.
    pub kind: Option<OperationKind>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// A page of tenant `slug`'s operations, newest first (tenant viewer).
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, filter: ListFilter) -> Result<OperationPage> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    let mut errors = Vec::new();
    let limit = filter.limit.unwrap_or(20);
    if !(1..=MAX_PAGE).contains(&limit) {
        errors.push(FieldError::new("limit", "must be between 1 and 100"));
    }
    let before = filter
        .cursor
        .as_deref()
        .map(decode_cursor)
        .transpose()
        .unwrap_or_else(|e| {
            errors.push(e);
            None
        });
    let control_plane = filter
        .control_plane
        .as_deref()
        .map(|s| crate::domain::schema::parse_uuid(s).ok_or(()))
        .transpose()
        .unwrap_or_else(|()| {
            errors.push(FieldError::new(
                "controlPlane",
                "must be a control-plane id (a UUID)",
            ));
            None
        });
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let query = store::operations::ListQuery {
        control_plane,
        state: filter.state.map(|s| s.as_str().to_string()),
        kind: filter.kind.map(|k| k.as_str().to_string()),
        before,
        limit: limit + 1,
    };
    let mut rows = store::operations::list(&ctx.db, tenant.id, &query).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| encode_cursor(r.created_at, r.id))
    } else {
        None
    };
    Ok(OperationPage {
        items: rows.into_iter().map(operation_model).collect(),
        next_cursor,
    })
}

/// The cursor that continues a list after `op`.
pub fn cursor_after(op: &Operation) -> String {
    encode_cursor(op.created_at, op.id)
}

/// The first stage of an operation of `kind`.
pub fn first_stage(kind: OperationKind) -> OperationStage {
    match kind {
        OperationKind::Delete => OperationStage::Requested,
        OperationKind::Create | OperationKind::Update | OperationKind::Migrate => OperationStage::Placed,
    }
}

/// Records an operation of `kind` on control plane `(tenant, id)` in the request's transaction: pending,
/// at its first stage, asking for `generation`, failing after the server's operation deadline.
pub async fn record(
    ctx: &Ctx,
    tx: &mut sqlx::PgConnection,
    (tenant, id): (Uuid, Uuid),
    kind: OperationKind,
    generation: i64,
    request_id: Option<&str>,
) -> Result<OperationRow> {
    let new = store::operations::NewOperation {
        kind: kind.as_str(),
        generation,
        first_stage: first_stage(kind).as_str(),
        deadline_seconds: ctx.limits.operation_deadline_seconds as f64,
    };
    Ok(store::operations::insert(tx, tenant, id, new, request_id).await?)
}

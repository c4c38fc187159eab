//! The tenant's audit log: read by its members, written by every use-case that changes or reveals something.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    Ctx, Result, ServiceError,
    model::{AuditPage, AuditRecord},
    page::{PageArgs, decode_cursor},
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::{FieldError, Role};
use tenantplane_store as store;

/// The longest action name a filter may give.
pub const MAX_ACTION_CHARS: usize = 64;

/// Filters of an audit list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this action, e.g. `control-plane.kubeconfig`.
    pub action: Option<String>,
    /// Only entries at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// Whether `action` is an action name: 1–64 of `a-z`, `0-9`, `.` and `-`.
pub fn is_action(action: &str) -> bool {
    (1..=MAX_ACTION_CHARS).contains(&action.len())
        && action
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// The cursor of an entry: its time and its id (in the low half of the cursor's id part).
fn cursor_of(row: &store::AuditLogRow) -> (DateTime<Utc>, Uuid) {
    (row.created_at, Uuid::from_u64_pair(0, row.id as u64))
}

/// A page of tenant `slug`'s audit log, newest first (tenant member or platform admin).
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, filter: ListFilter) -> Result<AuditPage> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantMember).await?;
    let mut errors = Vec::new();
    let page = PageArgs::check(filter.limit, None, &mut errors);
    let before = match filter.cursor.as_deref().map(decode_cursor).transpose() {
        Ok(c) => c.map(|(_, id)| id.as_u64_pair().1 as i64),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    if let Some(action) = &filter.action
        && !is_action(action)
    {
        errors.push(FieldError::new(
            "action",
            "must be an action name: 1 to 64 of a-z, 0-9, '.' and '-', e.g. control-plane.create",
        ));
    }
    let since = match filter
        .since
        .as_deref()
        .map(DateTime::parse_from_rfc3339)
        .transpose()
    {
        Ok(t) => t.map(|t| t.with_timezone(&Utc)),
        Err(_) => {
            errors.push(FieldError::new(
                "since",
                "must be an RFC 3339 date-time, e.g. 2026-12-17T08:00:00Z",
            ));
            None
        }
    };
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let query = store::AuditQuery {
        action: filter.action,
        since,
        before,
        limit: page.limit + 1,
    };
    let rows = store::audit_page(&ctx.db, tenant.id, &query).await?;
    let (rows, next_cursor) = page.split(rows, cursor_of);
    Ok(AuditPage {
        items: rows.into_iter().map(to_model).collect(),
        next_cursor,
    })
}

fn to_model(row: store::AuditLogRow) -> AuditRecord {
    AuditRecord {
        id: row.id,
        actor: row.actor,
        action: row.action,
        target_kind: row.target_kind,
        target_id: row.target_id,
        request_id: row.request_id,
        details: row.details,
        created_at: row.created_at,
    }
}

/// Records that `who` downloaded the admin kubeconfig of control plane `id` of tenant `slug` (the caller
/// has authorized it): who and which, never the kubeconfig.
pub async fn kubeconfig_read(ctx: &Ctx, who: &Principal, slug: &str, id: &str) -> Result<()> {
    let tenant = store::tenants::by_slug(&ctx.db, slug)
        .await?
        .ok_or(ServiceError::NotFound("tenant"))?;
    store::audit(
        &ctx.db,
        Some(tenant.id),
        &who.actor(),
        "control-plane.kubeconfig",
        "control-plane",
        id,
        None,
        serde_json::json!({}),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_name_is_lowercase_dotted_and_bounded() {
        assert!(is_action("control-plane.kubeconfig"));
        assert!(is_action("a"));
        assert!(!is_action(""));
        assert!(!is_action("Token.Mint"));
        assert!(!is_action("token mint"));
        assert!(!is_action(&"a".repeat(65)));
    }
}

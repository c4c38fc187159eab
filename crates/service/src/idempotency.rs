//! `Idempotency-Key` for writes, shared by every surface: the key is claimed inside the write's own
//! transaction, the first response is stored in that transaction and replayed for the same request, and
//! another request under the same key is refused ([`ServiceError::IdempotencyKeyReused`]).

use sqlx::PgConnection;

use super::{Ctx, Result, ServiceError};
use crate::auth::Principal;
use tenantplane_store::idempotency::{self, Claim};

/// One write under an optional idempotency key.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The operation, e.g. `POST /tenants/{slug}/control-planes`; keys are scoped by it and by the
    /// caller's tenant.
    pub route: &'a str,
    /// The caller's key, if any (without one the write simply runs).
    pub key: Option<&'a str>,
    /// A digest of the request (REST: SHA-256 of the raw body); the same key with another digest is
    /// refused.
    pub request_hash: &'a [u8],
    /// The status the surface answers a first, successful run with (stored for replays).
    pub status: u16,
}

/// What a write under [`run`] answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The status: `Request::status` for a first run, the stored one for a replay.
    pub status: u16,
    /// The response body (the work's result as JSON, or the stored one).
    pub body: serde_json::Value,
    /// Whether this is the stored answer of an earlier request with the same key.
    pub replayed: bool,
}

/// The scope of `who`'s keys on `route`: its tenant (or `platform`) and the route.
pub fn scope(who: &Principal, route: &str) -> String {
    format!(
        "{}:{route}",
        who.tenant_id
            .map(|t| t.to_string())
            .unwrap_or_else(|| "platform".into())
    )
}

/// Runs `work` in one transaction; with a key, the first response is stored in the same transaction and
/// replayed for the same request, while another request gets [`ServiceError::IdempotencyKeyReused`].
/// Concurrent requests with one key wait for the first and replay its answer.
pub async fn run<T: serde::Serialize>(
    ctx: &Ctx,
    who: &Principal,
    request: Request<'_>,
    work: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
) -> Result<Outcome> {
    let work = async |tx: &mut PgConnection| Ok((work(tx).await?, ()));
    run_then(ctx, who, request, work, async |_, ()| Ok(None)).await
}

/// [`run`] for a write with a last step: `work` answers and hands over what is left to do, and `last`
/// does it after the answer is stored, as the transaction's last statements before its commit (a lock
/// it takes is held the shortest time). `last` may change the answer (`Some`), which is then stored.
pub async fn run_then<T: serde::Serialize, P>(
    ctx: &Ctx,
    who: &Principal,
    request: Request<'_>,
    work: impl AsyncFnOnce(&mut PgConnection) -> Result<(T, P)>,
    last: impl AsyncFnOnce(&mut PgConnection, P) -> Result<Option<T>>,
) -> Result<Outcome> {
    let mut tx = ctx.db.begin().await?;
    let scope = scope(who, request.route);
    if let Some(key) = request.key {
        match idempotency::claim(&mut tx, &scope, key, request.request_hash).await? {
            Claim::Claimed => {}
            Claim::Completed {
                request_hash,
                status,
                body,
            } => {
                if request_hash != request.request_hash {
                    return Err(ServiceError::IdempotencyKeyReused);
                }
                return Ok(Outcome {
                    status,
                    body,
                    replayed: true,
                });
            }
        }
    }
    let (result, rest) = work(&mut tx).await?;
    let mut body = json(&result)?;
    if let Some(key) = request.key {
        idempotency::complete(&mut tx, &scope, key, request.status, &body).await?;
    }
    if let Some(changed) = last(&mut tx, rest).await? {
        body = json(&changed)?;
        if let Some(key) = request.key {
            idempotency::complete(&mut tx, &scope, key, request.status, &body).await?;
        }
    }
    tx.commit().await?;
    Ok(Outcome {
        status: request.status,
        body,
        replayed: false,
    })
}

fn json<T: serde::Serialize>(result: &T) -> Result<serde_json::Value> {
    serde_json::to_value(result).map_err(|e| ServiceError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Role;

    fn principal(tenant: Option<uuid::Uuid>) -> Principal {
        Principal {
            jti: uuid::Uuid::nil(),
            tenant_id: tenant,
            role: Role::TenantMember,
            subject: "s".into(),
            expires_at: chrono::Utc::now(),
            external: false,
        }
    }

    #[test]
    fn keys_are_scoped_by_tenant_and_route() {
        let tenant = uuid::Uuid::from_u128(7);
        assert_eq!(
            scope(&principal(Some(tenant)), "POST /tenants/a/control-planes"),
            format!("{tenant}:POST /tenants/a/control-planes")
        );
        assert_eq!(scope(&principal(None), "POST /tenants"), "platform:POST /tenants");
    }
}

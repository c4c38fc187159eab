//! `Idempotency-Key` records, claimed inside the request's transaction.

use sqlx::PgConnection;

use super::StoreError;

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The key is new and now held by this transaction.
    Claimed,
    /// A request with this key completed before: its body hash and response.
    Completed {
        /// SHA-256 of the first request's body.
        request_hash: Vec<u8>,
        /// Its status.
        status: u16,
        /// Its JSON body.
        body: serde_json::Value,
    },
}

/// Claims `(scope, key)`; waits for a concurrent holder to finish, then reports its response.
pub async fn claim(
    tx: &mut PgConnection,
    scope: &str,
    key: &str,
    request_hash: &[u8],
) -> Result<Claim, StoreError> {
    let inserted = sqlx::query_scalar!(
        "insert into idempotency_keys (scope, key, request_hash, response_status, response_body)
         values ($1, $2, $3, 0, '{}') on conflict do nothing returning 1",
        scope,
        key,
        request_hash
    )
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_some() {
        return Ok(Claim::Claimed);
    }
    let row = sqlx::query!(
        "select request_hash, response_status, response_body from idempotency_keys where scope = $1 and key = $2",
        scope,
        key
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(Claim::Completed {
        request_hash: row.request_hash,
        status: u16::try_from(row.response_status).unwrap_or(500),
        body: row.response_body,
    })
}

/// Stores the response of a claimed key (same transaction as the work).
pub async fn complete(
    tx: &mut PgConnection,
    scope: &str,
    key: &str,
    status: u16,
    body: &serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query!(
        "update idempotency_keys set response_status = $3, response_body = $4 where scope = $1 and key = $2",
        scope,
        key,
        i32::from(status),
        body
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

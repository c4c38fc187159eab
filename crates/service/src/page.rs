//! Keyset pages: the checked size and position of a list request ([`PageArgs`]) and the opaque cursor
//! every list hands out and takes back. It uses no sibling module, so every list can use it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Result, ServiceError};
use crate::domain::FieldError;

/// Largest page.
pub const MAX_PAGE: i64 = 100;

/// A position in the `(createdAt, id)` order: the microseconds since the epoch (16 hex digits) and the id
/// (32): every string of [`crate::domain::schema::CURSOR`]'s form is a position, so none is refused.
pub fn encode_cursor(ts: DateTime<Utc>, id: Uuid) -> String {
    format!("{:016x}{}", ts.timestamp_micros().max(0), id.simple())
}

/// The position `cursor` names; a `cursor` field error when it is not of [`encode_cursor`]'s form.
pub(crate) fn decode_cursor(cursor: &str) -> std::result::Result<(DateTime<Utc>, Uuid), FieldError> {
    let bad = || FieldError::new("cursor", "is not a cursor returned by this API");
    if !crate::domain::schema::is_cursor(cursor) {
        return Err(bad());
    }
    let (micros, id) = cursor.split_at(16);
    let micros = i64::from_str_radix(micros, 16).map_err(|_| bad())?;
    let ts = DateTime::from_timestamp_micros(micros).ok_or_else(bad)?;
    Ok((ts, Uuid::parse_str(id).map_err(|_| bad())?))
}

/// The page size and position of a keyset list request, checked: `limit` 1–100 (default 20), `cursor`
/// one this API returned (`(createdAt, id)` of the previous page's last item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageArgs {
    /// Page size.
    pub limit: i64,
    /// Continue after this position.
    pub after: Option<(DateTime<Utc>, Uuid)>,
}

impl PageArgs {
    /// Checks `limit` and `cursor`; 422 naming each bad one.
    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self> {
        let mut errors = Vec::new();
        let args = Self::check(limit, cursor, &mut errors);
        if errors.is_empty() {
            Ok(args)
        } else {
            Err(ServiceError::Invalid(errors))
        }
    }

    /// The same, collecting the errors into `errors` (for lists that check more parameters).
    pub fn check(limit: Option<i64>, cursor: Option<&str>, errors: &mut Vec<FieldError>) -> Self {
        let limit = limit.unwrap_or(20);
        if !(1..=MAX_PAGE).contains(&limit) {
            errors.push(FieldError::new("limit", "must be between 1 and 100"));
        }
        let after = cursor.map(decode_cursor).transpose().unwrap_or_else(|e| {
            errors.push(e);
            None
        });
        Self { limit, after }
    }

    /// Cuts `rows` (fetched with `limit + 1`) to the page and the cursor of its last item, if more follow.
    pub fn split<T>(
        &self,
        mut rows: Vec<T>,
        key: impl Fn(&T) -> (DateTime<Utc>, Uuid),
    ) -> (Vec<T>, Option<String>) {
        if rows.len() as i64 <= self.limit {
            return (rows, None);
        }
        rows.truncate(self.limit as usize);
        let next = rows.last().map(|r| {
            let (ts, id) = key(r);
            encode_cursor(ts, id)
        });
        (rows, next)
    }
}

//! One error shape for every HTTP failure: RFC 9457 `application/problem+json`.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::domain::FieldError;
use tenantplane_service::ServiceError;
use tenantplane_service::auth::TokenError;

/// A problem document.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URI naming the problem type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary.
    pub title: String,
    /// HTTP status.
    pub status: u16,
    /// What happened, for this request.
    pub detail: String,
    /// Invalid fields, when the input was at fault.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// The request id (also in `x-request-id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What still uses the resource, when a delete was refused (`in-use`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_by: Option<UsedBy>,
}

/// The users of a resource that could not be deleted: how many, and the first few by name.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UsedBy {
    /// How many users there are.
    pub count: i64,
    /// The first users (at most 10), by name: control planes as `tenant/name`, DataStores by name.
    pub items: Vec<String>,
}

/// An HTTP error.
#[derive(Debug)]
pub struct ApiError {
    problem: Box<Problem>,
    etag: Option<String>,
    authenticate: bool,
    retry_after: Option<u32>,
}

/// Seconds a client should wait before retrying a request answered `Unavailable`.
pub const RETRY_AFTER_SECONDS: u32 = 5;

impl ApiError {
    /// A problem with `status`, a slug for its type, a title and a detail.
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Self {
        Self {
            problem: Box::new(Problem {
                type_: format!("https://tenantplane.dev/problems/{slug}"),
                title: title.into(),
                status: status.as_u16(),
                detail: detail.into(),
                errors: Vec::new(),
                request_id: None,
                used_by: None,
            }),
            etag: None,
            authenticate: false,
            retry_after: None,
        }
    }

    /// 422 with field errors.
    pub fn invalid(errors: Vec<FieldError>) -> Self {
        let detail = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        let mut err = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "Invalid input",
            detail,
        );
        err.problem.errors = errors;
        err
    }

    /// 400: the body is not JSON.
    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "Malformed JSON",
            detail,
        )
    }

    /// 401.
    pub fn unauthorized(err: &TokenError) -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            err.to_string(),
        );
        e.authenticate = true;
        e
    }

    /// 429 `rate-limited`, with `Retry-After: seconds`.
    pub fn rate_limited(detail: impl Into<String>, seconds: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too many requests",
            detail,
        );
        e.retry_after = Some(u32::try_from(seconds).unwrap_or(u32::MAX));
        e
    }

    /// 500: details are logged, never sent.
    pub fn internal(detail: &str) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "an internal error occurred; quote the request id when reporting it",
        )
    }

    /// Sets the request id.
    pub fn with_request_id(mut self, id: Option<String>) -> Self {
        self.problem.request_id = id;
        self
    }

    /// The status.
    pub fn status(&self) -> u16 {
        self.problem.status
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Invalid(errors) => ApiError::invalid(errors),
            ServiceError::NotFound(what) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                format!("{what} not found"),
            ),
            ServiceError::Forbidden(detail) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
            }
            ServiceError::Conflict(detail) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
            }
            ServiceError::InUse { detail, count, users } => {
                let mut e = ApiError::new(StatusCode::CONFLICT, "in-use", "In use", detail);
                e.problem.used_by = Some(UsedBy { count, items: users });
                e
            }
            ServiceError::ConflictFields(errors) => {
                let mut e = ApiError::invalid(errors);
                e.problem.status = StatusCode::CONFLICT.as_u16();
                e.problem.type_ = "https://tenantplane.dev/problems/conflict".into();
                e.problem.title = "Conflict".into();
                e
            }
            ServiceError::QuotaExceeded(quota, _) => {
                let detail = err.to_string();
                let mut e = ApiError::invalid(vec![crate::domain::FieldError::new(quota, detail.clone())]);
                e.problem.status = StatusCode::FORBIDDEN.as_u16();
                e.problem.type_ = "https://tenantplane.dev/problems/quota-exceeded".into();
                e.problem.title = "Quota exceeded".into();
                e.problem.detail = detail;
                e
            }
            ServiceError::PreconditionFailed(etag) => {
                let mut e = ApiError::new(
                    StatusCode::PRECONDITION_FAILED,
                    "precondition-failed",
                    "Precondition failed",
                    format!("If-Match does not match the current ETag {etag}: fetch the resource and retry"),
                );
                e.etag = Some(etag);
                e
            }
            ServiceError::NotReady(detail) => {
                ApiError::new(StatusCode::CONFLICT, "not-ready", "Not ready yet", detail)
            }
            ServiceError::IdempotencyKeyReused => ApiError::new(
                StatusCode::CONFLICT,
                "idempotency-key-reused",
                "Idempotency-Key reused",
                err.to_string(),
            ),
            ServiceError::NoManagementCluster => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no-cluster",
                "No management cluster",
                err.to_string(),
            ),
            ServiceError::Unavailable(detail) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Service unavailable",
                    detail,
                );
                e.retry_after = Some(RETRY_AFTER_SECONDS);
                e
            }
            ServiceError::Internal(detail) => ApiError::internal(&detail),
        }
    }
}

impl From<TokenError> for ApiError {
    /// 401, but 403 `tenant-suspended` for a valid token of a suspended tenant.
    fn from(err: TokenError) -> Self {
        match err {
            TokenError::TenantSuspended => ApiError::new(
                StatusCode::FORBIDDEN,
                "tenant-suspended",
                "Tenant suspended",
                err.to_string(),
            ),
            err => ApiError::unauthorized(&err),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self.problem).unwrap_or_default();
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/problem+json")], body).into_response();
        if let Some(etag) = self.etag.and_then(|e| HeaderValue::from_str(&e).ok()) {
            response.headers_mut().insert(header::ETAG, etag);
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.authenticate {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn problem(err: ServiceError) -> (StatusCode, serde_json::Value) {
        let e = ApiError::from(err);
        (
            StatusCode::from_u16(e.status()).unwrap(),
            serde_json::to_value(&*e.problem).unwrap(),
        )
    }

    #[test]
    fn a_reused_idempotency_key_is_a_409_of_its_own_type() {
        let (status, body) = problem(ServiceError::IdempotencyKeyReused);
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            body,
            serde_json::json!({
                "type": "https://tenantplane.dev/problems/idempotency-key-reused",
                "title": "Idempotency-Key reused",
                "status": 409,
                "detail": "this Idempotency-Key was used with a different request body; use a new key",
            })
        );
    }

    #[test]
    fn unavailable_is_a_retryable_503() {
        let e = ApiError::from(ServiceError::Unavailable(
            "the tenant cluster did not answer".into(),
        ));
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let (status, body) = problem(ServiceError::Unavailable(
            "the tenant cluster did not answer".into(),
        ));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({
                "type": "https://tenantplane.dev/problems/unavailable",
                "title": "Service unavailable",
                "status": 503,
                "detail": "the tenant cluster did not answer",
            })
        );
    }

    #[test]
    fn no_management_cluster_is_a_503() {
        let (status, body) = problem(ServiceError::NoManagementCluster);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({
                "type": "https://tenantplane.dev/problems/no-cluster",
                "title": "No management cluster",
                "status": 503,
                "detail": "this server has no management cluster configured",
            })
        );
    }
}

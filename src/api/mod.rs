//! HTTP surfaces. For now: liveness and readiness probes.

use std::time::Duration;

use axum::{
    Json, Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::json;
use sqlx::PgPool;
use tower_http::trace::TraceLayer;

/// State shared by every handler; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The PostgreSQL pool.
    pub db: PgPool,
}

/// The full HTTP router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Liveness: the process serves HTTP.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: PostgreSQL answers `SELECT 1` within two seconds.
async fn readyz(State(state): State<AppState>) -> Response {
    let check = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("select 1").fetch_one(&state.db),
    )
    .await;
    match check {
        Ok(Ok(1)) => Json(json!({"status": "ok", "checks": {"postgres": "ok"}})).into_response(),
        other => {
            let detail = match other {
                Err(_) => "PostgreSQL did not answer within 2s".to_string(),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "readiness check failed");
                    "PostgreSQL is unreachable".to_string()
                }
                Ok(Ok(n)) => format!("PostgreSQL answered {n} to SELECT 1"),
            };
            problem(StatusCode::SERVICE_UNAVAILABLE, "Not ready", &detail)
        }
    }
}

/// An RFC 9457 `application/problem+json` response.
pub fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

//! The self-service portal at `/portal/`: the files `web/portal`'s Vite build wrote into
//! `crates/api/assets/portal` (committed, drift-tested), embedded at compile time by the crate's build
//! script. `index.html` is revalidated on every load (`no-cache`); the content-hashed files under
//! `assets/` are cached for a year (`immutable`). Every answer carries a strict Content-Security-Policy:
//! scripts, styles, images and fonts from this origin only, requests to this origin only (its GraphQL
//! WebSocket included), no inline code, no framing.

use axum::{
    extract::Path,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use super::error::ApiError;

/// Every built file: its path under `/portal/` and its bytes (sorted by path).
pub static FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/portal_files.rs"));

/// The portal's policy: nothing inline, nothing from elsewhere, no framing, no forms, no base URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// How long a content-hashed file may be cached: a year, never revalidated.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The media type of a built file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map_or("", |(_, e)| e);
    match extension {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The embedded file at `path`.
fn find(path: &str) -> Option<&'static [u8]> {
    FILES.iter().find(|(p, _)| *p == path).map(|(_, bytes)| *bytes)
}

/// `response` with the portal's security headers.
fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// A 404 problem naming what is missing.
fn not_found(detail: String) -> Response {
    secured(ApiError::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail).into_response())
}

/// The file at `path`, cached as `cache`.
fn serve(path: &str, bytes: &'static [u8], cache: &'static str) -> Response {
    secured(
        (
            [
                (header::CONTENT_TYPE, content_type(path)),
                (header::CACHE_CONTROL, cache),
            ],
            bytes,
        )
            .into_response(),
    )
}

/// `GET /portal` and `/portal/`: the app's page (revalidated on every load).
pub async fn index() -> Response {
    match find("index.html") {
        Some(bytes) => serve("index.html", bytes, "no-cache"),
        None => not_found("the portal is not built into this binary: run `make portal`".into()),
    }
}

/// `GET /portal/{*path}`: a hashed asset (cached for a year), another built file, or, for a path whose
/// last segment has no extension (a page of the app), the app's page; 404 for anything else.
pub async fn file(Path(path): Path<String>) -> Response {
    match find(&path) {
        Some(bytes) if path.starts_with("assets/") => serve(&path, bytes, IMMUTABLE),
        Some(bytes) => serve(&path, bytes, "no-cache"),
        None if !path.starts_with("assets/") && !path.rsplit('/').next().unwrap_or("").contains('.') => {
            index().await
        }
        None => not_found(format!("no portal file {path:?}")),
    }
}

/// `GET /`: the portal.
pub async fn root() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/portal/")]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_file_has_a_known_media_type() {
        for (path, _) in FILES {
            assert_ne!(content_type(path), "application/octet-stream", "{path}");
        }
        assert_eq!(
            content_type("assets/index-Ab12.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("assets/index-Ab12.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
    }
}

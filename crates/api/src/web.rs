//! The API's browser pages, Swagger UI at `/docs` and GraphiQL at `GET /graphql`, built from assets
//! embedded in the binary and served under `/assets`: no CDN, nothing fetched from another origin. The
//! vendored files (`crates/api/assets/vendor`) are copies of the npm packages pinned by
//! `web/vendor/package-lock.json` (`scripts/vendor-web`); the two small start scripts are ours. The pages
//! carry a Content-Security-Policy that runs only this origin's scripts, none inline.

use axum::{
    extract::Path,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use super::error::ApiError;

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// Its name under `/assets/`.
    pub name: &'static str,
    /// Where the vendored copy comes from, in `node_modules` of `web/vendor`; `None`: our own file.
    pub source: Option<&'static str>,
    /// Its media type.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

macro_rules! vendored {
    ($name:literal, $source:literal, $type:expr) => {
        Asset {
            name: $name,
            source: Some($source),
            content_type: $type,
            bytes: include_bytes!(concat!("../assets/vendor/", $name)),
        }
    };
}

macro_rules! own {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            source: None,
            content_type: $type,
            bytes: include_bytes!(concat!("../assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file served under `/assets/`.
pub const ASSETS: &[Asset] = &[
    vendored!("swagger-ui-bundle.js", "swagger-ui-dist/swagger-ui-bundle.js", JS),
    vendored!("swagger-ui.css", "swagger-ui-dist/swagger-ui.css", CSS),
    vendored!("graphiql.min.js", "graphiql/graphiql.min.js", JS),
    vendored!("graphiql.min.css", "graphiql/graphiql.min.css", CSS),
    vendored!("react.production.min.js", "react/umd/react.production.min.js", JS),
    vendored!(
        "react-dom.production.min.js",
        "react-dom/umd/react-dom.production.min.js",
        JS
    ),
    own!("docs.js", JS),
    own!("graphiql.js", JS),
];

/// The pages' policy: scripts, styles, images and fonts from this origin only (inline styles allowed,
/// both UIs set them), requests to this origin only, no framing, no forms, no base URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /assets/{name}`: an embedded file, cacheable for a day; 404 for any other name.
pub async fn asset(Path(name): Path<String>) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Not found",
            format!("no asset {name:?}"),
        )
        .into_response();
    };
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "public, max-age=86400"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        asset.bytes,
    )
        .into_response()
}

/// One of the pages: its title, stylesheets, the element the UI renders into, and its scripts.
#[derive(Debug, Clone, Copy)]
struct Page {
    title: &'static str,
    styles: &'static [&'static str],
    root: &'static str,
    scripts: &'static [&'static str],
}

/// Swagger UI on `/api/v1/openapi.json`.
const DOCS: Page = Page {
    title: "Tenantplane API",
    styles: &["swagger-ui.css"],
    root: "ui",
    scripts: &["swagger-ui-bundle.js", "docs.js"],
};

/// GraphiQL on `/graphql`.
const GRAPHIQL: Page = Page {
    title: "Tenantplane GraphQL",
    styles: &["graphiql.min.css"],
    root: "graphiql",
    scripts: &[
        "react.production.min.js",
        "react-dom.production.min.js",
        "graphiql.min.js",
        "graphiql.js",
    ],
};

impl Page {
    /// The HTML: the stylesheets, a root element filling the window, then the scripts.
    fn html(&self) -> String {
        let links: String = self
            .styles
            .iter()
            .map(|s| format!("<link rel=\"stylesheet\" href=\"/assets/{s}\">"))
            .collect();
        let scripts: String = self
            .scripts
            .iter()
            .map(|s| format!("<script src=\"/assets/{s}\"></script>"))
            .collect();
        let (title, root) = (self.title, self.root);
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>{links}\
             <style>html,body{{margin:0;height:100%}}#{root}{{height:100vh}}</style></head>\
             <body><div id=\"{root}\"></div>{scripts}</body></html>"
        )
    }

    /// The page under [`CONTENT_SECURITY_POLICY`].
    fn response(&self) -> Response {
        let mut response = (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            self.html(),
        )
            .into_response();
        response.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        response
    }
}

/// `GET /docs`: Swagger UI.
pub async fn docs() -> Response {
    DOCS.response()
}

/// GraphiQL (`GET /graphql` without a query).
pub fn graphiql() -> Response {
    GRAPHIQL.response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn every_page_asset_is_embedded_and_nothing_comes_from_elsewhere() {
        for page in [DOCS.html(), GRAPHIQL.html()] {
            assert!(!page.contains("http"), "{page}");
            let names: Vec<&str> = page
                .split("/assets/")
                .skip(1)
                .map(|piece| piece.split('"').next().unwrap())
                .collect();
            assert!(names.len() >= 3, "{page}");
            for name in names {
                assert!(ASSETS.iter().any(|a| a.name == name), "{name} is not embedded");
            }
        }
    }
}

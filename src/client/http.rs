//! The REST API over HTTP: URLs built from escaped path segments, bearer auth, problem answers as errors.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::{Method, Url};
use serde::{Deserialize, de::DeserializeOwned};

use super::error::{ApiProblem, ClientError, Result};
use crate::{
    secret::Secret,
    service::model::{Accepted, ControlPlane, ControlPlanePage, CreatedJoinToken, Operation, Viewer},
};

/// How long one long poll of an operation waits on the server (at most 60).
pub const WAIT_SECONDS: u64 = 30;

/// The API of one server with one token.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: Url,
    token: Secret<String>,
}

/// `url` with `/api/v1` (added when missing) and no trailing slash.
pub fn normalize(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.ends_with("/api/v1") {
        url.to_string()
    } else {
        format!("{url}/api/v1")
    }
}

impl Api {
    /// A client for the server at `url` (its base, with or without `/api/v1`) with bearer `token`.
    pub fn new(url: &str, token: Secret<String>) -> Result<Api> {
        let base = Url::parse(&normalize(url))
            .map_err(|e| ClientError::Other(format!("invalid API URL {url:?}: {e}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::Other(format!(
                "invalid API URL {url:?}: must be http:// or https://"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(WAIT_SECONDS + 60))
            .build()
            .map_err(|e| ClientError::Other(format!("HTTP client: {e}")))?;
        Ok(Api { http, base, token })
    }

    /// The base URL (`…/api/v1`).
    pub fn base(&self) -> &str {
        self.base.as_str()
    }

    /// The URL of `segments` (each escaped) under the base, with `query`.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// Sends a request; a 2xx answer's body, else the problem as an error.
    async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<Vec<u8>> {
        let mut request = self
            .http
            .request(method, self.url(segments, query))
            .bearer_auth(self.token.expose());
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?.to_vec();
        if status.is_success() {
            return Ok(bytes);
        }
        let problem = serde_json::from_slice::<ApiProblem>(&bytes).unwrap_or_else(|_| ApiProblem {
            status: status.as_u16(),
            title: status.canonical_reason().unwrap_or("error").to_string(),
            detail: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
            ..ApiProblem::default()
        });
        Err(ClientError::from_problem(status.as_u16(), problem))
    }

    /// A request whose answer is JSON of type `T`.
    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<T> {
        let bytes = self.send(method, segments, query, body).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Other(format!("unexpected answer from the API: {e}")))
    }

    /// `GET /viewer`: who the token is.
    pub async fn viewer(&self) -> Result<Viewer> {
        self.json(Method::GET, &["viewer"], &[], None).await
    }

    /// `POST /tenants/{t}/control-planes`.
    pub async fn create(&self, tenant: &str, body: &serde_json::Value) -> Result<Accepted> {
        self.json(
            Method::POST,
            &["tenants", tenant, "control-planes"],
            &[],
            Some(body),
        )
        .await
    }

    /// One page of `GET /tenants/{t}/control-planes`.
    pub async fn list(&self, tenant: &str, cursor: Option<&str>) -> Result<ControlPlanePage> {
        let mut query = vec![("limit", "100".to_string())];
        query.extend(cursor.map(|c| ("cursor", c.to_string())));
        self.json(Method::GET, &["tenants", tenant, "control-planes"], &query, None)
            .await
    }

    /// `GET /tenants/{t}/control-planes/{id or name}`.
    pub async fn get(&self, tenant: &str, cp: &str) -> Result<ControlPlane> {
        self.json(Method::GET, &["tenants", tenant, "control-planes", cp], &[], None)
            .await
    }

    /// `PATCH /tenants/{t}/control-planes/{id or name}`.
    pub async fn update(&self, tenant: &str, cp: &str, body: &serde_json::Value) -> Result<Accepted> {
        self.json(
            Method::PATCH,
            &["tenants", tenant, "control-planes", cp],
            &[],
            Some(body),
        )
        .await
    }

    /// `DELETE /tenants/{t}/control-planes/{id or name}`.
    pub async fn delete(&self, tenant: &str, cp: &str) -> Result<Accepted> {
        self.json(
            Method::DELETE,
            &["tenants", tenant, "control-planes", cp],
            &[],
            None,
        )
        .await
    }

    /// `GET /tenants/{t}/control-planes/{id or name}/kubeconfig`: YAML.
    pub async fn kubeconfig(&self, tenant: &str, cp: &str) -> Result<String> {
        let bytes = self
            .send(
                Method::GET,
                &["tenants", tenant, "control-planes", cp, "kubeconfig"],
                &[],
                None,
            )
            .await?;
        String::from_utf8(bytes).map_err(|_| ClientError::Other("the kubeconfig is not UTF-8".into()))
    }

    /// `POST /tenants/{t}/control-planes/{id or name}/join-tokens`.
    pub async fn join_token(
        &self,
        tenant: &str,
        cp: &str,
        body: &serde_json::Value,
    ) -> Result<CreatedJoinToken> {
        self.json(
            Method::POST,
            &["tenants", tenant, "control-planes", cp, "join-tokens"],
            &[],
            Some(body),
        )
        .await
    }

    /// `POST /tenants/{t}/control-planes/{id or name}/credentials`: a short-lived control-plane token.
    pub async fn credential(
        &self,
        tenant: &str,
        cp: &str,
        body: &serde_json::Value,
    ) -> Result<IssuedCredential> {
        self.json(
            Method::POST,
            &["tenants", tenant, "control-planes", cp, "credentials"],
            &[],
            Some(body),
        )
        .await
    }

    /// `GET /tenants/{t}/operations/{id}`, long-polling up to `wait` seconds.
    pub async fn operation(&self, tenant: &str, id: &str, wait: Option<u64>) -> Result<Operation> {
        let query: Vec<(&str, String)> = wait.map(|w| ("waitSeconds", w.to_string())).into_iter().collect();
        self.json(Method::GET, &["tenants", tenant, "operations", id], &query, None)
            .await
    }
}

/// The answer of `POST …/credentials`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedCredential {
    /// The control plane's bearer token (a JWT).
    pub token: String,
    /// When it expires.
    pub expires_at: DateTime<Utc>,
}

/// Redacts the token.
impl std::fmt::Debug for IssuedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCredential")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_gets_api_v1_once_and_no_trailing_slash() {
        assert_eq!(normalize("http://h:8080"), "http://h:8080/api/v1");
        assert_eq!(normalize("http://h:8080/"), "http://h:8080/api/v1");
        assert_eq!(normalize("http://h:8080/api/v1/"), "http://h:8080/api/v1");
        assert_eq!(normalize(" https://h/prefix "), "https://h/prefix/api/v1");
    }

    #[test]
    fn path_segments_are_escaped_and_queries_encoded() {
        crate::runtime::install_crypto_provider();
        let api = Api::new("http://h:8080", Secret::new("t".into())).unwrap();
        assert_eq!(
            api.url(
                &["tenants", "a/b", "control-planes", "x y"],
                &[("cursor", "c&d".into())]
            )
            .as_str(),
            "http://h:8080/api/v1/tenants/a%2Fb/control-planes/x%20y?cursor=c%26d"
        );
    }

    #[test]
    fn only_http_and_https_urls_are_taken_and_the_token_is_never_shown() {
        crate::runtime::install_crypto_provider();
        let err = Api::new("ftp://h", Secret::new("t".into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid API URL "ftp://h": must be http:// or https://"#
        );
        let api = Api::new("http://h", Secret::new("eyJsecret".into())).unwrap();
        assert!(!format!("{api:?}").contains("eyJsecret"));
    }
}

//! Extractors that turn bad requests into problems: JSON bodies, bearer tokens, request ids.

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, OptionalFromRequest, Request},
    http::{StatusCode, header, request::Parts},
};
use serde::de::DeserializeOwned;

use super::{AppState, error::ApiError};
use crate::domain::FieldError;
use tenantplane_service as service;
use tenantplane_service::auth::{Principal, TokenError};

/// A JSON body: 400 when malformed, 422 naming the field for unknown fields or wrong types, 413 when too
/// large, 415 without a JSON content type. Keeps the SHA-256 of the raw body for `Idempotency-Key`.
#[derive(Debug)]
pub struct JsonBody<T> {
    /// The value.
    pub value: T,
    /// SHA-256 of the raw bytes.
    pub hash: Vec<u8>,
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(&req) {
            return Err(not_json());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(unreadable)?;
        Self::parse(&bytes)
    }
}

/// Whether the request says its body is JSON.
fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json") || ct.ends_with("+json"))
}

impl<T: DeserializeOwned> JsonBody<T> {
    /// Reads a JSON object from `bytes`.
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        let hash = ring::digest::digest(&ring::digest::SHA256, bytes)
            .as_ref()
            .to_vec();
        // Every body is an object: serde would also read a struct from an array (`[null, null]`).
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => ApiError::invalid(vec![FieldError::new("", "the body must be a JSON object")]),
                Err(e) => ApiError::malformed(format!("the body is not valid JSON: {e}")),
            });
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                ApiError::malformed(format!("the body is not valid JSON: {inner}"))
            } else {
                let field = if path == "." { String::new() } else { path };
                let message = inner.to_string();
                let message = message.split(" at line ").next().unwrap_or(&message).to_string();
                ApiError::invalid(vec![FieldError::new(field, message)])
            }
        })?;
        de.end()
            .map_err(|e| ApiError::malformed(format!("trailing data after the JSON body: {e}")))?;
        Ok(Self { value, hash })
    }
}

/// A body that could not be read: too large (413), or cut off (400).
fn unreadable(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            "the request body exceeds the size limit",
        )
    } else {
        ApiError::malformed(rejection.body_text())
    }
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
        "Unsupported media type",
        "send the body as application/json",
    )
}

/// An optional JSON body (`Option<JsonBody<T>>`): no bytes, JSON whitespace only, or a JSON `null`, read
/// as `None` (with or without `Content-Type`); anything else is read (and refused) as [`JsonBody`] reads it.
impl<T: DeserializeOwned, S: Send + Sync> OptionalFromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Self::Rejection> {
        let json = is_json(&req);
        let bytes = Bytes::from_request(req, state).await.map_err(unreadable)?;
        let text = trim_json_whitespace(&bytes);
        if text.is_empty() || (json && text == b"null") {
            return Ok(None);
        }
        if !json {
            return Err(not_json());
        }
        Self::parse(&bytes).map(Some)
    }
}

/// `bytes` without leading and trailing JSON whitespace (space, tab, LF, CR: RFC 8259 §2; not the form
/// feed or vertical tab that `trim_ascii` also strips).
fn trim_json_whitespace(bytes: &[u8]) -> &[u8] {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !blank(b)).map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// The authenticated caller (401 otherwise).
#[derive(Debug, Clone)]
pub struct Auth(pub Principal);

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    /// Authenticates the request, then charges it to the caller's rate-limit buckets (its subject's and
    /// its tenant's); a request that fails authentication is charged to its bearer string's bucket.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let authenticated = authenticate(parts, state).await;
        let Some(limits) = &state.limits else {
            return authenticated.map(Auth);
        };
        let charged = match &authenticated {
            Ok(who) => limits.charge(who, 1, 0),
            Err(_) => limits.charge_unauthenticated(token),
        };
        charged.map_err(|refused| limits.refusal(refused))?;
        authenticated.map(Auth)
    }
}

/// The caller of a request with an `Authorization: Bearer` header (401 otherwise; 503 when the token
/// store is down).
async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let value = parts
        .headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized(&TokenError::Missing))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::unauthorized(&TokenError::Malformed))?;
    let token = bearer_token(text).ok_or_else(|| ApiError::unauthorized(&TokenError::Missing))?;
    let principal = service::tokens::authenticate(&state.ctx, token)
        .await
        .map_err(|e| match e {
            TokenError::Unavailable => {
                tracing::warn!("a token could not be verified: the token store or its issuer is unavailable");
                ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Service unavailable",
                    "the token store or the token's issuer is unavailable; try again later",
                )
            }
            e => ApiError::from(e),
        })?;
    tracing::Span::current().record(
        "tenant.id",
        tracing::field::display(principal.tenant_id.map(|t| t.to_string()).unwrap_or_default()),
    );
    Ok(principal)
}

/// The token of an `Authorization` value (`Bearer <token>`).
pub fn bearer_token(value: &str) -> Option<&str> {
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
}

/// The request id set by the request-id layer.
#[derive(Debug, Clone)]
pub struct RequestId(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestId(
            parts
                .headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        ))
    }
}

/// The `Idempotency-Key` header, if any (1–255 visible ASCII characters, no spaces).
#[derive(Debug, Clone)]
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("idempotency-key") {
            None => Ok(IdempotencyKey(None)),
            Some(v) => {
                let key = v
                    .to_str()
                    .ok()
                    .filter(|k| crate::domain::is_idempotency_key(k))
                    .ok_or_else(|| {
                        ApiError::invalid(vec![FieldError::new(
                            "Idempotency-Key",
                            "must be 1 to 255 visible ASCII characters, without spaces",
                        )])
                    })?;
                Ok(IdempotencyKey(Some(key.to_string())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, extract::OptionalFromRequest, http::header};
    use proptest::{
        prelude::*,
        test_runner::{Config, RngSeed},
    };

    use super::JsonBody;

    /// What the optional body extractor reads `body` as: `Some(true)` absent, `Some(false)` present,
    /// `None` refused.
    fn read(body: &[u8], json: bool) -> Option<bool> {
        let mut req = axum::http::Request::post("/")
            .body(Body::from(body.to_vec()))
            .unwrap();
        if json {
            req.headers_mut()
                .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        }
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let read = runtime
            .block_on(<JsonBody<serde_json::Value> as OptionalFromRequest<()>>::from_request(req, &()));
        read.ok().map(|value| value.is_none())
    }

    /// Short bodies over the bytes that blank-body bugs live in: every ASCII whitespace (JSON's four and
    /// the form feed and vertical tab it excludes), `null`'s letters and braces.
    fn bodies() -> impl Strategy<Value = Vec<u8>> {
        let bytes = b" \t\n\r\x0b\x0cnul{}".to_vec();
        prop::collection::vec(prop::sample::select(bytes), 0..6)
    }

    proptest! {
        // A fixed seed: the same bodies on every run (this found the form feed that `trim_ascii` passed
        // for "no body", which schemathesis had found once, by chance, at 1,000 cases per operation).
        #![proptest_config(Config {
            cases: 512,
            rng_seed: RngSeed::Fixed(20_261_207),
            failure_persistence: None,
            ..Config::default()
        })]

        /// A body is read as absent exactly when it is JSON whitespace only (RFC 8259: space, tab, LF, CR),
        /// or a JSON `null` sent as JSON; serde_json, which parses JSON itself, is the judge of `null`.
        #[test]
        fn an_optional_body_is_absent_exactly_when_it_is_json_whitespace_or_json_null(
            body in bodies(),
            json in any::<bool>(),
        ) {
            let blank = body.iter().all(|b| b" \t\n\r".contains(b));
            let null = json && serde_json::from_slice::<serde_json::Value>(&body).ok() == Some(serde_json::Value::Null);
            let read = read(&body, json);
            prop_assert_eq!(read == Some(true), blank || null, "body {:?}, json {}: read {:?}", body, json, read);
        }
    }
}

//! Prometheus metrics of the HTTP surface: request counts and latency histograms per route.

use std::{sync::Arc, time::Instant};

use axum::{
    extract::{MatchedPath, Request, State},
    middleware::Next,
    response::Response,
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

/// Labels of a request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP method.
    pub method: String,
    /// Route template, e.g. `/api/v1/tenants/{tenant}`.
    pub route: String,
    /// Status code.
    pub status: u16,
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// HTTP method.
    pub method: String,
    /// Route template.
    pub route: String,
}

/// The HTTP metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(|_| {})
    }
}

impl Metrics {
    /// The HTTP metrics, plus whatever `extra` registers (e.g. the worker's, with `serve --with-worker`).
    pub fn new(extra: impl FnOnce(&mut Registry)) -> Self {
        let mut registry = Registry::with_prefix("tenantplane");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ])
        });
        registry.register(
            "http_requests",
            "HTTP requests by method, route and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by method and route",
            latency.clone(),
        );
        extra(&mut registry);
        Self {
            registry,
            requests,
            latency,
        }
    }
}

impl Metrics {
    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The `method` label: the standard methods by name, anything else `other` (label values stay bounded).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *method {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::PATCH => "PATCH",
        M::DELETE => "DELETE",
        M::OPTIONS => "OPTIONS",
        M::CONNECT => "CONNECT",
        M::TRACE => "TRACE",
        _ => "other",
    }
}

/// Middleware that records every request under its route template.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = method_label(request.method()).to_string();
    let start = Instant::now();
    let response = next.run(request).await;
    metrics
        .latency
        .get_or_create(&RouteLabels {
            method: method.clone(),
            route: route.clone(),
        })
        .observe(start.elapsed().as_secs_f64());
    metrics
        .requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&axum::http::Method::PATCH), "PATCH");
        let odd = axum::http::Method::from_bytes(b"XYZZY-1234").unwrap();
        assert_eq!(method_label(&odd), "other");
    }
}

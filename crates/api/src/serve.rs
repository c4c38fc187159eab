//! Serving HTTP/1.1 with deadlines for slow clients, on the plain listener and the TLS one alike: a
//! client has [`HttpTimeouts::header`] to send a request's line and headers (from the connection's start
//! or the end of its previous answer, so an idle keep-alive connection closes too), and
//! [`HttpTimeouts::body`] to send its body (then the answer is a 408 problem and the connection closes).
//! Upgraded connections (WebSockets) have their own deadlines.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
    serve::Listener,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};

use super::error::ApiError;

/// How long a client may take to send a request (`serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct HttpTimeouts {
    /// Seconds a client may take to send a request's line and headers, counted from the connection's
    /// start or the end of the previous answer on it; past it the connection is closed.
    #[arg(
        long = "http-header-timeout-seconds",
        env = "TENANTPLANE_HTTP_HEADER_TIMEOUT_SECONDS",
        default_value_t = 10.0
    )]
    pub header_seconds: f64,
    /// Seconds a client may take to send a request's body, counted from the end of its headers; past it
    /// the answer is a 408 problem and the connection is closed.
    #[arg(
        long = "http-body-timeout-seconds",
        env = "TENANTPLANE_HTTP_BODY_TIMEOUT_SECONDS",
        default_value_t = 30.0
    )]
    pub body_seconds: f64,
}

impl Default for HttpTimeouts {
    /// 10 s for the headers, 30 s for the body.
    fn default() -> Self {
        Self {
            header_seconds: 10.0,
            body_seconds: 30.0,
        }
    }
}

impl HttpTimeouts {
    /// Checks what clap cannot: both deadlines are positive and finite.
    pub fn validate(&self) -> Result<(), String> {
        for (flag, value) in [
            ("--http-header-timeout-seconds", self.header_seconds),
            ("--http-body-timeout-seconds", self.body_seconds),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{flag} must be a positive number of seconds"));
            }
        }
        Ok(())
    }

    /// The header deadline (at least 1 ms).
    pub fn header(&self) -> Duration {
        seconds(self.header_seconds)
    }

    /// The body deadline (at least 1 ms).
    pub fn body(&self) -> Duration {
        seconds(self.body_seconds)
    }
}

fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value)
        .unwrap_or(Duration::MAX)
        .max(Duration::from_millis(1))
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the open requests finish. Each
/// connection gets `header_timeout` to send each request's head.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    header_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener,
{
    // Dropped when shutdown starts: every connection then finishes its request and closes.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    // Each connection holds a receiver: serving ends when the last one is gone.
    let (done_tx, done_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let (stop, done) = (stop_rx.clone(), done_rx.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let mut stop = stop;
            tokio::select! {
                result = conn.as_mut() => log_end(result),
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    log_end(conn.await);
                }
            }
            drop(done);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// Logs why a connection ended, when it was an error (a client that timed out or went away).
fn log_end(result: Result<(), hyper::Error>) {
    if let Err(err) = result {
        tracing::debug!("connection ended: {err}");
    }
}

/// Middleware: the request's body must arrive within `limit` of its headers; a handler that reads it too
/// late answers 408 instead, and the connection closes.
pub async fn body_deadline(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    let late = Arc::new(AtomicBool::new(false));
    let flag = late.clone();
    let request = request.map(|body| Body::new(DeadlineBody::new(body, limit, flag)));
    let response = next.run(request).await;
    if late.load(Ordering::SeqCst) {
        return request_timeout(limit);
    }
    response
}

/// The 408 answer of a body that did not arrive in time; the connection closes after it.
fn request_timeout(limit: Duration) -> Response {
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request-timeout",
        "Request timeout",
        format!(
            "the request body did not arrive within {} s of its headers",
            limit.as_secs_f64()
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The error a request body ends with when it is late.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

/// A request body that fails with [`BodyTimedOut`] once its deadline passes, and says so in a flag.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    late: Arc<AtomicBool>,
}

impl DeadlineBody {
    fn new(inner: Body, limit: Duration, late: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            late,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.late.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

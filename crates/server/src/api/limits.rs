//! Per-token rate limits: one token bucket per bearer token, shared by REST requests, GraphQL requests
//! and each GraphQL mutation field, enforced by `tower_governor` in front of the routes (and by the
//! same limiter inside the GraphQL handlers for what one HTTP request cannot show).
//!
//! A bucket is keyed by a keyed hash of the bearer string itself, never by a claim of a token that is
//! not verified yet, so a forged `jti` cannot drain someone else's bucket. Requests without a token
//! share one bucket: they can only be answered 401. Past the limit the answer is 429, a problem
//! document of type `rate-limited`, with `Retry-After` in whole seconds (rounded up).

use std::{hash::BuildHasher as _, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{HeaderValue, Request, Response, StatusCode, header},
    response::IntoResponse,
};
use governor::{clock::Clock as _, middleware::NoOpMiddleware};
use tower_governor::{
    GovernorError,
    governor::{GovernorConfig, GovernorConfigBuilder},
    key_extractor::KeyExtractor,
};

use super::{error::ApiError, extract::bearer_token};

/// How often buckets that have refilled completely are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Rate-limit settings (`serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct RateLimitSettings {
    /// Requests per second one token may make on average: every REST and GraphQL request counts one,
    /// and a GraphQL request with several mutation fields counts one per field. 0: no rate limits.
    #[arg(
        long = "rate-limit-per-second",
        env = "TENANTPLANE_RATE_LIMIT_PER_SECOND",
        default_value_t = 20
    )]
    pub per_second: u32,
    /// Requests one token may make in a burst, on top of the average (the bucket's size).
    #[arg(long = "rate-limit-burst", env = "TENANTPLANE_RATE_LIMIT_BURST", default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
}

impl Default for RateLimitSettings {
    /// `serve`'s defaults: 20 requests per second, bursts of 100.
    fn default() -> Self {
        Self {
            per_second: 20,
            burst: 100,
        }
    }
}

impl RateLimitSettings {
    /// No rate limits (tests and benchmarks that measure something else).
    pub const OFF: Self = Self {
        per_second: 0,
        burst: 1,
    };
}

/// The bucket key of a request: a keyed hash of its bearer token; `None` for requests without one.
#[derive(Debug, Clone, Default)]
pub struct TokenKey {
    hasher: std::hash::RandomState,
}

impl TokenKey {
    /// The key of `token` (`None`: no token).
    pub fn of(&self, token: Option<&str>) -> Option<u64> {
        token.map(|t| self.hasher.hash_one(t))
    }
}

impl KeyExtractor for TokenKey {
    type Key = Option<u64>;

    fn extract<T>(&self, req: &Request<T>) -> Result<Self::Key, GovernorError> {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        Ok(self.of(token))
    }
}

/// The shared limiter of one app.
#[derive(Clone)]
pub struct RateLimits {
    config: Arc<GovernorConfig<TokenKey, NoOpMiddleware>>,
    keys: TokenKey,
    settings: RateLimitSettings,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("settings", &self.settings)
            .finish()
    }
}

/// A request refused by the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Over the limit: retry after this many seconds.
    RetryAfter(u64),
    /// More at once than a bucket holds: never accepted as it is.
    TooLarge(u32),
}

impl RateLimits {
    /// The limiter of `settings`; `None` when they turn rate limits off.
    pub fn new(settings: RateLimitSettings) -> Option<Self> {
        if settings.per_second == 0 {
            return None;
        }
        let keys = TokenKey::default();
        let config = GovernorConfigBuilder::default()
            .period(Duration::from_nanos(
                1_000_000_000 / u64::from(settings.per_second),
            ))
            .burst_size(settings.burst)
            .key_extractor(keys.clone())
            .finish()?;
        Some(Self {
            config: Arc::new(config),
            keys,
            settings,
        })
    }

    /// The middleware that charges every request one, answering 429 past the limit.
    pub fn layer(&self) -> tower_governor::GovernorLayer<TokenKey, NoOpMiddleware, Body> {
        let settings = self.settings;
        tower_governor::GovernorLayer::new(self.config.clone()).error_handler(move |err| match err {
            // `wait_time` is whole seconds, rounded down: one more is never too early.
            GovernorError::TooManyRequests { wait_time, .. } => {
                refusal(settings, Refused::RetryAfter(wait_time + 1))
            }
            other => ApiError::internal(&other.to_string()).into_response(),
        })
    }

    /// The bucket key of `token` (`None`: no token).
    pub fn key(&self, token: Option<&str>) -> Option<u64> {
        self.keys.of(token)
    }

    /// Charges bucket `key` for a request that counts `total`, of which the middleware already charged
    /// `charged` (GraphQL mutation fields; a WebSocket operation, `charged` 0). More than a bucket holds is
    /// [`Refused::TooLarge`] whatever the bucket's level.
    pub fn charge(&self, key: Option<u64>, total: u32, charged: u32) -> Result<(), Refused> {
        if total > self.settings.burst {
            return Err(Refused::TooLarge(total));
        }
        let Some(cost) = std::num::NonZeroU32::new(total.saturating_sub(charged)) else {
            return Ok(());
        };
        let limiter = self.config.limiter();
        match limiter.check_key_n(&key, cost) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
                Err(Refused::RetryAfter(
                    wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                ))
            }
            Err(_) => Err(Refused::TooLarge(total)),
        }
    }

    /// The 429 (or 422) answer of `refused`.
    pub fn refusal(&self, refused: Refused) -> Response<Body> {
        refusal(self.settings, refused)
    }

    /// A one-line description of `refused`, for GraphQL errors on a WebSocket.
    pub fn message(&self, refused: Refused) -> String {
        message(self.settings, refused)
    }

    /// Forgets, every [`SWEEP_EVERY`], the buckets that have refilled: bearer strings that are not
    /// tokens cost memory only until then. Runs until dropped.
    pub async fn sweep(self) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let limiter = self.config.limiter();
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

fn message(settings: RateLimitSettings, refused: Refused) -> String {
    let RateLimitSettings { per_second, burst } = settings;
    match refused {
        Refused::RetryAfter(seconds) => format!(
            "this token made more than {per_second} requests per second (bursts of {burst}); retry in {seconds}s"
        ),
        Refused::TooLarge(cost) => format!(
            "one request may count at most {burst} (this token's burst), and this one counts {cost}: \
             send its mutations in smaller requests"
        ),
    }
}

fn refusal(settings: RateLimitSettings, refused: Refused) -> Response<Body> {
    let detail = message(settings, refused);
    match refused {
        Refused::RetryAfter(seconds) => {
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many requests",
                detail,
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
            response
        }
        Refused::TooLarge(_) => {
            ApiError::invalid(vec![crate::domain::FieldError::new("query", detail)]).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn limits(per_second: u32, burst: u32) -> RateLimits {
        RateLimits::new(RateLimitSettings { per_second, burst }).unwrap()
    }

    #[test]
    fn zero_per_second_turns_limits_off() {
        assert!(RateLimits::new(RateLimitSettings::OFF).is_none());
    }

    #[test]
    fn a_bucket_holds_its_burst_then_names_the_wait_rounded_up() {
        let l = limits(1, 3);
        let key = |t: &str| l.key(Some(t));
        assert_eq!(l.charge(key("a"), 3, 0), Ok(()));
        assert_eq!(l.charge(key("a"), 1, 0), Err(Refused::RetryAfter(1)));
        // What the middleware charged already is not charged again.
        assert_eq!(l.charge(key("a"), 1, 1), Ok(()));
        // Another token has its own bucket; no token is one shared bucket of its own.
        assert_eq!(l.charge(key("b"), 3, 0), Ok(()));
        assert_eq!(l.charge(l.key(None), 3, 0), Ok(()));
        assert_eq!(l.charge(None, 1, 0), Err(Refused::RetryAfter(1)));
        // More than a bucket holds is never accepted, even from a full bucket.
        assert_eq!(l.charge(key("c"), 4, 1), Err(Refused::TooLarge(4)));
        assert_eq!(l.charge(key("c"), 3, 0), Ok(()));
        assert_ne!(key("a"), key("b"));
    }

    #[test]
    fn a_refusal_is_a_429_problem_with_retry_after() {
        let response = limits(20, 100).refusal(Refused::RetryAfter(2));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let too_large = limits(20, 100).refusal(Refused::TooLarge(101));
        assert_eq!(too_large.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
}

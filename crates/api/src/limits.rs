//! Rate limits per token subject and per tenant: every authenticated REST and GraphQL request counts one,
//! and each GraphQL mutation field one more (over HTTP and WebSocket), against two token buckets at once:
//! its subject's (the tenant and the token's `sub`, shared by every token minted for it) and its tenant's
//! (shared by all its tokens; platform admins share one). Minting more tokens adds no budget.
//!
//! A bucket is keyed by what a verified token says, never by a claim of a token that is not verified
//! yet, so a forged claim cannot drain someone else's bucket: requests are charged once authenticated.
//! Requests without a token, or whose token is refused, are charged to a bucket of their bearer string (a
//! keyed hash of it; all requests without one share a bucket), so a client sending the same bad token
//! again and again is answered 429 too. Past a limit the answer is 429, a problem document of type
//! `rate-limited`, with `Retry-After` in whole seconds (rounded up). Buckets live in each process: with
//! several replicas, a subject's budget is per replica.

use std::{hash::BuildHasher as _, num::NonZeroU32, sync::Arc, time::Duration};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock as _};
use uuid::Uuid;

use super::error::ApiError;
use tenantplane_service::auth::Principal;

/// How often buckets that have refilled completely are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Rate-limit settings (`serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct RateLimitSettings {
    /// Requests per second one token subject (a tenant's tokens minted for one `sub`) may make on
    /// average: every REST and GraphQL request counts one, and a GraphQL request with several mutation
    /// fields counts one per field. 0: no rate limits.
    #[arg(
        long = "rate-limit-per-second",
        env = "TENANTPLANE_RATE_LIMIT_PER_SECOND",
        default_value_t = 20
    )]
    pub per_second: u32,
    /// Requests one token subject may make in a burst, on top of the average (the bucket's size).
    #[arg(long = "rate-limit-burst", env = "TENANTPLANE_RATE_LIMIT_BURST", default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
    /// Requests per second all the tokens of one tenant may make on average, whatever their subjects.
    #[arg(long = "rate-limit-tenant-per-second", env = "TENANTPLANE_RATE_LIMIT_TENANT_PER_SECOND",
        default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub tenant_per_second: u32,
    /// Requests all the tokens of one tenant may make in a burst (the tenant bucket's size).
    #[arg(long = "rate-limit-tenant-burst", env = "TENANTPLANE_RATE_LIMIT_TENANT_BURST",
        default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub tenant_burst: u32,
}

impl Default for RateLimitSettings {
    /// `serve`'s defaults: 20 requests per second and bursts of 100 per subject, 50 and 250 per tenant.
    fn default() -> Self {
        Self {
            per_second: 20,
            burst: 100,
            tenant_per_second: 50,
            tenant_burst: 250,
        }
    }
}

impl RateLimitSettings {
    /// No rate limits (tests and benchmarks that measure something else).
    pub const OFF: Self = Self {
        per_second: 0,
        burst: 1,
        tenant_per_second: 1,
        tenant_burst: 1,
    };
}

/// Which bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The token subject's.
    Subject,
    /// The tenant's.
    Tenant,
    /// The bucket of a bearer string that is no valid token (or of requests without one).
    Unauthenticated,
}

/// A request refused by the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Over the limit of a bucket: retry after this many seconds.
    RetryAfter(u64, Scope),
    /// More at once than a bucket holds: never accepted as it is.
    TooLarge(u32),
}

/// One kind of bucket: a keyed limiter.
type Buckets<K> = Arc<DefaultKeyedRateLimiter<K>>;

/// The shared limiter of one app.
#[derive(Clone)]
pub struct RateLimits {
    subjects: Buckets<u64>,
    tenants: Buckets<Option<Uuid>>,
    unauthenticated: Buckets<Option<u64>>,
    hasher: std::hash::RandomState,
    settings: RateLimitSettings,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("settings", &self.settings)
            .finish()
    }
}

/// `per_second` on average, bursts of `burst`.
fn quota(per_second: u32, burst: u32) -> Option<Quota> {
    let period = Duration::from_nanos(1_000_000_000 / u64::from(per_second.max(1)));
    Some(Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst)?))
}

impl RateLimits {
    /// The limiter of `settings`; `None` when they turn rate limits off.
    pub fn new(settings: RateLimitSettings) -> Option<Self> {
        if settings.per_second == 0 {
            return None;
        }
        let subject = quota(settings.per_second, settings.burst)?;
        let tenant = quota(settings.tenant_per_second, settings.tenant_burst)?;
        Some(Self {
            subjects: Arc::new(RateLimiter::keyed(subject)),
            tenants: Arc::new(RateLimiter::keyed(tenant)),
            unauthenticated: Arc::new(RateLimiter::keyed(subject)),
            hasher: std::hash::RandomState::new(),
            settings,
        })
    }

    /// The most one request may count: the smaller bucket's size.
    fn largest(&self) -> u32 {
        self.settings.burst.min(self.settings.tenant_burst)
    }

    /// Charges `who`'s subject and tenant buckets for a request that counts `total`, of which `charged`
    /// was charged already (when it was authenticated). More than a bucket holds is
    /// [`Refused::TooLarge`] whatever the buckets' levels.
    pub fn charge(&self, who: &Principal, total: u32, charged: u32) -> Result<(), Refused> {
        if total > self.largest() {
            return Err(Refused::TooLarge(total));
        }
        let Some(cost) = NonZeroU32::new(total.saturating_sub(charged)) else {
            return Ok(());
        };
        let subject = self.hasher.hash_one((who.tenant_id, who.subject.as_str()));
        take(&self.subjects, &subject, cost, Scope::Subject)?;
        take(&self.tenants, &who.tenant_id, cost, Scope::Tenant)
    }

    /// Charges one to the bucket of a request whose bearer string `token` is no valid token (`None`: it
    /// had none).
    pub fn charge_unauthenticated(&self, token: Option<&str>) -> Result<(), Refused> {
        let key = token.map(|t| self.hasher.hash_one(t));
        take(
            &self.unauthenticated,
            &key,
            NonZeroU32::MIN,
            Scope::Unauthenticated,
        )
    }

    /// The 429 (or 422) problem of `refused`.
    pub fn refusal(&self, refused: Refused) -> ApiError {
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
            self.subjects.retain_recent();
            self.subjects.shrink_to_fit();
            self.tenants.retain_recent();
            self.tenants.shrink_to_fit();
            self.unauthenticated.retain_recent();
            self.unauthenticated.shrink_to_fit();
        }
    }
}

/// Takes `cost` from bucket `key` of `buckets`; how long to wait when it holds less.
fn take<K: Clone + std::hash::Hash + Eq>(
    buckets: &DefaultKeyedRateLimiter<K>,
    key: &K,
    cost: NonZeroU32,
    scope: Scope,
) -> Result<(), Refused> {
    match buckets.check_key_n(key, cost) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(not_until)) => {
            let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
            Err(Refused::RetryAfter(
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                scope,
            ))
        }
        Err(_) => Err(Refused::TooLarge(cost.get())),
    }
}

fn message(settings: RateLimitSettings, refused: Refused) -> String {
    let RateLimitSettings {
        per_second,
        burst,
        tenant_per_second,
        tenant_burst,
    } = settings;
    match refused {
        Refused::RetryAfter(seconds, Scope::Subject) => format!(
            "this token's subject made more than {per_second} requests per second (bursts of {burst}) with \
             all its tokens; retry in {seconds}s"
        ),
        Refused::RetryAfter(seconds, Scope::Tenant) => format!(
            "this tenant's tokens made more than {tenant_per_second} requests per second (bursts of \
             {tenant_burst}); retry in {seconds}s"
        ),
        Refused::RetryAfter(seconds, Scope::Unauthenticated) => format!(
            "this bearer token was refused more than {per_second} times per second (bursts of {burst}); \
             retry in {seconds}s"
        ),
        Refused::TooLarge(cost) => format!(
            "one request may count at most {} (the smaller of the subject's and the tenant's bursts), and \
             this one counts {cost}: send its mutations in smaller requests",
            burst.min(tenant_burst)
        ),
    }
}

fn refusal(settings: RateLimitSettings, refused: Refused) -> ApiError {
    let detail = message(settings, refused);
    match refused {
        Refused::RetryAfter(seconds, _) => ApiError::rate_limited(detail, seconds.max(1)),
        Refused::TooLarge(_) => ApiError::invalid(vec![crate::domain::FieldError::new("query", detail)]),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use axum::{
        http::{StatusCode, header},
        response::IntoResponse as _,
    };
    use chrono::Utc;

    use super::*;
    use crate::domain::Role;

    fn limits(burst: u32, tenant_burst: u32) -> RateLimits {
        RateLimits::new(RateLimitSettings {
            per_second: 1,
            burst,
            tenant_per_second: 1,
            tenant_burst,
        })
        .unwrap()
    }

    fn who(tenant: Option<Uuid>, subject: &str) -> Principal {
        Principal {
            jti: Uuid::new_v4(),
            tenant_id: tenant,
            role: Role::TenantAdmin,
            subject: subject.into(),
            expires_at: Utc::now(),
            external: false,
        }
    }

    #[test]
    fn zero_per_second_turns_limits_off() {
        assert!(RateLimits::new(RateLimitSettings::OFF).is_none());
    }

    #[test]
    fn tokens_of_one_subject_share_a_bucket_and_subjects_share_their_tenants() {
        let l = limits(2, 3);
        let (t, other) = (Some(Uuid::new_v4()), Some(Uuid::new_v4()));
        // Two tokens (two jtis) of one subject: one bucket of two.
        assert_eq!(l.charge(&who(t, "ci"), 1, 0), Ok(()));
        assert_eq!(l.charge(&who(t, "ci"), 1, 0), Ok(()));
        assert_eq!(
            l.charge(&who(t, "ci"), 1, 0),
            Err(Refused::RetryAfter(1, Scope::Subject))
        );
        // Another subject has a bucket of its own, but the tenant's holds one more only.
        assert_eq!(l.charge(&who(t, "ops"), 1, 0), Ok(()));
        assert_eq!(
            l.charge(&who(t, "ops"), 1, 0),
            Err(Refused::RetryAfter(1, Scope::Tenant))
        );
        // The same subject name in another tenant is another subject, in another tenant.
        assert_eq!(l.charge(&who(other, "ci"), 2, 0), Ok(()));
        // What was charged already is not charged again; more than the smaller bucket never passes.
        assert_eq!(l.charge(&who(other, "ci"), 1, 1), Ok(()));
        assert_eq!(l.charge(&who(None, "root"), 3, 0), Err(Refused::TooLarge(3)));
    }

    #[test]
    fn refused_bearer_strings_have_buckets_of_their_own() {
        let l = limits(2, 10);
        assert_eq!(l.charge_unauthenticated(Some("junk")), Ok(()));
        assert_eq!(l.charge_unauthenticated(Some("junk")), Ok(()));
        assert_eq!(
            l.charge_unauthenticated(Some("junk")),
            Err(Refused::RetryAfter(1, Scope::Unauthenticated))
        );
        assert_eq!(l.charge_unauthenticated(Some("other")), Ok(()));
        assert_eq!(l.charge_unauthenticated(None), Ok(()));
    }

    #[test]
    fn a_refusal_is_a_429_problem_with_retry_after() {
        let response = limits(100, 100)
            .refusal(Refused::RetryAfter(2, Scope::Tenant))
            .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let too_large = limits(100, 100).refusal(Refused::TooLarge(101)).into_response();
        assert_eq!(too_large.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
}

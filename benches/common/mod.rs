//! What the benches share: the size they run at (`TENANTPLANE_BENCH_SIZE`) and the failures that make a
//! run exit non-zero. Each bench includes it with `mod common;` and uses part of it.

#![allow(dead_code, reason = "each bench uses part of this module")]

use std::sync::Mutex;

/// How much a bench does: `TENANTPLANE_BENCH_SIZE=smoke` (seconds, for `make test`; its figures mean
/// nothing) or `full` (the default: the documented bench).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Seconds: every scenario runs, at a size that only shows it works.
    Smoke,
    /// The documented bench.
    Full,
}

impl Size {
    /// The size `TENANTPLANE_BENCH_SIZE` names; anything but `smoke` or `full` stops the bench.
    pub fn from_env() -> Self {
        match std::env::var("TENANTPLANE_BENCH_SIZE").as_deref() {
            Ok("smoke") => Self::Smoke,
            Ok("full") | Err(_) => Self::Full,
            Ok(other) => panic!("TENANTPLANE_BENCH_SIZE={other}: expected smoke or full"),
        }
    }

    /// `smoke` at smoke size, else `full`.
    pub fn pick<T>(self, smoke: T, full: T) -> T {
        match self {
            Self::Smoke => smoke,
            Self::Full => full,
        }
    }
}

/// A number from the environment variable `name` (a bench's own knob), else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a number")),
        Err(_) => default,
    }
}

/// What went wrong in a run, each naming its scenario: printed at the end by [`exit_if_failed`].
static FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records a failure of `scenario`; the run goes on and exits 1 at [`exit_if_failed`].
pub fn fail(scenario: &str, what: impl std::fmt::Display) {
    let line = format!("{scenario}: {what}");
    eprintln!("FAILED: {line}");
    FAILURES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(line);
}

/// Fails `scenario` when it measured nothing (`samples` is 0); true when it has samples.
pub fn measured(scenario: &str, samples: usize) -> bool {
    if samples == 0 {
        fail(scenario, "measured nothing (no samples)");
    }
    samples > 0
}

/// Exits 1, listing every failure, when the run had any.
pub fn exit_if_failed() {
    let failures = FAILURES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !failures.is_empty() {
        eprintln!("the bench failed:\n- {}", failures.join("\n- "));
        std::process::exit(1);
    }
}

/// The value of `result`, or a panic naming `scenario` and the error (a failed step cannot be measured).
#[track_caller]
pub fn ok<T, E: std::fmt::Display>(result: Result<T, E>, scenario: &str) -> T {
    result.unwrap_or_else(|e| panic!("{scenario}: {e}"))
}

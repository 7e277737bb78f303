//! Lock metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo feature
//! `metrics`; without it every hook here is an empty function the compiler removes).
//!
//! Install any recorder (a Prometheus exporter, StatsD...) in the application; lockkit then
//! reports, in seconds and totals as Prometheus names them:
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `lockkit_acquire_attempt_duration_seconds` | histogram | `mode`, `outcome` | one acquire attempt's round trip |
//! | `lockkit_acquire_attempts_total` | counter | `mode`, `outcome` (`acquired`, `busy`, `error`), `kind` (errors) | attempts by outcome, errors by [`ErrorKind`](crate::ErrorKind) |
//! | `lockkit_time_to_acquire_seconds` | histogram | `mode` | from an `acquire`'s first attempt to holding the lock, retries included |
//! | `lockkit_hold_duration_seconds` | histogram | `mode` | from acquiring to releasing a lock |
//! | `lockkit_locks_lost_total` | counter | `mode`, `reason` | locks found lost: `release_not_held`, `release_held_by_other`, `extend_not_held`, `extend_held_by_other`, `watchdog_expired`, `watchdog_stolen`, `watchdog_unreachable`, `watchdog_max_hold` |
//! | `lockkit_noscript_recoveries_total` | counter | | script calls that met `NOSCRIPT` and were re-sent with the script |
//! | `lockkit_redlock_node_errors_total` | counter | `node`, `kind` | Redlock node calls that failed (also after the vote was decided), by node and error kind |
//! | `lockkit_redlock_votes_skipped_total` | counter | `node` | Redlock votes not sent because the node's circuit breaker was open (each a failed vote) |
//!
//! `mode` is the locker's [`Locker::mode`](crate::Locker::mode) (`standalone`, `cluster`,
//! `proxy`, `redlock`); `node` is a Redlock node's URL with its password redacted (as many
//! values as nodes). Keys are never labels (unbounded); they are on the `tracing` spans
//! (`lockkit.acquire`, `lockkit.attempt`, `lockkit.release`, `lockkit.extend`) instead.
//!
//! Series exist before their first event, as Prometheus advises (a rate or an alert on lost
//! locks then works from the start): a mode's series are exported at zero from its first acquire
//! attempt, a Redlock node's skipped votes from connect. Only series labelled by error `kind`
//! appear with their first error. Install the recorder before connecting: what is recorded
//! before a recorder exists is dropped.

use std::future::Future;
use std::time::Duration;
#[cfg(feature = "metrics")]
use std::time::Instant;

#[cfg(feature = "metrics")]
use futures_util::FutureExt;
use tracing::Instrument;

#[cfg(feature = "metrics")]
use crate::error::Error;
use crate::error::Result;
use crate::lock::{ExtendOutcome, Lock, LossReason, ReleaseOutcome};

/// Registers the descriptions and units of every lockkit metric with the installed recorder
/// (optional: metrics are recorded without it; exporters then show no `# HELP` lines).
///
/// ```
/// lockkit::metrics::describe(); // no recorder installed: nothing happens
/// ```
#[cfg(feature = "metrics")]
pub fn describe() {
    use ::metrics::{describe_counter, describe_histogram, Unit};
    describe_histogram!(
        "lockkit_acquire_attempt_duration_seconds",
        Unit::Seconds,
        "One lock acquire attempt's round trip, by outcome"
    );
    describe_counter!(
        "lockkit_acquire_attempts_total",
        "Lock acquire attempts by outcome (acquired, busy, error) and error kind"
    );
    describe_histogram!(
        "lockkit_time_to_acquire_seconds",
        Unit::Seconds,
        "From an acquire's first attempt to holding the lock, retries included"
    );
    describe_histogram!(
        "lockkit_hold_duration_seconds",
        Unit::Seconds,
        "From acquiring a lock to releasing it"
    );
    describe_counter!(
        "lockkit_locks_lost_total",
        "Locks found lost (expired or taken by another holder), by reason"
    );
    describe_counter!(
        "lockkit_noscript_recoveries_total",
        "Script calls that met NOSCRIPT and were re-sent with the script"
    );
    describe_counter!(
        "lockkit_redlock_node_errors_total",
        "Redlock node calls that failed, by node and error kind"
    );
    describe_counter!(
        "lockkit_redlock_votes_skipped_total",
        "Redlock votes not sent because the node's circuit breaker was open, by node"
    );
}

// These wrappers return their futures instead of being `async fn`s that take one: an `async fn`
// keeps a future it is given both as its argument and as the future it awaits, so every such
// layer doubled the size of the lock's futures, and moving them cost more CPU than any other
// part of an uncontended cycle.

/// Runs one acquire attempt of `key` inside a `lockkit.attempt` span, timed and counted.
pub(crate) fn observe_attempt<'a>(
    mode: &'static str,
    key: &str,
    attempt: impl Future<Output = Result<Option<Lock>>> + 'a,
) -> impl Future<Output = Result<Option<Lock>>> + 'a {
    let span = tracing::debug_span!("lockkit.attempt", key);
    observed(span, attempt, move |result, latency| {
        self::attempt(mode, result, latency)
    })
}

/// Runs the release of `lock` inside a `lockkit.release` span; counts its hold time and a loss.
pub(crate) fn observe_release<'a>(
    mode: &'static str,
    lock: &'a Lock,
    release: impl Future<Output = Result<ReleaseOutcome>> + 'a,
) -> impl Future<Output = Result<ReleaseOutcome>> + 'a {
    let span = tracing::debug_span!("lockkit.release", key = %lock.key);
    observed(span, release, move |result, _| released(mode, lock, result))
}

/// Runs an extend of `key` inside a `lockkit.extend` span; counts a loss.
pub(crate) fn observe_extend<'a>(
    mode: &'static str,
    key: &str,
    extend: impl Future<Output = Result<ExtendOutcome>> + 'a,
) -> impl Future<Output = Result<ExtendOutcome>> + 'a {
    let span = tracing::debug_span!("lockkit.extend", key);
    observed(span, extend, move |result, _| extended(mode, result))
}

/// Runs `op` inside `span`, then hands its result and how long it took to `record`.
#[cfg(feature = "metrics")]
fn observed<'a, T>(
    span: tracing::Span,
    op: impl Future<Output = T> + 'a,
    record: impl FnOnce(&T, Duration) + 'a,
) -> impl Future<Output = T> + 'a {
    let start = Instant::now();
    in_span(span, op).map(move |result| {
        record(&result, start.elapsed());
        result
    })
}

/// Without the `metrics` feature nothing is recorded: `op` inside `span`, with no extra layer
/// (each layer around a lock operation's future is one more copy of it per call), and not even
/// the span's when no subscriber wants it.
#[cfg(not(feature = "metrics"))]
fn observed<'a, T>(
    span: tracing::Span,
    op: impl Future<Output = T> + 'a,
    record: impl FnOnce(&T, Duration) + 'a,
) -> impl Future<Output = T> + 'a {
    let _ = record;
    in_span(span, op)
}

/// `op` inside `span`, or `op` alone when the span is disabled (no subscriber wants it): then
/// no span is entered and left at every poll.
pub(crate) fn in_span<F: Future>(
    span: tracing::Span,
    op: F,
) -> futures_util::future::Either<tracing::instrument::Instrumented<F>, F> {
    use futures_util::future::Either;
    if span.is_disabled() {
        Either::Right(op)
    } else {
        Either::Left(op.instrument(span))
    }
}

/// The modes whose series are registered at their first attempt (see [`register`]).
#[cfg(feature = "metrics")]
const MODES: [&str; 4] = ["standalone", "cluster", "proxy", "redlock"];

/// The `reason` label of `lockkit_locks_lost_total`, every value.
#[cfg(feature = "metrics")]
const LOST_REASONS: [&str; 8] = [
    "release_not_held",
    "release_held_by_other",
    "extend_not_held",
    "extend_held_by_other",
    "watchdog_expired",
    "watchdog_stolen",
    "watchdog_unreachable",
    "watchdog_max_hold",
];

/// Registers, once per mode, every series a locker of `mode` can have, at zero: Prometheus's
/// advice is to export a series before its first event, so that `rate()` and alerts on lost
/// locks work from the start instead of from the first loss. (Series labelled by error kind or
/// by Redlock node appear with their first event; a node's skipped votes at connect.)
#[cfg(feature = "metrics")]
fn register(mode: &'static str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: [AtomicBool; MODES.len()] = [const { AtomicBool::new(false) }; MODES.len()];
    let Some(i) = MODES.iter().position(|m| *m == mode) else {
        return;
    };
    if DONE[i].swap(true, Ordering::Relaxed) {
        return;
    }
    // `increment(0)` and a histogram handle create the series without changing a value that a
    // concurrent first event may already have recorded.
    for outcome in ["acquired", "busy", "error"] {
        let _ = ::metrics::histogram!("lockkit_acquire_attempt_duration_seconds", "mode" => mode, "outcome" => outcome);
    }
    for outcome in ["acquired", "busy"] {
        ::metrics::counter!("lockkit_acquire_attempts_total", "mode" => mode, "outcome" => outcome)
            .increment(0);
    }
    let _ = ::metrics::histogram!("lockkit_time_to_acquire_seconds", "mode" => mode);
    let _ = ::metrics::histogram!("lockkit_hold_duration_seconds", "mode" => mode);
    for reason in LOST_REASONS {
        ::metrics::counter!("lockkit_locks_lost_total", "mode" => mode, "reason" => reason)
            .increment(0);
    }
    ::metrics::counter!("lockkit_noscript_recoveries_total").increment(0);
}

/// One acquire attempt ended.
fn attempt(mode: &'static str, result: &Result<Option<Lock>>, latency: Duration) {
    #[cfg(feature = "metrics")]
    {
        register(mode);
        let outcome = match result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "busy",
            Err(_) => "error",
        };
        ::metrics::histogram!("lockkit_acquire_attempt_duration_seconds", "mode" => mode, "outcome" => outcome)
            .record(latency.as_secs_f64());
        match result {
            Err(e) => ::metrics::counter!("lockkit_acquire_attempts_total", "mode" => mode, "outcome" => outcome, "kind" => e.kind().as_str())
                .increment(1),
            Ok(_) => ::metrics::counter!("lockkit_acquire_attempts_total", "mode" => mode, "outcome" => outcome)
                .increment(1),
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (mode, result, latency);
}

/// An `acquire` (with retries) got its lock after `waited`.
pub(crate) fn acquired(mode: &'static str, waited: Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!("lockkit_time_to_acquire_seconds", "mode" => mode)
        .record(waited.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (mode, waited);
}

/// A release ended: the hold time when it answered, and a lost lock when it was not ours.
fn released(mode: &'static str, lock: &Lock, result: &Result<ReleaseOutcome>) {
    #[cfg(feature = "metrics")]
    {
        if result.is_ok() {
            ::metrics::histogram!("lockkit_hold_duration_seconds", "mode" => mode)
                .record(lock.acquired_at.elapsed().as_secs_f64());
        }
        let reason = match result {
            Ok(ReleaseOutcome::NotHeld) => "release_not_held",
            Ok(ReleaseOutcome::HeldByOther) => "release_held_by_other",
            _ => return,
        };
        lost(mode, reason);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (mode, lock, result);
}

/// An extend ended: a lost lock when it was not ours any more.
fn extended(mode: &'static str, result: &Result<ExtendOutcome>) {
    #[cfg(feature = "metrics")]
    {
        let reason = match result {
            Ok(ExtendOutcome::NotHeld) => "extend_not_held",
            Ok(ExtendOutcome::HeldByOther) => "extend_held_by_other",
            _ => return,
        };
        lost(mode, reason);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (mode, result);
}

/// A guard's watchdog found its lock lost.
pub(crate) fn watchdog_lost(mode: &'static str, reason: LossReason) {
    #[cfg(feature = "metrics")]
    lost(
        mode,
        match reason {
            LossReason::Expired => "watchdog_expired",
            LossReason::Stolen => "watchdog_stolen",
            LossReason::Unreachable => "watchdog_unreachable",
            LossReason::MaxHoldReached => "watchdog_max_hold",
        },
    );
    #[cfg(not(feature = "metrics"))]
    let _ = (mode, reason);
}

#[cfg(feature = "metrics")]
fn lost(mode: &'static str, reason: &'static str) {
    ::metrics::counter!("lockkit_locks_lost_total", "mode" => mode, "reason" => reason)
        .increment(1);
}

/// A script call met `NOSCRIPT` and is re-sent with the script.
pub(crate) fn noscript_recovery() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!("lockkit_noscript_recoveries_total").increment(1);
}

/// A Redlock node call to `node` (its redacted URL) failed, before or after the vote was decided.
pub(crate) fn redlock_node_error(node: &str, error: &crate::error::Error) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        "lockkit_redlock_node_errors_total",
        "node" => node.to_string(),
        "kind" => Error::kind(error).as_str()
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (node, error);
}

/// A Redlock node joined: its skipped votes are exported from zero.
pub(crate) fn redlock_node_added(node: &str) {
    #[cfg(feature = "metrics")]
    votes_skipped(node).increment(0);
    #[cfg(not(feature = "metrics"))]
    let _ = node;
}

/// A Redlock vote of `node` was not sent: its circuit breaker was open.
pub(crate) fn redlock_vote_skipped(node: &str) {
    #[cfg(feature = "metrics")]
    votes_skipped(node).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = node;
}

#[cfg(feature = "metrics")]
fn votes_skipped(node: &str) -> ::metrics::Counter {
    ::metrics::counter!("lockkit_redlock_votes_skipped_total", "node" => node.to_string())
}

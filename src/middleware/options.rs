//! The layer's settings: TTL, watchdog, refusals, failure mode, body limit, idempotency.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::error::{Error, Result};
use crate::options::{validate_ttl, LockOptions, WatchdogOptions};

/// What the layer does when Redis cannot be asked (connection refused, timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Refuse the request with the `unavailable` response (503 by default). The default: a
    /// duplicate order is usually worse than a failed one the client can retry.
    #[default]
    Closed,
    /// Let the request through unguarded (no lock, no idempotency), and log a warning.
    Open,
}

/// A response the layer answers with by itself: status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) content_type: HeaderValue,
    pub(crate) body: Bytes,
}

impl Rejection {
    /// A plain-text response.
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        Rejection {
            status,
            content_type: HeaderValue::from_static("text/plain; charset=utf-8"),
            body: Bytes::from(body.into()),
        }
    }

    /// A JSON response (`body` must already be JSON text).
    pub fn json(status: StatusCode, body: impl Into<String>) -> Self {
        Rejection {
            status,
            content_type: HeaderValue::from_static("application/json"),
            body: Bytes::from(body.into()),
        }
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

/// Optional replay of a stored response to retries that carry the same `Idempotency-Key`.
///
/// A request with the header first *claims* its key in Redis (a lock on
/// `{prefix}:claim:{user}:{digest of the key}` with the layer's TTL, taken with `SET NX` before
/// the handler runs). The claim is renewed every third of its TTL for as long as the handler
/// runs, whether or not the layer has a watchdog (a configured watchdog's interval and
/// `max_hold` apply to it). While the claim is held, every other request with that key gets
/// [`in_flight_response`](Self::in_flight_response) (409), whatever its body. When the handler has answered, the response is written once, with `SET NX`, to
/// `{prefix}:idem:{user}:{digest of the key}` for [`ttl`](Self::ttl) (24 h by default), and only
/// then is the claim released: a later retry with the same request gets the stored response, a
/// retry with another method, path, query or body gets
/// [`mismatch_response`](Self::mismatch_response) (422).
///
/// What is stored: the status, the headers (without hop-by-hop ones, `content-length` and
/// `set-cookie`) and the whole body, plus a digest of the request as its fingerprint. Only 2xx
/// responses are stored by default ([`also_store`](Self::also_store) adds others).
///
/// Which outcomes free the key (the module docs have the whole table):
/// - a stored response: the record is kept, the claim freed;
/// - any other status below 500 (a refusal: 400, 401, 408, 409, 429, …): the claim is freed,
///   so a client that fixes its request and retries with the same key is served afresh;
/// - a 5xx, a panic (answered 500), an error of the inner service, a client that went away
///   while the handler ran: the side effect may have happened, so the claim is kept until its
///   TTL runs out (retries meanwhile get 409), then a retry runs the handler again;
///   [`free_on_server_error`](Self::free_on_server_error) frees it at once instead;
/// - a response that should be stored but cannot be (Redis refused or did not answer the
///   write, a body of unknown size or over [`max_response_bytes`](Self::max_response_bytes)):
///   the claim is kept until its TTL runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct IdempotencyOptions {
    pub(crate) header: HeaderName,
    pub(crate) ttl: Duration,
    pub(crate) max_response_bytes: usize,
    pub(crate) in_flight: Rejection,
    pub(crate) mismatch: Rejection,
    pub(crate) also_stored: Vec<StatusCode>,
    pub(crate) free_on_server_error: bool,
}

impl Default for IdempotencyOptions {
    fn default() -> Self {
        IdempotencyOptions {
            header: HeaderName::from_static("idempotency-key"),
            ttl: Duration::from_secs(24 * 3600),
            max_response_bytes: 1024 * 1024,
            in_flight: Rejection::text(
                StatusCode::CONFLICT,
                "A request with this Idempotency-Key is still being processed; retry after \
                 it has been answered.\n",
            ),
            mismatch: Rejection::text(
                StatusCode::UNPROCESSABLE_ENTITY,
                "This Idempotency-Key was already used for a different request.\n",
            ),
            also_stored: Vec::new(),
            free_on_server_error: false,
        }
    }
}

impl IdempotencyOptions {
    /// `Idempotency-Key`, responses kept 24 h, at most 1 MiB each, 409 while in flight, 422
    /// for a key reused with another request.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// The request header that carries the key (default `idempotency-key`); keys of 1 to
        /// [`MAX_IDEMPOTENCY_KEY_LEN`](super::MAX_IDEMPOTENCY_KEY_LEN) bytes are accepted.
        header: HeaderName => header;

        /// How long a stored response is replayed (default 24 h).
        ttl: Duration => ttl;

        /// The largest response body that is stored (default 1 MiB).
        max_response_bytes: usize => max_response_bytes;
    }

    /// Also store and replay responses with this status (default: only 2xx are stored).
    ///
    /// For a refusal that is final for this request, e.g. a 422 from a business rule that no
    /// retry of the same payload can pass. A refusal the client can fix and retry (400, 401,
    /// 408, 409, 429) is better left out: stored, it would be replayed to the corrected retry.
    pub fn also_store(mut self, status: StatusCode) -> Self {
        if !self.also_stored.contains(&status) {
            self.also_stored.push(status);
        }
        self
    }

    /// Whether a response with this status is stored for replay.
    pub(crate) fn stores(&self, status: StatusCode) -> bool {
        status.is_success() || self.also_stored.contains(&status)
    }

    setters! {
        /// Free the key at once when the handler answers 5xx, panics, fails, or its client goes
        /// away (default `false`: the claim is kept until its TTL runs out, since the side effect
        /// may have happened, and retries meanwhile get 409). Turn it on for handlers that undo
        /// their side effects before they fail, so a retry runs them again at once.
        free_on_server_error: bool => free_on_server_error;

        /// The answer to a request whose key is claimed by a request still in flight (default
        /// 409 Conflict, plain text).
        in_flight_response: Rejection => in_flight;

        /// The answer to a key reused with another request (default 422 Unprocessable Content,
        /// plain text).
        mismatch_response: Rejection => mismatch;
    }
}

/// Settings of a [`DuplicateSubmitLayer`](super::DuplicateSubmitLayer).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct DuplicateSubmitOptions {
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) watchdog: Option<WatchdogOptions>,
    pub(crate) fail_mode: FailMode,
    pub(crate) body_limit: usize,
    pub(crate) busy: Rejection,
    pub(crate) unavailable: Rejection,
    pub(crate) too_large: Rejection,
    pub(crate) idempotency: Option<IdempotencyOptions>,
}

impl Default for DuplicateSubmitOptions {
    fn default() -> Self {
        DuplicateSubmitOptions {
            prefix: "lockkit:submit".into(),
            ttl: Duration::from_secs(5),
            watchdog: None,
            fail_mode: FailMode::Closed,
            body_limit: 1024 * 1024,
            busy: Rejection::text(
                StatusCode::TOO_MANY_REQUESTS,
                "An identical request is already being processed; wait for its response \
                 before retrying.\n",
            ),
            unavailable: Rejection::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "Duplicate-submit protection is unavailable; please retry shortly.\n",
            ),
            too_large: Rejection::text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The request body is larger than this endpoint accepts.\n",
            ),
            idempotency: None,
        }
    }
}

impl DuplicateSubmitOptions {
    /// The defaults: prefix `lockkit:submit`, TTL 5 s, no watchdog, fail-closed (503), 1 MiB
    /// body limit, 429 for a duplicate, no idempotency.
    pub fn new() -> Self {
        Self::default()
    }

    /// The prefix of every key the layer writes (default `lockkit:submit`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    setters! {
        /// The lock's TTL (default 5 s): how long a request that died without releasing (process
        /// killed) blocks its duplicates. Size it above the handler's p99, or turn on the watchdog.
        ttl: Duration => ttl;

        /// Renew the lock while the handler runs (for handlers that may outlast the TTL). A lost
        /// lock is told to the handler through the [`LossSignal`](crate::LossSignal) in its
        /// request's extensions.
        watchdog: Option<WatchdogOptions> => watchdog;

        /// What to do when Redis is unavailable (default [`FailMode::Closed`]).
        fail_mode: FailMode => fail_mode;

        /// The largest request body buffered (default 1 MiB); larger ones get `too_large` (413).
        body_limit: usize => body_limit;

        /// The answer to a duplicate of a request still in flight (default 429, plain text).
        busy_response: Rejection => busy;

        /// The answer when Redis is unavailable and the mode is fail-closed (default 503).
        unavailable_response: Rejection => unavailable;

        /// The answer to a body over the limit (default 413).
        too_large_response: Rejection => too_large;

        /// Store first responses and replay them to retries with the same idempotency key.
        idempotency: Option<IdempotencyOptions> => idempotency;
    }

    /// Checks every field; says which one is wrong and why.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] naming the field.
    pub fn validate(&self) -> Result<()> {
        self.lock_options().map(drop)
    }

    /// Checks every field, and gives the options every request's lock is taken with.
    pub(crate) fn lock_options(&self) -> Result<LockOptions> {
        if self.prefix.is_empty() {
            return Err(Error::invalid(
                "prefix",
                "must not be empty; keys need a namespace",
            ));
        }
        if self.prefix.len() > 256 {
            return Err(Error::invalid("prefix", "must be at most 256 bytes"));
        }
        // The lock is taken with the library's default drift allowance; a TTL that the allowance
        // eats whole gives a lock born expired, refused on every request (503 for everything).
        let lock = LockOptions::new(self.ttl)?;
        if let Some(w) = &self.watchdog {
            w.validate(self.ttl)?;
        }
        if self.body_limit == 0 {
            return Err(Error::invalid("body_limit", "must be greater than zero"));
        }
        if let Some(i) = &self.idempotency {
            validate_ttl("idempotency.ttl", i.ttl)?;
            if i.max_response_bytes == 0 {
                return Err(Error::invalid(
                    "idempotency.max_response_bytes",
                    "must be greater than zero",
                ));
            }
        }
        Ok(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::invalid_field;

    #[test]
    fn defaults_are_valid() {
        DuplicateSubmitOptions::new().validate().unwrap();
        DuplicateSubmitOptions::new()
            .idempotency(Some(IdempotencyOptions::new()))
            .watchdog(Some(WatchdogOptions::new()))
            .validate()
            .unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        let field = |o: DuplicateSubmitOptions| invalid_field(o.validate());
        assert_eq!(field(DuplicateSubmitOptions::new().prefix("")), "prefix");
        assert_eq!(
            field(DuplicateSubmitOptions::new().ttl(Duration::ZERO)),
            "ttl"
        );
        assert_eq!(
            field(DuplicateSubmitOptions::new().body_limit(0)),
            "body_limit"
        );
        assert_eq!(
            field(
                DuplicateSubmitOptions::new()
                    .ttl(Duration::from_secs(1))
                    .watchdog(Some(
                        WatchdogOptions::new().interval(Duration::from_secs(2))
                    ))
            ),
            "watchdog.interval"
        );
        assert_eq!(
            field(
                DuplicateSubmitOptions::new()
                    .idempotency(Some(IdempotencyOptions::new().ttl(Duration::ZERO)))
            ),
            "idempotency.ttl"
        );
    }

    #[test]
    fn only_2xx_are_stored_unless_chosen() {
        let default = IdempotencyOptions::new();
        for ok in [200, 201, 202, 204, 299] {
            assert!(default.stores(StatusCode::from_u16(ok).unwrap()), "{ok}");
        }
        for refused in [301, 400, 401, 404, 408, 409, 422, 429, 500, 503] {
            assert!(
                !default.stores(StatusCode::from_u16(refused).unwrap()),
                "{refused}"
            );
        }
        let chosen = IdempotencyOptions::new()
            .also_store(StatusCode::UNPROCESSABLE_ENTITY)
            .also_store(StatusCode::UNPROCESSABLE_ENTITY);
        assert!(chosen.stores(StatusCode::UNPROCESSABLE_ENTITY));
        assert!(!chosen.stores(StatusCode::BAD_REQUEST));
        assert_eq!(chosen.also_stored.len(), 1);
    }

    #[test]
    fn ttl_inside_the_drift_allowance_is_refused() {
        // 2 ms: the lock's drift allowance (0.01 x TTL + 2 ms) leaves no validity, so every
        // acquire would be refused and every request answered 503.
        for ms in [1, 2] {
            match DuplicateSubmitOptions::new()
                .ttl(Duration::from_millis(ms))
                .validate()
            {
                Err(Error::InvalidOptions { field, reason }) => {
                    assert_eq!(field, "ttl");
                    assert!(reason.contains("drift"), "{reason}");
                }
                other => panic!("{ms} ms: expected InvalidOptions, got {other:?}"),
            }
        }
        DuplicateSubmitOptions::new()
            .ttl(Duration::from_millis(3))
            .validate()
            .unwrap();
    }
}

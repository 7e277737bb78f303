//! The `Idempotency-Key` flow: claim the key, look for a stored response, run the handler
//! (the claim renewed meanwhile), store its response with `SET NX`, then free the claim or keep
//! it until its TTL, as the outcome says (see [`IdempotencyOptions`]).

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use tower_service::Service;

use super::idempotency::StoredResponse;
use super::key::{request_fingerprint, segment, short_digest, Target};
use super::options::{DuplicateSubmitOptions, FailMode, IdempotencyOptions, Rejection};
use super::service::{
    admit, rejection, release, run, tell_handler, Admission, BoxError, Config, Ran,
};
use crate::guard::LockGuard;

/// The response header set on a replayed response.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";

/// The longest idempotency key accepted, in bytes; a longer (or empty) one is refused with 400.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// A request that carries an idempotency key: where its claim and its record live.
pub(super) struct IdemRequest<'a> {
    opts: &'a IdempotencyOptions,
    /// The lock taken while the request is in flight.
    claim: String,
    /// The stored response.
    record: String,
    /// What a retry must match to be answered from the record.
    fingerprint: String,
}

impl<'a> IdemRequest<'a> {
    /// The request's claim and record keys, when idempotency is on and the header present; a
    /// header that is empty or too long is refused (400).
    ///
    /// A request whose user is unknown is served without idempotency: its key cannot be told
    /// apart from another unknown client's, and a stored response must never reach another
    /// client.
    pub(super) fn of(
        options: &'a DuplicateSubmitOptions,
        parts: &Parts,
        user: Option<&str>,
        target: &Target,
        body: &[u8],
    ) -> Result<Option<IdemRequest<'a>>, Rejection> {
        let Some(opts) = options.idempotency.as_ref() else {
            return Ok(None);
        };
        let Some(value) = parts.headers.get(&opts.header) else {
            return Ok(None);
        };
        let Some(user) = user else {
            tracing::debug!("unknown user: the idempotency key is ignored (no replay)");
            return Ok(None);
        };
        let raw = value.as_bytes();
        if raw.is_empty() || raw.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(Rejection::text(
                StatusCode::BAD_REQUEST,
                format!(
                    "The {} header must be 1 to {} bytes long.\n",
                    opts.header, MAX_IDEMPOTENCY_KEY_LEN
                ),
            ));
        }
        let scope = format!(
            "{}:{}:{}",
            segment(&target.host),
            segment(user),
            short_digest(raw)
        );
        Ok(Some(IdemRequest {
            opts,
            claim: format!("{}:claim:{scope}", options.prefix),
            record: format!("{}:idem:{scope}", options.prefix),
            fingerprint: request_fingerprint(parts.method.as_str(), target, body),
        }))
    }

    /// The stored response if this request matches it, else the mismatch answer.
    fn answer<B: From<Bytes>>(&self, stored: StoredResponse) -> Response<B> {
        if stored.fingerprint != self.fingerprint {
            tracing::debug!(record = %self.record, "idempotency key reused with another request");
            return rejection(&self.opts.mismatch);
        }
        tracing::debug!(record = %self.record, status = %stored.status, "replaying the stored response");
        let mut resp = Response::new(B::from(stored.body));
        *resp.status_mut() = stored.status;
        *resp.headers_mut() = stored.headers;
        resp.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        resp
    }
}

/// Serves a request that carries an idempotency key (see [`IdempotencyOptions`]).
pub(super) async fn idempotent<S, ReqBody, ResBody>(
    config: &Config,
    inner: S,
    parts: Parts,
    body: Bytes,
    idem: IdemRequest<'_>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
    ResBody: Body<Data = Bytes> + From<Bytes>,
    ResBody::Error: Into<BoxError>,
{
    // Renewed while the handler runs, with or without a watchdog for the layer's locks: a claim
    // that expired under a running handler would let a retry run it a second time.
    let watchdog = config.options.watchdog.unwrap_or_default();
    let claim = match admit(config, &idem.claim, Some(watchdog)).await {
        Admission::Guarded(g) => Some(g),
        // Fail-open with Redis unavailable: run unguarded, nothing stored.
        Admission::Unguarded => None,
        Admission::Busy => return Ok(in_flight_or_stored(config, &idem).await),
        Admission::Refused(r) => return Ok(rejection(&r)),
    };
    if claim.is_some() {
        // The claim is ours; a request that held it before may have answered already.
        match config.store.get(&idem.record).await {
            Ok(Some(stored)) => {
                release(claim, &idem.claim).await;
                return Ok(idem.answer(stored));
            }
            Ok(None) => {}
            Err(e) if config.options.fail_mode == FailMode::Closed => {
                tracing::warn!(record = %idem.record, error = %e, "idempotency store unavailable; refusing (fail-closed)");
                release(claim, &idem.claim).await;
                return Ok(rejection(&config.options.unavailable));
            }
            Err(e) => {
                tracing::warn!(record = %idem.record, error = %e, "idempotency store unavailable; running under the claim (fail-open)");
            }
        }
    }

    let mut parts = parts;
    tell_handler(&mut parts, claim.as_ref());
    // From here on the handler may act; if the client goes away, this future is dropped.
    let claim = Claim {
        guard: claim,
        key: &idem.claim,
        keep_on_failure: !idem.opts.free_on_server_error,
    };
    let req = Request::from_parts(parts, ReqBody::from(body));
    let response = match run(inner, req, &idem.claim).await {
        Ran::Answered(r) if idem.opts.stores(r.status()) => r,
        Ran::Answered(r) if !r.status().is_server_error() => {
            // A refusal: nothing to replay; the corrected retry may run.
            claim.free().await;
            return Ok(r);
        }
        other => {
            // A 5xx, a panic, a failed service: the side effect may have happened.
            claim.after_failure().await;
            return other.into_result();
        }
    };
    if claim.guard.is_none() {
        // Fail-open, unguarded: nothing is stored.
        return Ok(response);
    }
    let (response, stored) = store(config, &idem, response).await;
    if stored {
        claim.free().await;
    } else {
        // The handler ran but its response is not kept: a retry must not run it again, so the
        // claim stays until its TTL runs out (retries meanwhile get 409).
        claim.keep();
    }
    Ok(response)
}

/// The claim of an idempotency key while its handler runs, until the outcome says whether to
/// free it or keep it until its TTL. `guard` is `None` when running unguarded (fail-open).
struct Claim<'a> {
    guard: Option<LockGuard>,
    key: &'a str,
    /// After a 5xx, a panic, a failed service, or when dropped before an outcome (the client
    /// went away mid-handler): keep the key claimed until its TTL instead of freeing it (the
    /// opposite of [`IdempotencyOptions::free_on_server_error`]).
    keep_on_failure: bool,
}

impl Claim<'_> {
    /// Releases the claim: a retry may run the handler.
    async fn free(mut self) {
        release(self.guard.take(), self.key).await;
    }

    /// Stops renewing and leaves the claim to run out its TTL: retries meanwhile get 409.
    fn keep(mut self) {
        if let Some(g) = self.guard.take() {
            let _ = g.into_lock();
        }
    }

    /// After a 5xx, a panic or a failed service: kept, unless the options free it.
    async fn after_failure(self) {
        if self.keep_on_failure {
            tracing::debug!(claim = %self.key, "the handler failed after it may have acted; the key stays claimed until its TTL");
            self.keep();
        } else {
            self.free().await;
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            if self.keep_on_failure {
                tracing::debug!(claim = %self.key, "the request was dropped mid-handler; the key stays claimed until its TTL");
                let _ = g.into_lock();
            }
            // Otherwise the guard's own drop frees the key in the background.
        }
    }
}

/// The answer to a request whose key is claimed: the stored response if the claim holder has
/// just written it, else 409.
async fn in_flight_or_stored<B: From<Bytes>>(
    config: &Config,
    idem: &IdemRequest<'_>,
) -> Response<B> {
    match config.store.get(&idem.record).await {
        Ok(Some(stored)) => idem.answer(stored),
        Ok(None) => rejection(&idem.opts.in_flight),
        Err(e) => {
            tracing::debug!(record = %idem.record, error = %e, "could not look for a stored response; the key is claimed");
            rejection(&idem.opts.in_flight)
        }
    }
}

/// Buffers and stores the response; hands it on either way. `true` when a record for the key
/// is in Redis afterwards (ours, or one written first by another request that held the key
/// after our claim expired: never replaced).
async fn store<B>(
    config: &Config,
    idem: &IdemRequest<'_>,
    response: Response<B>,
) -> (Response<B>, bool)
where
    B: Body<Data = Bytes> + From<Bytes>,
    B::Error: Into<BoxError>,
{
    let fits = response
        .body()
        .size_hint()
        .upper()
        .is_some_and(|n| n <= idem.opts.max_response_bytes as u64);
    if !fits {
        tracing::warn!(record = %idem.record, "response body too large or of unknown size; not stored, the key stays claimed until its TTL");
        return (response, false);
    }
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(record = %idem.record, error = %e, "the response body failed; answering 500, the key stays claimed until its TTL");
            return (super::service::internal_error(), false);
        }
    };
    let record = StoredResponse {
        status: parts.status,
        fingerprint: idem.fingerprint.clone(),
        headers: parts.headers.clone(),
        body: bytes.clone(),
    };
    let stored = match config
        .store
        .put_new(&idem.record, &record, idem.opts.ttl)
        .await
    {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(record = %idem.record, "another request stored a response for this key first (this one outlived its claim); kept the first");
            true
        }
        Err(e) => {
            tracing::warn!(record = %idem.record, error = %e, "could not store the response; the key stays claimed until its TTL");
            false
        }
    };
    (Response::from_parts(parts, B::from(bytes)), stored)
}

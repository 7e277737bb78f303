//! The layer and its service: buffer the body, derive the key, take the lock, run the handler,
//! release.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::request::Parts;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tower_layer::Layer;
use tower_service::Service;

use super::idempotency::{IdempotencyStore, StoredResponse};
use super::key::{segment, short_digest, DefaultKeyBuilder, HeaderUser, KeyBuilder, KeyInput};
use super::key::{UserExtractor, ANONYMOUS};
use super::options::{DuplicateSubmitOptions, FailMode, IdempotencyOptions, Rejection};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::{LockClient, Locker};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response header set on a replayed response.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";

struct Config {
    client: LockClient,
    options: DuplicateSubmitOptions,
    users: Arc<dyn UserExtractor>,
    keys: Arc<dyn KeyBuilder>,
    store: IdempotencyStore,
}

/// A tower [`Layer`] that lets one request per key run at a time (see the
/// [module docs](super)).
#[derive(Clone)]
pub struct DuplicateSubmitLayer {
    config: Arc<Config>,
}

impl fmt::Debug for DuplicateSubmitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DuplicateSubmitLayer")
            .field("target", &self.config.client.target())
            .field("options", &self.config.options)
            .finish_non_exhaustive()
    }
}

impl DuplicateSubmitLayer {
    /// A layer over `client` with the default user extractor ([`HeaderUser`]: `x-user-id`,
    /// then the client address) and key builder ([`DefaultKeyBuilder`]).
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] naming the field, when `options` do not validate.
    pub fn new(client: LockClient, options: DuplicateSubmitOptions) -> Result<Self> {
        options.validate()?;
        Ok(DuplicateSubmitLayer {
            config: Arc::new(Config {
                store: IdempotencyStore::new(client.clone()),
                client,
                options,
                users: Arc::new(HeaderUser::default()),
                keys: Arc::new(DefaultKeyBuilder),
            }),
        })
    }

    /// Replaces the user extractor.
    #[must_use]
    pub fn user_extractor(self, users: impl UserExtractor) -> Self {
        self.rebuild(|c| c.users = Arc::new(users))
    }

    /// Replaces the key builder.
    #[must_use]
    pub fn key_builder(self, keys: impl KeyBuilder) -> Self {
        self.rebuild(|c| c.keys = Arc::new(keys))
    }

    fn rebuild(self, change: impl FnOnce(&mut Config)) -> Self {
        let c = &self.config;
        let mut config = Config {
            client: c.client.clone(),
            options: c.options.clone(),
            users: Arc::clone(&c.users),
            keys: Arc::clone(&c.keys),
            store: c.store.clone(),
        };
        change(&mut config);
        DuplicateSubmitLayer {
            config: Arc::new(config),
        }
    }
}

impl<S> Layer<S> for DuplicateSubmitLayer {
    type Service = DuplicateSubmit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DuplicateSubmit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service [`DuplicateSubmitLayer`] wraps around a handler.
#[derive(Clone)]
pub struct DuplicateSubmit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: fmt::Debug> fmt::Debug for DuplicateSubmit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DuplicateSubmit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for DuplicateSubmit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The ready service goes with this call; a fresh clone stays behind (tower's rule).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        Box::pin(handle(config, inner, req))
    }
}

/// What the lock step decided.
enum Admission {
    Guarded(LockGuard),
    Unguarded,
    Refused(Rejection),
}

async fn handle<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    req: Request<ReqBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: Body<Data = Bytes> + From<Bytes>,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + From<Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let opts = &config.options;
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, opts.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(rejection(&opts.too_large));
        }
        Err(e) => {
            tracing::debug!(error = %e, "could not read the request body");
            let r = Rejection::text(
                StatusCode::BAD_REQUEST,
                "Could not read the request body.\n",
            );
            return Ok(rejection(&r));
        }
    };
    let user = config
        .users
        .user(&parts)
        .unwrap_or_else(|| ANONYMOUS.to_string());
    let key = config.keys.key(&KeyInput {
        prefix: &opts.prefix,
        user: &user,
        parts: &parts,
        body: &body,
    });
    let Some(key) = key else {
        return inner.call(Request::from_parts(parts, body.into())).await;
    };
    let idem = match idempotency_key(opts.idempotency.as_ref(), &parts, &opts.prefix, &user) {
        Ok(k) => k,
        Err(r) => return Ok(rejection(&r)),
    };

    let guard = match admit(&config, &key).await {
        Admission::Guarded(g) => Some(g),
        Admission::Unguarded => None,
        Admission::Refused(r) => return Ok(rejection(&r)),
    };
    // From here the guard is owned by this future: if the client disconnects, the future is
    // dropped and the guard's drop releases the lock in the background.

    let idem = match (&guard, idem) {
        (Some(_), Some((record_key, idem_opts))) => match config.store.get(&record_key).await {
            Ok(Some(stored)) if stored.fingerprint == key => {
                release(guard, &key).await;
                return Ok(replay(stored, &key));
            }
            Ok(Some(_)) => {
                release(guard, &key).await;
                let r = Rejection::text(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "This Idempotency-Key was already used for a different request.\n",
                );
                return Ok(rejection(&r));
            }
            Ok(None) => Some((record_key, idem_opts)),
            Err(e) if opts.fail_mode == FailMode::Closed => {
                tracing::warn!(%key, error = %e, "idempotency store unavailable; refusing (fail-closed)");
                release(guard, &key).await;
                return Ok(rejection(&opts.unavailable));
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "idempotency store unavailable; running without replay (fail-open)");
                None
            }
        },
        _ => None,
    };

    let req = Request::from_parts(parts, ReqBody::from(body));
    let outcome = AssertUnwindSafe(inner.call(req)).catch_unwind().await;
    let response = match outcome {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            release(guard, &key).await;
            return Err(e);
        }
        Err(panic) => {
            tracing::error!(%key, panic = panic_message(&panic), "the handler panicked; lock released, answering 500");
            release(guard, &key).await;
            let r = Rejection::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal server error.\n",
            );
            return Ok(rejection(&r));
        }
    };
    let response = match idem {
        Some((record_key, idem_opts)) => {
            store_response(&config.store, &record_key, &key, idem_opts, response).await
        }
        None => response,
    };
    release(guard, &key).await;
    Ok(response)
}

/// Takes the lock, or says why not.
async fn admit(config: &Config, key: &str) -> Admission {
    let opts = &config.options;
    let unavailable = |e: &Error| match opts.fail_mode {
        FailMode::Closed => {
            tracing::warn!(%key, error = %e, "redis unavailable; refusing the request (fail-closed)");
            Admission::Refused(opts.unavailable.clone())
        }
        FailMode::Open => {
            tracing::warn!(%key, error = %e, "redis unavailable; letting the request through unguarded (fail-open)");
            Admission::Unguarded
        }
    };
    match config.client.try_acquire(key, opts.ttl).await {
        Ok(Some(lock)) => match config.client.guard(lock.clone(), opts.watchdog) {
            Ok(g) => Admission::Guarded(g),
            Err(e) => {
                // Options were validated up front, so this is not expected; do not leak the lock.
                let _ = config.client.release(&lock).await;
                unavailable(&e)
            }
        },
        Ok(None) => {
            tracing::debug!(%key, "duplicate of a request in flight; refused");
            Admission::Refused(opts.busy.clone())
        }
        Err(e) => unavailable(&e),
    }
}

async fn release(guard: Option<LockGuard>, key: &str) {
    if let Some(g) = guard {
        match g.release().await {
            Ok(outcome) if !outcome.is_released() => {
                tracing::warn!(%key, ?outcome, "the lock had already expired when the response was ready; raise the TTL or enable the watchdog");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(%key, error = %e, "release failed; the lock expires after its TTL")
            }
        }
    }
}

/// The idempotency record key for this request, when the feature is on and the header present.
fn idempotency_key<'a>(
    idem: Option<&'a IdempotencyOptions>,
    parts: &Parts,
    prefix: &str,
    user: &str,
) -> Result<Option<(String, &'a IdempotencyOptions)>, Rejection> {
    let Some(o) = idem else { return Ok(None) };
    let Some(value) = parts.headers.get(&o.header) else {
        return Ok(None);
    };
    let raw = value.as_bytes();
    if raw.is_empty() || raw.len() > o.max_key_len {
        return Err(Rejection::text(
            StatusCode::BAD_REQUEST,
            format!(
                "The {} header must be 1 to {} bytes long.\n",
                o.header, o.max_key_len
            ),
        ));
    }
    let record = format!("{prefix}:idem:{}:{}", segment(user), short_digest(raw));
    Ok(Some((record, o)))
}

fn replay<B: From<Bytes>>(stored: StoredResponse, key: &str) -> Response<B> {
    tracing::debug!(%key, status = %stored.status, "replaying the stored response");
    let mut resp = Response::new(B::from(stored.body));
    *resp.status_mut() = stored.status;
    *resp.headers_mut() = stored.headers;
    resp.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    resp
}

/// Stores a response that is worth replaying and can be buffered; hands it on either way.
async fn store_response<B>(
    store: &IdempotencyStore,
    record_key: &str,
    fingerprint: &str,
    idem: &IdempotencyOptions,
    response: Response<B>,
) -> Response<B>
where
    B: Body<Data = Bytes> + From<Bytes>,
    B::Error: Into<BoxError>,
{
    if response.status().is_server_error() {
        return response;
    }
    let fits = response
        .body()
        .size_hint()
        .upper()
        .is_some_and(|n| n <= idem.max_response_bytes as u64);
    if !fits {
        tracing::warn!(key = %fingerprint, "response body too large or of unknown size; not stored for idempotent replay");
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(key = %fingerprint, error = %e, "the response body failed; answering 500");
            let r = Rejection::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal server error.\n",
            );
            return rejection(&r);
        }
    };
    let record = StoredResponse {
        status: parts.status,
        fingerprint: fingerprint.to_string(),
        headers: parts.headers.clone(),
        body: bytes.clone(),
    };
    if let Err(e) = store.put(record_key, &record, idem.ttl).await {
        tracing::warn!(key = %fingerprint, error = %e, "could not store the response for idempotent replay");
    }
    Response::from_parts(parts, B::from(bytes))
}

fn rejection<B: From<Bytes>>(r: &Rejection) -> Response<B> {
    let mut resp = Response::new(B::from(r.body.clone()));
    *resp.status_mut() = r.status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, r.content_type.clone());
    resp
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

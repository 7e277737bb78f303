//! The layer and its service: buffer the body, derive the key, take the lock, run the handler,
//! release.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::{header, Extensions, Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tower_layer::Layer;
use tower_service::Service;

use super::idempotency::IdempotencyStore;
use super::key::ANONYMOUS;
use super::key::{DefaultKeyBuilder, HeaderUser, KeyBuilder, KeyInput, Target, UserExtractor};
use super::options::{DuplicateSubmitOptions, FailMode, Rejection};
use super::replay::{idempotent, IdemRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::{LockClient, LockOptions, Locker, WatchdogOptions};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

type UriFn = dyn Fn(&Extensions) -> Option<Uri> + Send + Sync;

pub(super) struct Config {
    pub(super) client: LockClient,
    pub(super) options: DuplicateSubmitOptions,
    /// The options every request's lock is taken with, checked once when the layer is built.
    lock: LockOptions,
    users: Arc<dyn UserExtractor>,
    keys: Arc<dyn KeyBuilder>,
    original_uri: Arc<UriFn>,
    pub(super) store: IdempotencyStore,
}

/// The URI before a router stripped a prefix from it, where the router keeps one.
fn default_original_uri(ext: &Extensions) -> Option<Uri> {
    #[cfg(feature = "axum")]
    if let Some(uri) = ext.get::<axum::extract::OriginalUri>() {
        return Some(uri.0.clone());
    }
    let _ = ext;
    None
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
        let lock = options.lock_options()?;
        Ok(DuplicateSubmitLayer {
            config: Arc::new(Config {
                store: IdempotencyStore::new(client.clone()),
                client,
                options,
                lock,
                users: Arc::new(HeaderUser::default()),
                keys: Arc::new(DefaultKeyBuilder),
                original_uri: Arc::new(default_original_uri),
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

    /// Where to find the request's original URI when a router strips a prefix from the one the
    /// layer sees (axum's `nest`). Keys and fingerprints use its path, so the same request to
    /// `/v1/orders` and `/v2/orders` is two requests.
    ///
    /// The default reads axum's `OriginalUri` with the cargo feature `axum`, and nothing without
    /// it (the URI as the layer sees it). Routers that strip nothing need no setting.
    #[must_use]
    pub fn original_uri<F>(self, f: F) -> Self
    where
        F: Fn(&Extensions) -> Option<Uri> + Send + Sync + 'static,
    {
        self.rebuild(|c| c.original_uri = Arc::new(f))
    }

    /// Reads the original URI from an extension of type `E` that dereferences to a `Uri`, such
    /// as axum's `OriginalUri`, without lockkit depending on the framework that defines it:
    /// `layer.original_uri_from::<axum::extract::OriginalUri>()`.
    #[must_use]
    pub fn original_uri_from<E>(self) -> Self
    where
        E: Deref<Target = Uri> + Send + Sync + 'static,
    {
        self.original_uri(|ext| ext.get::<E>().map(|u| Uri::clone(u)))
    }

    fn rebuild(self, change: impl FnOnce(&mut Config)) -> Self {
        let c = &self.config;
        let mut config = Config {
            client: c.client.clone(),
            options: c.options.clone(),
            lock: c.lock,
            users: Arc::clone(&c.users),
            keys: Arc::clone(&c.keys),
            original_uri: Arc::clone(&c.original_uri),
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
pub(super) enum Admission {
    Guarded(LockGuard),
    /// Redis unavailable and the mode is fail-open.
    Unguarded,
    /// Someone else holds the key, or the lock came back with too little validity left.
    Busy,
    Refused(Rejection),
}

async fn handle<S, ReqBody, ResBody>(
    config: Arc<Config>,
    inner: S,
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
    let user = config.users.user(&parts);
    let original = (config.original_uri)(&parts.extensions);
    let target = Target::of(&parts, original.as_ref());
    // An idempotency key decides first: the key builder only says which requests share a
    // duplicate lock, and a builder that skips a route must not switch replay off on it.
    match IdemRequest::of(opts, &parts, user.as_deref(), &target, &body) {
        Err(r) => return Ok(rejection(&r)),
        Ok(Some(idem)) => return idempotent(&config, inner, parts, body, idem).await,
        Ok(None) => {}
    }
    let key = config.keys.key(&KeyInput {
        prefix: &opts.prefix,
        user: user.as_deref().unwrap_or(ANONYMOUS),
        parts: &parts,
        body: &body,
        host: &target.host,
        path: &target.path,
        query: &target.query,
    });
    let Some(key) = key else {
        let mut inner = inner;
        return inner.call(Request::from_parts(parts, body.into())).await;
    };

    let guard = match admit(&config, &key, opts.watchdog).await {
        Admission::Guarded(g) => Some(g),
        Admission::Unguarded => None,
        Admission::Busy => {
            tracing::debug!(%key, "duplicate of a request in flight; refused");
            return Ok(rejection(&opts.busy));
        }
        Admission::Refused(r) => return Ok(rejection(&r)),
    };
    // From here the guard is owned by this future: if the client disconnects, the future is
    // dropped and the guard's drop releases the lock in the background.
    let mut parts = parts;
    tell_handler(&mut parts, guard.as_ref());
    let ran = run(inner, Request::from_parts(parts, ReqBody::from(body)), &key).await;
    release(guard, &key).await;
    ran.into_result()
}

/// Takes the lock on `key`, renewed by `watchdog` if any, or says why not.
pub(super) async fn admit(
    config: &Config,
    key: &str,
    watchdog: Option<WatchdogOptions>,
) -> Admission {
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
    match config.client.attempt(key, &config.lock).await {
        Ok(Some(lock)) => match config.client.guard(lock.clone(), watchdog) {
            Ok(g) => Admission::Guarded(g),
            Err(e) => {
                // Options were validated up front, so this is not expected; do not leak the lock.
                let _ = config.client.release(&lock).await;
                unavailable(&e)
            }
        },
        Ok(None) => Admission::Busy,
        // Redis answered, but the lock came back with too little validity (given back at once):
        // not obtained, as when busy. Counting it as Redis unavailable would run the handler
        // without a lock under fail-open.
        Err(e) if e.kind() == ErrorKind::TooLittleValidity => {
            tracing::warn!(%key, error = %e, "the lock came back with too little validity; answering as busy (raise the TTL above the round trip to Redis)");
            Admission::Busy
        }
        Err(e) => unavailable(&e),
    }
}

/// Hands the handler the guard's [`LossSignal`](crate::LossSignal) as a request extension: with
/// a watchdog, it resolves when the lock is lost, so the handler can stop before a duplicate
/// runs beside it.
pub(super) fn tell_handler(parts: &mut http::request::Parts, guard: Option<&LockGuard>) {
    if let Some(g) = guard {
        parts.extensions.insert(g.loss_signal());
    }
}

pub(super) async fn release(guard: Option<LockGuard>, key: &str) {
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

/// How the handler ended.
pub(super) enum Ran<R, E> {
    Answered(R),
    Failed(E),
    Panicked,
}

impl<B: From<Bytes>, E> Ran<Response<B>, E> {
    /// What the layer answers for it (a panic becomes a plain 500).
    pub(super) fn into_result(self) -> Result<Response<B>, E> {
        match self {
            Ran::Answered(r) => Ok(r),
            Ran::Failed(e) => Err(e),
            Ran::Panicked => Ok(internal_error()),
        }
    }
}

/// Calls the inner service, catching a panic (logged with the key).
pub(super) async fn run<S, ReqBody, ResBody>(
    mut inner: S,
    req: Request<ReqBody>,
    key: &str,
) -> Ran<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    match AssertUnwindSafe(inner.call(req)).catch_unwind().await {
        Ok(Ok(resp)) => Ran::Answered(resp),
        Ok(Err(e)) => Ran::Failed(e),
        Err(panic) => {
            tracing::error!(%key, panic = panic_message(&panic), "the handler panicked; answering 500");
            Ran::Panicked
        }
    }
}

pub(super) fn internal_error<B: From<Bytes>>() -> Response<B> {
    rejection(&Rejection::text(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal server error.\n",
    ))
}

pub(super) fn rejection<B: From<Bytes>>(r: &Rejection) -> Response<B> {
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

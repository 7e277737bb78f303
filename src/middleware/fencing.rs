//! Fencing at an HTTP resource: a tower layer that refuses a request whose `Fencing-Token`
//! header is older than one it already accepted for the same resource.
//!
//! A lock holder draws a fencing token with its lock
//! ([`LockClient::try_acquire_fenced`](crate::LockClient::try_acquire_fenced)) and sends it with
//! every write to the service behind this layer. A holder paused past its TTL wakes up after the
//! next holder (with a newer token) wrote, and its write is answered `409 Conflict` without
//! reaching the handler.
//!
//! The highest token is kept per resource (the request's path by default), in this process: put
//! the layer on the one service that owns the resource. Where several instances share it, keep
//! the highest token beside the data instead (`LockClient::fenced_set` for data in Redis, a
//! version column in a database).
//!
//! ```
//! use lockkit::middleware::FencingCheckLayer;
//! let layer = FencingCheckLayer::new();
//! # let _ = layer;
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::{Either, Ready};
use http::{Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

/// The header a writer sends its fencing token in.
pub const FENCING_TOKEN_HEADER: &str = "fencing-token";

/// The token a request was admitted with, in its extensions for the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedFencingToken(pub u64);

/// The highest token accepted per resource, shared by every clone of the layer.
type Highest = Arc<Mutex<HashMap<String, u64>>>;

/// Refuses requests whose `Fencing-Token` is older than the highest accepted for their path:
/// `409 Conflict` for a stale token, `400 Bad Request` for a missing or malformed one.
#[derive(Debug, Clone, Default)]
pub struct FencingCheckLayer {
    highest: Highest,
}

impl FencingCheckLayer {
    /// A layer with nothing accepted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest token accepted for `resource` (a request path), if any.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        lock(&self.highest).get(resource).copied()
    }
}

impl<S> Layer<S> for FencingCheckLayer {
    type Service = FencingCheck<S>;

    fn layer(&self, inner: S) -> FencingCheck<S> {
        FencingCheck {
            inner,
            highest: self.highest.clone(),
        }
    }
}

/// The service of [`FencingCheckLayer`].
#[derive(Debug, Clone)]
pub struct FencingCheck<S> {
    inner: S,
    highest: Highest,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the header says: a token, or why it is refused.
fn token_of<B>(req: &Request<B>) -> Result<u64, &'static str> {
    let value = req
        .headers()
        .get(FENCING_TOKEN_HEADER)
        .ok_or("missing Fencing-Token header\n")?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|t| *t > 0)
        .ok_or("malformed Fencing-Token header: a positive integer expected\n")
}

fn refused<B: From<Bytes>>(status: StatusCode, body: String) -> Response<B> {
    let mut resp = Response::new(B::from(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for FencingCheck<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response<ResBody>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let token = match token_of(&req) {
            Ok(t) => t,
            Err(why) => {
                let resp = refused(StatusCode::BAD_REQUEST, why.to_string());
                return Either::Left(futures_util::future::ready(Ok(resp)));
            }
        };
        {
            let mut highest = lock(&self.highest);
            let seen = highest.entry(req.uri().path().to_string()).or_default();
            if token < *seen {
                let body = format!("stale fencing token {token}: {} was accepted\n", *seen);
                return Either::Left(futures_util::future::ready(Ok(refused(
                    StatusCode::CONFLICT,
                    body,
                ))));
            }
            *seen = token;
        }
        req.extensions_mut().insert(AcceptedFencingToken(token));
        Either::Right(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;

    async fn send(layer: &FencingCheckLayer, path: &str, token: Option<&str>) -> (u16, String) {
        let svc = layer.layer(tower::service_fn(|req: Request<String>| async move {
            let t = req.extensions().get::<AcceptedFencingToken>().unwrap().0;
            let body = Full::new(Bytes::from(format!("wrote with {t}")));
            Ok::<_, std::convert::Infallible>(Response::new(body))
        }));
        let mut req = Request::builder().uri(path);
        if let Some(t) = token {
            req = req.header(FENCING_TOKEN_HEADER, t);
        }
        let resp = svc.oneshot(req.body(String::new()).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_stale_token_is_refused_and_never_reaches_the_handler() {
        let layer = FencingCheckLayer::new();
        assert_eq!(send(&layer, "/doc/7", Some("5")).await.0, 200);
        assert_eq!(send(&layer, "/doc/7", Some("6")).await.0, 200);
        // The holder with token 5 wakes up after 6 wrote.
        let (status, body) = send(&layer, "/doc/7", Some("5")).await;
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("stale fencing token 5"), "{body}");
        // Its own token again, and another resource, are fine.
        assert_eq!(
            send(&layer, "/doc/7", Some("6")).await,
            (200, "wrote with 6".into())
        );
        assert_eq!(send(&layer, "/doc/8", Some("1")).await.0, 200);
        assert_eq!(layer.highest("/doc/7"), Some(6));
    }

    #[tokio::test]
    async fn a_missing_or_malformed_token_is_a_bad_request() {
        let layer = FencingCheckLayer::new();
        for token in [None, Some("abc"), Some("0"), Some("-3")] {
            let (status, body) = send(&layer, "/doc/1", token).await;
            assert_eq!(status, 400, "{token:?}: {body}");
        }
        assert_eq!(layer.highest("/doc/1"), None);
    }
}

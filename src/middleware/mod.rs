//! The duplicate-submit guard: a tower layer that lets one identical request run at a time,
//! across every instance that shares the Redis server (feature `tower`).
//!
//! A user double-clicks "submit order"; two requests land on two instances behind a load
//! balancer. With this layer in front of the handler, the first takes a lock keyed by
//! *user + method + host + full path + digest of query and body*; the second finds it taken and
//! gets `429 Too Many Requests` at once. Other bodies, paths, hosts and users are not blocked.
//!
//! With axum, enable the cargo feature `axum` (it implies `tower`): the defaults then read the
//! path from axum's `OriginalUri` (a router mounted with `nest` strips its prefix from the URI
//! the layer sees, so `/v1/orders` and `/v2/orders` would otherwise be one endpoint) and the
//! client address from `ConnectInfo<SocketAddr>`. Without the feature, lockkit does not depend on
//! axum; [`DuplicateSubmitLayer::original_uri_from`] and [`HeaderUser::client_addr_from`] name
//! those types (or any framework's) instead.
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use lockkit::middleware::{DuplicateSubmitLayer, DuplicateSubmitOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = lockkit::LockClient::connect("redis://127.0.0.1:6379").await?;
//! let guard = DuplicateSubmitLayer::new(client, DuplicateSubmitOptions::new())?;
//! let app: Router = Router::new()
//!     .route("/orders", post(|body: String| async move { body }))
//!     .route_layer(guard);
//! # Ok(()) }
//! ```
//!
//! # What happens to a request
//! 1. The body is buffered once, up to [`DuplicateSubmitOptions::body_limit`] (1 MiB; larger:
//!    413), and later handed to the handler intact.
//! 2. The user comes from the [`UserExtractor`] (default [`HeaderUser`]: the `x-user-id`
//!    header, then the client address). A request with an `Idempotency-Key` (idempotency on)
//!    follows "Idempotent replay" below from here. Otherwise the key comes from the
//!    [`KeyBuilder`] (default [`DefaultKeyBuilder`], see [`request_key`]), over the full
//!    original path and the host; a builder that answers `None` lets the request through
//!    without a lock (replay is not affected: an idempotent request is served by its key).
//! 3. One `SET key token NX PX ttl` (TTL 5 s by default; optionally renewed by the watchdog;
//!    an idempotency claim is always renewed, see below).
//!    Taken by someone else: the busy response (429). Taken, but back with too little validity
//!    left (a TTL not much longer than the round trip to Redis; the lock is given back at once):
//!    also the busy response, logged, since Redis answered. Redis unavailable: fail-closed (503,
//!    the default) or fail-open (run unguarded), logged with `tracing` either way.
//! 4. The handler runs. When it answers, fails or panics (the panic is caught and answered with
//!    500), the lock is released by compare-and-delete *before* the response goes out, so a retry
//!    that follows the response is admitted. If the client disconnects, the request future is
//!    dropped, and the [`LockGuard`](crate::LockGuard)'s drop releases the lock in the background.
//!    A request only ever releases the lock it took itself (its own random token), never one
//!    taken by another request. (An idempotency claim is freed or kept as the table below says.)
//!    While it runs, the handler finds the lock's [`LossSignal`](crate::LossSignal) in the
//!    request's extensions (also for an idempotency claim): with the watchdog on, it resolves
//!    the moment the lock is found lost, so a long handler can stop before a duplicate runs
//!    beside it; without the watchdog it resolves when the lock's validity ends. A claim is
//!    always renewed, so its signal resolves when a renewal finds it lost.
//!
//! # Idempotent replay
//! With [`IdempotencyOptions`] on, a request carrying an `Idempotency-Key` header follows the
//! IETF Idempotency-Key draft, as Stripe's API does. The key, not the body, says which requests
//! are the same (the body lock above is not taken for it):
//!
//! | the key is | the answer |
//! | --- | --- |
//! | new | the key is *claimed* in Redis (`SET NX`, a lock with the layer's TTL) **before** the handler runs; the handler runs, and the claim is renewed every third of its TTL for as long as it does, with or without a watchdog |
//! | claimed by a request in flight | **409 Conflict**, whatever the body ([`IdempotencyOptions::in_flight_response`]) |
//! | answered, same request | the stored status, headers and body, with `idempotency-replayed: true`; the handler does not run |
//! | answered, another method, path, query or body | **422** ([`IdempotencyOptions::mismatch_response`]) |
//!
//! The response is written once with `SET NX` (never over another request's record), kept for
//! 24 h, and only then is the claim released. Only 2xx responses are stored by default
//! ([`IdempotencyOptions::also_store`] adds others). How the handler ended decides whether the
//! key is freed for a retry, or stays claimed until the claim's TTL (the layer's, 5 s by
//! default) runs out, retries meanwhile getting 409:
//!
//! | the handler | stored | the claim | a retry with the same key |
//! | --- | --- | --- | --- |
//! | answered 2xx (or a status chosen with `also_store`), and the record was written | yes, 24 h | freed | the stored response |
//! | answered another status below 500 (a refusal: 400, 401, 408, 409, 429, …) | no | freed | runs the handler (the corrected request is served afresh) |
//! | answered 5xx, panicked (answered 500), or the inner service returned an error | no | kept until its TTL: the side effect may have happened | 409 until then, afterwards runs the handler; with [`IdempotencyOptions::free_on_server_error`] the claim is freed at once and the retry runs |
//! | was cancelled: the client went away, the request future was dropped | no | kept until its TTL, as after a 5xx (freed with `free_on_server_error`) | as after a 5xx |
//! | answered something to store, but it could not be (Redis refused or did not answer the write, a body of unknown size or over 1 MiB) | no | kept until its TTL | 409 until then, afterwards runs the handler |
//!
//! The claim is renewed while the handler runs, so a slow handler is not run a second time by a
//! retry that arrives after one TTL; a claim that is lost all the same (Redis frozen past its
//! TTL, a failover) is told to the handler through the [`LossSignal`](crate::LossSignal).
//! Records are scoped by
//! host and user: another user's identical key is a different key. A request whose user is
//! unknown (no user header, no client address) is served as if it carried no key: it is never
//! answered with a stored response, which could be another client's. Hop-by-hop headers,
//! `content-length` and `set-cookie` are not stored.
//!
//! # Who the user is: the trust model
//! The user decides whose requests can block each other and whose stored responses a retry can
//! get, so it must come from something the client cannot choose. The default [`HeaderUser`]
//! reads the `x-user-id` header, which any client can set to any value: it is trustworthy only
//! behind a gateway that authenticates the caller, sets the header itself and strips it from
//! what clients send. Otherwise pass [`DuplicateSubmitLayer::user_extractor`] a function reading
//! your authenticated user (a session, a verified token's subject). Without the header the user
//! is the client's IP address, which clients behind one NAT or proxy share.
//!
//! # Limitations and caveats
//! - The lock stops *concurrent* duplicates; a duplicate that arrives after the first answered
//!   runs again unless it carries an idempotency key.
//! - The TTL bounds how long a crashed instance blocks duplicates, and also how long a handler
//!   is protected: a handler that outlives the TTL without the watchdog loses its lock (logged
//!   at release). An idempotency claim is renewed while its handler runs; if it is lost all
//!   the same, a retry runs the handler again, and of the two responses the one stored first is
//!   kept and replayed.
//! - A client that disconnects while the handler runs frees its lock in the background: the
//!   handler was cancelled, and a duplicate runs it again. An idempotency claim is kept until
//!   its TTL instead (see the table above).
//! - If the future is dropped while the `SET` is in flight, the `SET` may still land: a
//!   compare-and-delete with its token follows in the background, so the key is not left held
//!   for its TTL (unless Redis stays unreachable for the few seconds that clean-up keeps trying).
//! - A header-supplied user id is what the client says (see the trust model above).
//! - Requests of unknown users share one lock namespace ([`ANONYMOUS`]): two such clients sending
//!   the same request at once block each other.
//!
//! # Fencing at the resource
//! [`FencingCheckLayer`] is the other side of a fencing token: put on the service that owns a
//! resource, it refuses (409) a request whose `Fencing-Token` header is older than one it has
//! accepted for the same path, so a lock holder paused past its TTL cannot write after the
//! next holder did.

mod fencing;
mod idempotency;
mod key;
mod options;
mod replay;
mod service;

pub use fencing::{AcceptedFencingToken, FencingCheck, FencingCheckLayer, FENCING_TOKEN_HEADER};
pub use key::{
    body_digest, request_key, DefaultKeyBuilder, HeaderUser, KeyBuilder, KeyInput, UserExtractor,
    ANONYMOUS,
};
pub use options::{DuplicateSubmitOptions, FailMode, IdempotencyOptions, Rejection};
pub use replay::{MAX_IDEMPOTENCY_KEY_LEN, REPLAYED_HEADER};
pub use service::{DuplicateSubmit, DuplicateSubmitLayer};

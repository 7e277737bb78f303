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
//!    header, then the client address), the key from the [`KeyBuilder`] (default
//!    [`DefaultKeyBuilder`], see [`request_key`]), over the full original path and the host.
//! 3. One `SET key token NX PX ttl` (TTL 5 s by default; optionally renewed by the watchdog).
//!    Taken by someone else: the busy response (429). Redis unavailable: fail-closed (503, the
//!    default) or fail-open (run unguarded), logged with `tracing` either way.
//! 4. The handler runs. When it answers, fails or panics (the panic is caught and answered with
//!    500), the lock is released by compare-and-delete *before* the response goes out, so a retry
//!    that follows the response is admitted. If the client disconnects, the request future is
//!    dropped, and the [`LockGuard`](crate::LockGuard)'s drop releases the lock in the background.
//!    A request only ever releases the lock it took itself (its own random token), never one
//!    taken by another request. While it runs, the handler finds the lock's
//!    [`LossSignal`](crate::LossSignal) in the request's extensions (also for an idempotency
//!    claim): with the watchdog on, it resolves the moment the lock is found lost, so a long
//!    handler can stop before a duplicate runs beside it; without the watchdog it never resolves.
//!
//! # Idempotent replay
//! With [`IdempotencyOptions`] on, a request carrying an `Idempotency-Key` header follows the
//! IETF Idempotency-Key draft, as Stripe's API does. The key, not the body, says which requests
//! are the same (the body lock above is not taken for it):
//!
//! | the key is | the answer |
//! | --- | --- |
//! | new | the key is *claimed* in Redis (`SET NX`, a lock with the layer's TTL, renewed by the watchdog) **before** the handler runs; the handler runs |
//! | claimed by a request in flight | **409 Conflict**, whatever the body ([`IdempotencyOptions::in_flight_response`]) |
//! | answered, same request | the stored status, headers and body, with `idempotency-replayed: true`; the handler does not run |
//! | answered, another method, path, query or body | **422** ([`IdempotencyOptions::mismatch_response`]) |
//!
//! The response is written once with `SET NX` (never over another request's record), kept for
//! 24 h, and only then is the claim released. Only 2xx responses are stored by default
//! ([`IdempotencyOptions::also_store`] adds others): any other status frees the key, so a client
//! that fixes a refused request (400, 401, 408, 409, 429) and retries with the same key is
//! served afresh, and a 5xx is retried.
//! A response that should be stored but cannot be (Redis refused the write or did not answer, a
//! body of unknown size or over 1 MiB) leaves the claim in place until its TTL runs out, so a
//! retry meanwhile gets 409 rather than running the handler a second time. Records are scoped by
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
//!   at release). The same holds for an idempotency claim: once it has expired, a retry runs
//!   the handler again; of the two responses, the one stored first is kept and replayed.
//! - A client that disconnects while the handler runs frees its key (lock or claim) in the
//!   background: the handler was cancelled, and a retry runs it again.
//! - If the future is dropped while the `SET` is in flight, the `SET` may still land: a
//!   compare-and-delete with its token follows in the background, so the key is not left held
//!   for its TTL (unless Redis stays unreachable for the few seconds that clean-up keeps trying).
//! - A header-supplied user id is what the client says (see the trust model above).
//! - Requests of unknown users share one lock namespace ([`ANONYMOUS`]): two such clients sending
//!   the same request at once block each other.

mod idempotency;
mod key;
mod options;
mod replay;
mod service;

pub use key::{
    body_digest, request_key, DefaultKeyBuilder, HeaderUser, KeyBuilder, KeyInput, UserExtractor,
    ANONYMOUS,
};
pub use options::{DuplicateSubmitOptions, FailMode, IdempotencyOptions, Rejection};
pub use replay::{MAX_IDEMPOTENCY_KEY_LEN, REPLAYED_HEADER};
pub use service::{DuplicateSubmit, DuplicateSubmitLayer};

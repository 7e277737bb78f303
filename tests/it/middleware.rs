//! The duplicate-submit layer on an axum Router, against a real redis-server.
//!
//! Handlers that must stay "in flight" wait on a gate the test opens, so no assertion depends on
//! timing: the test knows a request is inside the handler because the handler said so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body_util::BodyExt;
use lockkit::middleware::{
    DuplicateSubmitLayer, DuplicateSubmitOptions, FailMode, IdempotencyOptions, Rejection,
};
use lockkit::{ClientOptions, LockClient, WatchdogOptions};
use lockkit_test_support::{DelayRelay, RedisServer};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::{Layer, ServiceExt};

/// What the handlers report and wait on.
#[derive(Clone)]
struct Probe {
    runs: Arc<AtomicUsize>,
    /// One permit per handler that entered and is waiting (`x-block` requests).
    entered: Arc<Semaphore>,
    /// One permit lets one waiting handler answer (FIFO).
    proceed: Arc<Semaphore>,
}

impl Probe {
    fn new() -> Self {
        Probe {
            runs: Arc::default(),
            entered: Arc::new(Semaphore::new(0)),
            proceed: Arc::new(Semaphore::new(0)),
        }
    }

    async fn wait_entered(&self) {
        let permit = tokio::time::timeout(Duration::from_secs(30), self.entered.acquire())
            .await
            .expect("no handler entered within 30 s")
            .unwrap();
        permit.forget();
    }

    fn let_one_finish(&self) {
        self.proceed.add_permits(1);
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// Creates an "order": answers 201 with the order number in `x-order` and the body echoed.
async fn create(State(p): State<Probe>, headers: HeaderMap, body: Bytes) -> Response {
    let n = p.runs.fetch_add(1, Ordering::SeqCst) + 1;
    if headers.contains_key("x-block") {
        p.entered.add_permits(1);
        p.proceed.acquire().await.unwrap().forget();
    }
    if headers.contains_key("x-panic") {
        panic!("handler panicked on purpose");
    }
    if headers.contains_key("x-fail") {
        return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
    }
    // A refusal the handler decides on, e.g. 400 for an invalid order.
    if let Some(status) = headers.get("x-status") {
        let status = StatusCode::from_bytes(status.as_bytes()).unwrap();
        return (status, [("x-order", n.to_string())], "refused").into_response();
    }
    (StatusCode::CREATED, [("x-order", n.to_string())], body).into_response()
}

async fn client(server: &RedisServer) -> LockClient {
    let opts = ClientOptions::new()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Some(Duration::from_millis(500)))
        .reconnect_retries(1);
    LockClient::connect_with(&server.url(), opts).await.unwrap()
}

async fn app_with(server: &RedisServer, opts: DuplicateSubmitOptions) -> (Router, Probe) {
    let layer = DuplicateSubmitLayer::new(client(server).await, opts).unwrap();
    let probe = Probe::new();
    let app = Router::new()
        .route("/orders", post(create))
        .route("/other", post(create))
        .route_layer(layer)
        .with_state(probe.clone());
    (app, probe)
}

async fn app(server: &RedisServer) -> (Router, Probe) {
    app_with(server, DuplicateSubmitOptions::new()).await
}

fn req(path: &str, user: &str) -> axum::http::request::Builder {
    Request::post(path)
        .header("x-user-id", user)
        .header("content-type", "application/json")
}

fn order(user: &str, body: &str) -> Request<Body> {
    req("/orders", user)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn slow_order(user: &str, body: &str) -> Request<Body> {
    req("/orders", user)
        .header("x-block", "1")
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(app: &Router, req: Request<Body>) -> Answer {
    let resp = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

fn spawn_send(app: &Router, req: Request<Body>) -> tokio::task::JoinHandle<Answer> {
    let app = app.clone();
    tokio::spawn(async move { send(&app, req).await })
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap()
}

fn lock_keys(server: &RedisServer) -> Vec<String> {
    keys(server, "lockkit:submit:*:POST:*")
}

/// Waits (bounded) until no key matches `pattern`: releases in the background, expiries.
async fn until_no_keys(server: &RedisServer, pattern: &str) {
    for _ in 0..500 {
        if keys(server, pattern).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("keys still present: {:?}", keys(server, pattern));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_in_flight_gets_429_and_others_pass() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;

    let first = spawn_send(&app, slow_order("alice", r#"{"sku":"A1","qty":1}"#));
    probe.wait_entered().await;

    let dup = send(&app, slow_order("alice", r#"{"sku":"A1","qty":1}"#)).await;
    assert_eq!(dup.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        dup.text().contains("already being processed"),
        "{}",
        dup.text()
    );
    assert_eq!(dup.headers["content-type"], "text/plain; charset=utf-8");

    // Another body, another user, another path: not blocked.
    let other_body = send(&app, order("alice", r#"{"sku":"A1","qty":2}"#)).await;
    assert_eq!(other_body.status, StatusCode::CREATED);
    let other_user = send(&app, order("bob", r#"{"sku":"A1","qty":1}"#)).await;
    assert_eq!(other_user.status, StatusCode::CREATED);
    let other_path = Request::post("/other")
        .header("x-user-id", "alice")
        .body(Body::from(r#"{"sku":"A1","qty":1}"#))
        .unwrap();
    assert_eq!(send(&app, other_path).await.status, StatusCode::CREATED);

    probe.let_one_finish();
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.text(),
        r#"{"sku":"A1","qty":1}"#,
        "body reaches the handler intact"
    );

    // Released when the response was produced: the same request now passes.
    assert!(lock_keys(&server).is_empty());
    let again = send(&app, order("alice", r#"{"sku":"A1","qty":1}"#)).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(probe.runs(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_concurrent_identical_requests_exactly_one_runs() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;
    let mut set = JoinSet::new();
    for _ in 0..16 {
        let app = app.clone();
        set.spawn(async move { send(&app, slow_order("carol", r#"{"sku":"B2"}"#)).await });
    }
    probe.wait_entered().await;
    // The one inside the handler cannot answer before the gate opens; the 15 others must.
    for _ in 0..15 {
        let a = set.join_next().await.unwrap().unwrap();
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    }
    probe.let_one_finish();
    let last = set.join_next().await.unwrap().unwrap();
    assert_eq!(last.status, StatusCode::CREATED);
    assert_eq!(probe.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_status_and_body_are_configurable() {
    let server = RedisServer::start();
    let busy = Rejection::json(StatusCode::CONFLICT, r#"{"error":"duplicate submit"}"#);
    let (app, probe) = app_with(&server, DuplicateSubmitOptions::new().busy_response(busy)).await;
    let first = spawn_send(&app, slow_order("dave", "{}"));
    probe.wait_entered().await;
    let dup = send(&app, order("dave", "{}")).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert_eq!(dup.headers["content-type"], "application/json");
    assert_eq!(dup.text(), r#"{"error":"duplicate submit"}"#);
    probe.let_one_finish();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_is_released_after_an_error_response_and_after_a_panic() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;

    let failing = req("/orders", "erin")
        .header("x-fail", "1")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        send(&app, failing).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert!(lock_keys(&server).is_empty());

    let panicking = req("/orders", "erin")
        .header("x-panic", "1")
        .body(Body::from("{}"))
        .unwrap();
    let answer = send(&app, panicking).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(lock_keys(&server).is_empty());

    assert_eq!(
        send(&app, order("erin", "{}")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_is_released_when_the_inner_service_fails() {
    let server = RedisServer::start();
    let layer =
        DuplicateSubmitLayer::new(client(&server).await, DuplicateSubmitOptions::new()).unwrap();
    let svc = layer.layer(tower::service_fn(|_req: Request<Body>| async {
        Err::<Response, _>(std::io::Error::other("backend down"))
    }));
    let err = svc.oneshot(order("frank", "{}")).await.unwrap_err();
    assert_eq!(err.to_string(), "backend down");
    assert!(lock_keys(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_releases_the_lock() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;
    let first = spawn_send(&app, slow_order("gina", "{}"));
    probe.wait_entered().await;
    assert_eq!(lock_keys(&server).len(), 1);
    // The client goes away: the server drops the request future mid-handler.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    until_no_keys(&server, "lockkit:submit:*:POST:*").await;
    assert_eq!(
        send(&app, order("gina", "{}")).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_releases_a_lock_it_does_not_own() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().ttl(Duration::from_millis(300));
    let (app, probe) = app_with(&server, opts).await;

    // A holds the lock; a refused duplicate must not free it.
    let a = spawn_send(&app, slow_order("hank", "{}"));
    probe.wait_entered().await;
    let key = lock_keys(&server).pop().unwrap();
    assert_eq!(
        send(&app, order("hank", "{}")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&app, order("hank", "{}")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(lock_keys(&server), vec![key.clone()]);

    // A outlives its TTL (no watchdog); B takes the expired lock.
    until_no_keys(&server, "lockkit:submit:*:POST:*").await;
    let b = spawn_send(&app, slow_order("hank", "{}"));
    probe.wait_entered().await;

    // A finishes now: its release must leave B's lock alone.
    probe.let_one_finish();
    assert_eq!(a.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(lock_keys(&server), vec![key]);
    assert_eq!(
        send(&app, order("hank", "{}")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    probe.let_one_finish();
    assert_eq!(b.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(
        send(&app, order("hank", "{}")).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_slow_handler_guarded_past_the_ttl() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new()
        .ttl(Duration::from_millis(1000))
        .watchdog(Some(WatchdogOptions::new()));
    let (app, probe) = app_with(&server, opts).await;
    let first = spawn_send(&app, slow_order("ivy", "{}"));
    probe.wait_entered().await;
    // Several TTLs pass while the handler works; the watchdog keeps renewing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        send(&app, order("ivy", "{}")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    probe.let_one_finish();
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert!(lock_keys(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_gets_413_and_the_handler_never_runs() {
    let server = RedisServer::start();
    let (app, probe) = app_with(&server, DuplicateSubmitOptions::new().body_limit(16)).await;
    let big = send(&app, order("jay", &"x".repeat(17))).await;
    assert_eq!(big.status, StatusCode::PAYLOAD_TOO_LARGE);
    let fits = send(&app, order("jay", &"y".repeat(16))).await;
    assert_eq!(fits.status, StatusCode::CREATED);
    assert_eq!(fits.text(), "y".repeat(16));
    assert_eq!(probe.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_closed_with_503_by_default() {
    let mut server = RedisServer::start();
    let (app, probe) = app(&server).await;
    server.kill();
    let answer = send(&app, order("kim", "{}")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.text().contains("unavailable"), "{}", answer.text());
    assert_eq!(probe.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_open_when_configured() {
    let mut server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().fail_mode(FailMode::Open);
    let (app, probe) = app_with(&server, opts).await;
    server.kill();
    assert_eq!(
        send(&app, order("lee", "{}")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(probe.runs(), 1);
}

/// An attempt that took the lock but came back with too little validity (a 100 ms TTL over a
/// link with a 200 ms round trip) is a lock not obtained from a Redis that answers: the
/// duplicate answer (429), in either failure mode; never a request run unguarded (fail-open)
/// nor a 503 (fail-closed). (It used to count as "Redis unavailable": fail-open ran the handler
/// without a lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_with_too_little_validity_is_busy_not_unavailable() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect(&relay.url()).await.unwrap();
    let probe = Probe::new();
    let mut apps = Vec::new();
    for mode in [FailMode::Open, FailMode::Closed] {
        let opts = DuplicateSubmitOptions::new()
            .ttl(Duration::from_millis(100))
            .fail_mode(mode);
        let layer = DuplicateSubmitLayer::new(client.clone(), opts).unwrap();
        let app = Router::new()
            .route("/orders", post(create))
            .route_layer(layer)
            .with_state(probe.clone());
        apps.push((mode, app));
    }
    relay.set_delay(Duration::from_millis(100));
    for (mode, app) in &apps {
        let answer = send(app, order("yan", "{}")).await;
        assert_eq!(
            answer.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{mode:?}: {}",
            answer.text()
        );
    }
    assert_eq!(probe.runs(), 0, "a request ran without a lock");
    // The spent attempts gave their locks back; Redis answers as soon as the link is fast.
    until_no_keys(&server, "lockkit:submit:*").await;
    relay.set_delay(Duration::ZERO);
    let (_, app) = &apps[0];
    assert_eq!(
        send(app, order("yan", "{}")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(probe.runs(), 1);
}

fn idem_order(user: &str, key: &str, body: &str, block: bool) -> Request<Body> {
    let mut b = req("/orders", user).header("idempotency-key", key);
    if block {
        b = b.header("x-block", "1");
    }
    b.body(Body::from(body.to_string())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_replays_the_first_response() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let (app, probe) = app_with(&server, opts).await;

    // While the first is in flight, every request with its key gets 409, whatever its body:
    // the same one re-serialised, with a timestamp, another order altogether. They go out
    // together, and none of them waits in the handler, so a run would answer 201.
    let first = spawn_send(&app, idem_order("max", "k-1", r#"{"sku":"C3"}"#, true));
    probe.wait_entered().await;
    // The key was claimed before the handler ran.
    assert_eq!(keys(&server, "lockkit:submit:claim:*").len(), 1);
    let bodies = [
        r#"{"sku":"C3"}"#,
        r#"{ "sku": "C3" }"#,
        r#"{"sku":"C3","sent_at":"2026-12-01T06:00:00Z"}"#,
        r#"{"sku":"ZZ"}"#,
    ];
    let mut set = JoinSet::new();
    for body in bodies.iter().cycle().take(12) {
        let app = app.clone();
        let req = idem_order("max", "k-1", body, false);
        set.spawn(async move { send(&app, req).await });
    }
    while let Some(answer) = set.join_next().await {
        let answer = answer.unwrap();
        assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.text());
        assert!(
            answer.text().contains("still being processed"),
            "{}",
            answer.text()
        );
    }
    assert_eq!(
        probe.runs(),
        1,
        "a request with a key in flight ran the handler"
    );

    probe.let_one_finish();
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.headers["x-order"], "1");
    assert!(!first.headers.contains_key("idempotency-replayed"));

    // The stored response, and no claim left behind.
    let records = keys(&server, "lockkit:submit:idem:*");
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(keys(&server, "lockkit:submit:claim:*").is_empty());

    // A later retry gets the same answer; the handler does not run again.
    let retry = send(&app, idem_order("max", "k-1", r#"{"sku":"C3"}"#, false)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.headers["x-order"], "1");
    assert_eq!(retry.headers["idempotency-replayed"], "true");
    assert_eq!(retry.body, first.body);
    assert_eq!(probe.runs(), 1);

    // The same key with another payload is a client bug: 422, nothing runs.
    for body in &bodies[1..] {
        let misuse = send(&app, idem_order("max", "k-1", body, false)).await;
        assert_eq!(misuse.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    }
    // Another user's identical key is theirs alone.
    let other_user = send(&app, idem_order("ned", "k-1", r#"{"sku":"C3"}"#, false)).await;
    assert_eq!(other_user.status, StatusCode::CREATED);
    assert_eq!(other_user.headers["x-order"], "2");
    // Without the header, the same body runs again (the lock only stops concurrent duplicates).
    assert_eq!(
        send(&app, order("max", r#"{"sku":"C3"}"#)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_response_is_never_overwritten() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let (app, probe) = app_with(&server, opts).await;

    let slow = spawn_send(&app, idem_order("rae", "k-2", r#"{"sku":"D4"}"#, true));
    probe.wait_entered().await;
    // The first request outlives its claim: the claim is renewed while the handler runs, so it
    // is lost here by deleting it (as when Redis was frozen past its TTL, or failed over).
    let claims = keys(&server, "lockkit:submit:claim:*");
    assert_eq!(claims.len(), 1, "{claims:?}");
    server.inline(&format!("DEL {}", claims[0])).unwrap();
    // The claim is gone: a retry runs, and its response is stored first.
    let retry = send(&app, idem_order("rae", "k-2", r#"{"sku":"D4"}"#, false)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.headers["x-order"], "2");

    // The slow one answers its own client, but must not replace the stored record.
    probe.let_one_finish();
    let slow = slow.await.unwrap();
    assert_eq!(slow.status, StatusCode::CREATED);
    assert_eq!(slow.headers["x-order"], "1");
    let replay = send(&app, idem_order("rae", "k-2", r#"{"sku":"D4"}"#, false)).await;
    assert_eq!(replay.headers["idempotency-replayed"], "true");
    assert_eq!(
        replay.headers["x-order"], "2",
        "the stored response was overwritten"
    );
    assert_eq!(probe.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_cannot_be_stored_keeps_the_key_claimed() {
    let server = RedisServer::start();
    // This user may read idempotency records but not write them: every store fails (NOPERM)
    // while locks and claims work.
    server
        .inline(
            "ACL SETUSER app on >apppw resetkeys ~lockkit:submit:[^i]* %R~lockkit:submit:idem:* \
             resetchannels +@all",
        )
        .unwrap();
    let url = format!("redis://app:apppw@127.0.0.1:{}", server.port());
    let client = LockClient::connect(&url).await.unwrap();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let layer = DuplicateSubmitLayer::new(client, opts).unwrap();
    let probe = Probe::new();
    let app = Router::new()
        .route("/orders", post(create))
        .route_layer(layer)
        .with_state(probe.clone());

    let first = send(&app, idem_order("sol", "k-3", r#"{"sku":"E5"}"#, false)).await;
    assert_eq!(
        first.status,
        StatusCode::CREATED,
        "the client still gets its answer"
    );
    assert!(keys(&server, "lockkit:submit:idem:*").is_empty());
    // The order exists but its response could not be kept: a retry must not create another.
    let retry = send(&app, idem_order("sol", "k-3", r#"{"sku":"E5"}"#, false)).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{}", retry.text());
    assert_eq!(
        probe.runs(),
        1,
        "the handler ran again after a failed store"
    );
}

/// With `free_on_server_error`, a 5xx, a panic and a client that went away free the key at
/// once: nothing is stored, and a retry runs the handler again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_not_stored_for_replay() {
    let server = RedisServer::start();
    let idem = IdempotencyOptions::new().free_on_server_error(true);
    let opts = DuplicateSubmitOptions::new().idempotency(Some(idem));
    let (app, probe) = app_with(&server, opts).await;
    for how in ["x-fail", "x-panic"] {
        let first = send(&app, failing_idem_order("olga", "k-9", how)).await;
        assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR, "{how}");
        assert!(keys(&server, "lockkit:submit:idem:*").is_empty());
        assert!(keys(&server, "lockkit:submit:claim:*").is_empty());
        let again = send(&app, failing_idem_order("olga", "k-9", how)).await;
        assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR, "{how}");
    }
    assert_eq!(probe.runs(), 4);
    // The client goes away mid-handler: the claim is freed in the background.
    let gone = spawn_send(&app, idem_order("olga", "k-10", "{}", true));
    probe.wait_entered().await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    until_no_keys(&server, "lockkit:submit:claim:*").await;
    let retry = send(&app, idem_order("olga", "k-10", "{}", false)).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.text());
    assert_eq!(probe.runs(), 6);
}

/// Idempotency on, no watchdog, locks and claims with this TTL.
fn idempotent_with_ttl(ttl: Duration) -> DuplicateSubmitOptions {
    DuplicateSubmitOptions::new()
        .ttl(ttl)
        .idempotency(Some(IdempotencyOptions::new()))
}

/// No watchdog configured, a handler slower than the claim's TTL (1 s): the claim is renewed
/// while the handler runs, so a retry meanwhile gets 409 and the handler runs once. (The claim
/// used to be renewed only when a watchdog was configured: it expired under the running
/// handler, and the retry ran it a second time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_claim_is_renewed_while_a_slow_handler_runs() {
    let server = RedisServer::start();
    let (app, probe) = app_with(&server, idempotent_with_ttl(Duration::from_secs(1))).await;
    let slow = spawn_send(&app, idem_order("vic", "k-6", r#"{"sku":"F6"}"#, true));
    probe.wait_entered().await;
    // Several TTLs pass while the handler works.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let retry = send(&app, idem_order("vic", "k-6", r#"{"sku":"F6"}"#, false)).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{}", retry.text());
    assert_eq!(probe.runs(), 1, "the retry ran the handler a second time");

    probe.let_one_finish();
    assert_eq!(slow.await.unwrap().status, StatusCode::CREATED);
    // The claim is freed when the handler has answered and its response is stored.
    assert!(keys(&server, "lockkit:submit:claim:*").is_empty());
    let replay = send(&app, idem_order("vic", "k-6", r#"{"sku":"F6"}"#, false)).await;
    assert_eq!(replay.headers["idempotency-replayed"], "true");
    assert_eq!(replay.headers["x-order"], "1");
    assert_eq!(probe.runs(), 1);
}

/// A request with an idempotency key that fails in the handler: `x-fail` (500) or `x-panic`.
fn failing_idem_order(user: &str, key: &str, how: &str) -> Request<Body> {
    req("/orders", user)
        .header("idempotency-key", key)
        .header(how, "1")
        .body(Body::from("{}"))
        .unwrap()
}

/// A handler that answered 5xx, panicked, or whose client went away mid-handler may have done
/// its side effect: by default the key stays claimed until the claim's TTL runs out, so a
/// retry meanwhile gets 409 instead of running it again; nothing is stored, and after the TTL
/// a retry runs. (A 5xx and a panic used to free the key at once, and the retry ran the handler
/// again; so did a client that went away.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_error_the_key_stays_claimed_until_the_claim_ttl() {
    let server = RedisServer::start();
    let (app, probe) = app_with(&server, idempotent_with_ttl(Duration::from_secs(1))).await;
    for (key, how) in [("k-500", "x-fail"), ("k-panic", "x-panic")] {
        let first = send(&app, failing_idem_order("wes", key, how)).await;
        assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR, "{how}");
        let retry = send(&app, idem_order("wes", key, "{}", false)).await;
        assert_eq!(
            retry.status,
            StatusCode::CONFLICT,
            "after {how}: {}",
            retry.text()
        );
    }
    // The client goes away while the handler runs: the request future is dropped.
    let gone = spawn_send(&app, idem_order("wes", "k-gone", "{}", true));
    probe.wait_entered().await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    let retry = send(&app, idem_order("wes", "k-gone", "{}", false)).await;
    assert_eq!(
        retry.status,
        StatusCode::CONFLICT,
        "after a disconnect: {}",
        retry.text()
    );
    assert_eq!(probe.runs(), 3, "a retry ran the handler again");
    assert!(keys(&server, "lockkit:submit:idem:*").is_empty());

    // Once the claims have run out their TTL, a retry runs the handler.
    until_no_keys(&server, "lockkit:submit:claim:*").await;
    for key in ["k-500", "k-panic", "k-gone"] {
        let retry = send(&app, idem_order("wes", key, "{}", false)).await;
        assert_eq!(retry.status, StatusCode::CREATED, "{key}: {}", retry.text());
    }
    assert_eq!(probe.runs(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_inside_the_drift_allowance_is_refused_when_the_layer_is_built() {
    let server = RedisServer::start();
    // 2 ms is all drift allowance (0.01 x TTL + 2 ms): such a layer could only answer 503.
    let opts = DuplicateSubmitOptions::new().ttl(Duration::from_millis(2));
    match DuplicateSubmitLayer::new(client(&server).await, opts) {
        Err(lockkit::Error::InvalidOptions { field, reason }) => {
            assert_eq!(field, "ttl");
            assert!(reason.contains("drift"), "{reason}");
        }
        Err(e) => panic!("expected InvalidOptions for `ttl`, got {e}"),
        Ok(_) => panic!("a 2 ms TTL was accepted; every request would get 503"),
    }
    // Just above it, the layer works.
    let (app, probe) = app_with(
        &server,
        DuplicateSubmitOptions::new().ttl(Duration::from_millis(50)),
    )
    .await;
    assert_eq!(
        send(&app, order("pia", "{}")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(probe.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_leaves_the_key_free_for_its_corrected_retry() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let (app, probe) = app_with(&server, opts).await;
    let refused = |key: &str, status: &str, body: &str| {
        req("/orders", "tia")
            .header("idempotency-key", key)
            .header("x-status", status)
            .body(Body::from(body.to_string()))
            .unwrap()
    };

    // The client fixes its input and retries with the same key: the handler runs again.
    let bad = send(&app, refused("k-400", "400", r#"{"qty":-1}"#)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let fixed = send(&app, idem_order("tia", "k-400", r#"{"qty":1}"#, false)).await;
    assert_eq!(fixed.status, StatusCode::CREATED, "{}", fixed.text());
    assert!(!fixed.headers.contains_key("idempotency-replayed"));

    // Unauthorized, timed out, conflicting, rate-limited: the same retry later is a new try,
    // not a replay of the refusal.
    for status in ["401", "408", "409", "429"] {
        let key = format!("k-{status}");
        let first = send(&app, refused(&key, status, "{}")).await;
        assert_eq!(first.status.as_str(), status);
        let retry = send(&app, idem_order("tia", &key, "{}", false)).await;
        assert_eq!(
            retry.status,
            StatusCode::CREATED,
            "after {status}: {}",
            retry.text()
        );
        assert!(!retry.headers.contains_key("idempotency-replayed"));
    }
    assert_eq!(probe.runs(), 10);
    // Only the 2xx answers were kept, and no claim is left.
    assert_eq!(keys(&server, "lockkit:submit:idem:*").len(), 5);
    assert!(keys(&server, "lockkit:submit:claim:*").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_beyond_2xx_are_stored_when_chosen() {
    let server = RedisServer::start();
    let idem = IdempotencyOptions::new().also_store(StatusCode::UNPROCESSABLE_ENTITY);
    let opts = DuplicateSubmitOptions::new().idempotency(Some(idem));
    let (app, probe) = app_with(&server, opts).await;
    let invalid = req("/orders", "uma")
        .header("idempotency-key", "k-5")
        .header("x-status", "422")
        .body(Body::from("{}"))
        .unwrap();
    let first = send(&app, invalid).await;
    assert_eq!(first.status, StatusCode::UNPROCESSABLE_ENTITY);
    let retry = send(&app, idem_order("uma", "k-5", "{}", false)).await;
    assert_eq!(retry.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(retry.headers["idempotency-replayed"], "true");
    assert_eq!(retry.headers["x-order"], "1");
    assert_eq!(probe.runs(), 1);
}

/// The order routes under `/v1` and `/v2`, each nested router with the layer on its routes.
#[cfg(feature = "axum")]
async fn versioned_app(server: &RedisServer, opts: DuplicateSubmitOptions) -> (Router, Probe) {
    let layer = DuplicateSubmitLayer::new(client(server).await, opts).unwrap();
    let probe = Probe::new();
    let api = || {
        Router::new()
            .route("/orders", post(create))
            .route_layer(layer.clone())
    };
    let app = Router::new()
        .nest("/v1", api())
        .nest("/v2", api())
        .with_state(probe.clone());
    (app, probe)
}

#[cfg(feature = "axum")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_routers_do_not_share_locks_or_stored_responses() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let (app, probe) = versioned_app(&server, opts).await;
    let to = |path: &str, block: bool| {
        let mut b = req(path, "vic");
        if block {
            b = b.header("x-block", "1");
        }
        b.body(Body::from(r#"{"sku":"F6"}"#)).unwrap()
    };

    // axum's nest strips `/v1` and `/v2` from the path the layer sees: the same order to the
    // two versions must not block each other.
    let v1 = spawn_send(&app, to("/v1/orders", true));
    probe.wait_entered().await;
    let v2 = send(&app, to("/v2/orders", false)).await;
    assert_eq!(v2.status, StatusCode::CREATED, "{}", v2.text());
    assert_eq!(
        send(&app, to("/v1/orders", false)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    probe.let_one_finish();
    assert_eq!(v1.await.unwrap().status, StatusCode::CREATED);
    let lock_paths: Vec<String> = keys(&server, "lockkit:submit:*");
    assert!(lock_paths.is_empty(), "{lock_paths:?}");

    // A key used on /v1 is not replayed to /v2: another endpoint is another request.
    let keyed = |path: &str| {
        req(path, "vic")
            .header("idempotency-key", "k-6")
            .body(Body::from(r#"{"sku":"F6"}"#))
            .unwrap()
    };
    let first = send(&app, keyed("/v1/orders")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = send(&app, keyed("/v2/orders")).await;
    assert!(
        !other.headers.contains_key("idempotency-replayed"),
        "/v1's response replayed to /v2"
    );
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    let again = send(&app, keyed("/v1/orders")).await;
    assert_eq!(again.headers["idempotency-replayed"], "true");
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_do_not_share_locks() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;
    let to = |host: &str, block: bool| {
        let mut b = req("/orders", "wes").header("host", host);
        if block {
            b = b.header("x-block", "1");
        }
        b.body(Body::from("{}")).unwrap()
    };
    let a = spawn_send(&app, to("shop-a.example", true));
    probe.wait_entered().await;
    let b = send(&app, to("shop-b.example", false)).await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.text());
    assert_eq!(
        send(&app, to("shop-a.example", false)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    probe.let_one_finish();
    assert_eq!(a.await.unwrap().status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_user_is_never_answered_with_another_clients_stored_response() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let (app, probe) = app_with(&server, opts).await;
    // No user header, no client address: the layer cannot tell these clients apart.
    let anonymous = || {
        Request::post("/orders")
            .header("idempotency-key", "k-7")
            .body(Body::from(r#"{"sku":"G7"}"#))
            .unwrap()
    };
    let first = send(&app, anonymous()).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let second = send(&app, anonymous()).await;
    assert!(
        !second.headers.contains_key("idempotency-replayed"),
        "another anonymous client's response was replayed"
    );
    assert_eq!(second.status, StatusCode::CREATED);
    assert_eq!(second.headers["x-order"], "2");
    assert_eq!(probe.runs(), 2);
    assert!(keys(&server, "lockkit:submit:idem:*").is_empty());
}

/// One HTTP/1.1 request over a socket bound to `from`, so the server sees that client address.
#[cfg(feature = "axum")]
async fn post_from(from: &str, to: std::net::SocketAddr, block: bool, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let block = if block { "x-block: 1\r\n" } else { "" };
    let request = format!(
        "POST /orders HTTP/1.1\r\nhost: shop.example\r\ncontent-type: application/json\r\n\
         {block}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

#[cfg(feature = "axum")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_a_user_header_are_told_apart_by_their_address() {
    let server = RedisServer::start();
    let (app, probe) = app(&server).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let serving = tokio::spawn(async move { axum::serve(listener, service).await });

    // Two clients on two addresses (the whole of 127/8 is loopback), no X-User-Id.
    let a = tokio::spawn(post_from("127.0.0.2", addr, true, "{}"));
    probe.wait_entered().await;
    assert_eq!(post_from("127.0.0.3", addr, false, "{}").await, 201);
    // The same client again is a duplicate.
    assert_eq!(post_from("127.0.0.2", addr, false, "{}").await, 429);
    probe.let_one_finish();
    assert_eq!(a.await.unwrap(), 201);
    serving.abort();
}

/// Answers with how the request's lock was lost (it waits for that), or says it has no
/// `LossSignal` to wait on.
async fn until_lost(State(p): State<Probe>, req: Request<Body>) -> String {
    p.entered.add_permits(1);
    let Some(mut signal) = req.extensions().get::<lockkit::LossSignal>().cloned() else {
        return "no loss signal".into();
    };
    match tokio::time::timeout(Duration::from_secs(30), signal.lost()).await {
        Ok(reason) => format!("{reason:?}"),
        Err(_) => "not told within 30 s".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_is_told_when_its_lock_is_lost() {
    // The watchdog finds the lock gone (deleted behind the holder's back, as an expiry during an
    // outage would leave it): the handler, which holds it, is told through the request's
    // `LossSignal` extension, so it can stop before a duplicate runs beside it.
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().watchdog(Some(WatchdogOptions::new()));
    let layer = DuplicateSubmitLayer::new(client(&server).await, opts).unwrap();
    let probe = Probe::new();
    let app = Router::new()
        .route("/orders", post(until_lost))
        .route_layer(layer)
        .with_state(probe.clone());
    let answer = spawn_send(&app, order("lou", "{}"));
    probe.wait_entered().await;
    // (Empty when the handler already answered, which the answer then says.)
    let held = lock_keys(&server);
    for key in &held {
        server.inline(&format!("DEL {key}")).unwrap();
    }
    let answer = answer.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), "Expired");
    assert_eq!(held.len(), 1, "{held:?}");
}

/// Issue 35, defect 8: a custom key builder that skips a route (returns `None`: no duplicate
/// lock there) does not switch off `Idempotency-Key` replay on it. A retry with the same key
/// gets the stored response and the handler runs once (it ran twice: 201, 201).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_builder_that_skips_a_route_keeps_idempotent_replay_on_it() {
    let server = RedisServer::start();
    let opts = DuplicateSubmitOptions::new().idempotency(Some(IdempotencyOptions::new()));
    let layer = DuplicateSubmitLayer::new(client(&server).await, opts)
        .unwrap()
        .key_builder(|_: &lockkit::middleware::KeyInput<'_>| -> Option<String> { None });
    let probe = Probe::new();
    let app = Router::new()
        .route("/orders", post(create))
        .route_layer(layer)
        .with_state(probe.clone());
    let first = send(&app, idem_order("max", "k-skip", r#"{"sku":"A1"}"#, false)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let retry = send(&app, idem_order("max", "k-skip", r#"{"sku":"A1"}"#, false)).await;
    assert_eq!(
        probe.runs(),
        1,
        "an idempotent retry ran the handler again ({}, x-order {:?})",
        retry.status,
        retry.headers.get("x-order")
    );
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.headers["idempotency-replayed"], "true");
    assert_eq!(retry.body, first.body);
}

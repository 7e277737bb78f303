//! A small orders API guarded against duplicate submits, across instances.
//!
//! ```text
//! cargo run --example orders --features tower,metrics -- --port 3000 --redis-url redis://127.0.0.1:6379 --delay-ms 2000
//! curl -s http://127.0.0.1:3000/metrics | grep ^lockkit_
//! ```
//! `POST /orders` with a JSON body creates an order after `--delay-ms` and answers 201; the user
//! is taken from the `X-User-Id` header (falling back to the client address). Start two instances
//! on two ports against one Redis and send the same order to both at once: one 201, one 429.
//! With an `Idempotency-Key` header, a retry after the answer gets the same order back.
//! `GET /metrics` serves the lock metrics (`lockkit_*`) in Prometheus's text format.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use lockkit::middleware::{
    DuplicateSubmitLayer, DuplicateSubmitOptions, HeaderUser, IdempotencyOptions,
};
use lockkit::{redact_url, LockClient, WatchdogOptions};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};

/// The orders API of the duplicate-submit example.
#[derive(Debug, Parser)]
struct Opts {
    /// The port to listen on.
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The Redis server shared by all instances.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// How long creating an order takes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// The duplicate-submit lock's TTL in milliseconds (renewed by the watchdog while an order
    /// is being created, so a slow order stays guarded).
    #[arg(long, default_value_t = 5000)]
    ttl_ms: u64,
}

#[derive(Debug, Clone)]
struct App {
    instance: String,
    delay: Duration,
    next_id: Arc<AtomicU64>,
}

async fn create_order(
    State(app): State<App>,
    headers: HeaderMap,
    Json(order): Json<Value>,
) -> (StatusCode, Json<Value>) {
    tokio::time::sleep(app.delay).await;
    let n = app.next_id.fetch_add(1, Ordering::SeqCst) + 1;
    let user = headers
        .get("x-user-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    tracing::info!(instance = %app.instance, user, id = n, "order created");
    let body = json!({ "id": format!("{}-{n}", app.instance), "user": user, "order": order });
    (StatusCode::CREATED, Json(body))
}

/// Lock latencies span sub-millisecond round trips to multi-second waits.
const BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder the library's metrics go to, with its upkeep task.
fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    lockkit::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

async fn run(opts: Opts) -> anyhow::Result<()> {
    let metrics = install_metrics()?;
    let target = redact_url(&opts.redis_url);
    let client = LockClient::connect(&opts.redis_url)
        .await
        // One line: the library error's own text carries the cause (its chain would repeat it).
        .map_err(|e| anyhow::anyhow!("connecting to {target}: {e}"))?;
    let guard_opts = DuplicateSubmitOptions::new()
        .prefix("orders:submit")
        .ttl(Duration::from_millis(opts.ttl_ms))
        .watchdog(Some(WatchdogOptions::new()))
        .idempotency(Some(IdempotencyOptions::new()));
    let users = HeaderUser::default().client_addr(|ext| {
        ext.get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_string())
    });
    let guard = DuplicateSubmitLayer::new(client, guard_opts)
        .context("duplicate-submit options")?
        .user_extractor(users);

    let state = App {
        instance: format!("p{}", opts.port),
        delay: Duration::from_millis(opts.delay_ms),
        next_id: Arc::default(),
    };
    let app = Router::new()
        .route("/orders", post(create_order))
        .route_layer(guard)
        .route("/health", get(|| async { "ok\n" }))
        .route("/metrics", get(move || async move { metrics.render() }))
        .with_state(state);

    let addr = SocketAddr::new(opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    // Tests and scripts wait for this line.
    println!("orders: listening on http://{addr} (redis {target})");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("serving")?;
    Ok(())
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

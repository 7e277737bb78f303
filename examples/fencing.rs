//! A holder paused past its lease, and the resources that refuse its late write.
//!
//! ```text
//! cargo run --example fencing --features tower -- --redis-url redis://127.0.0.1:6379
//! ```
//! For each primitive (a mutex, a semaphore's permit, a read-write lock's writer), holder A
//! takes it with a fencing token and a short lease, then stops past the lease (a GC pause, a
//! VM migration); holder B takes it, with a newer token, and writes. A wakes up still believing
//! it holds the lock and writes too. Each write goes to two resources that check the token:
//! - a value in Redis, written with `LockClient::fenced_set` (`lua/fenced_set.lua`: written only
//!   when the token is at least the highest that wrote);
//! - an axum service behind `lockkit::middleware::FencingCheckLayer` (a `PUT` whose
//!   `Fencing-Token` header is older than the highest accepted is answered 409, never reaching
//!   the handler), called in-process as its server would call it.
//!
//! Both refuse A's write; the example prints one line per write and exits 0 when every stale
//! write was refused and every fresh one accepted (1 otherwise). A semaphore's token is its
//! permit slot's, so its resources are kept per slot (`/doc/semaphore/1`,
//! `{demo:semaphore}:doc:1`): of its two permits, C holds slot 2 throughout and writes on, while
//! B takes A's slot 1 once A's lease ended.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::put;
use axum::Router;
use clap::Parser;
use lockkit::middleware::{FencingCheckLayer, FENCING_TOKEN_HEADER};
use lockkit::{redact_url, Lock, LockClient, Locker, RwLock, Semaphore};
use tower::ServiceExt;

/// A paused lock holder's late write, refused by the resources that check fencing tokens.
#[derive(Debug, Parser)]
struct Opts {
    /// The Redis server (one node: fencing tokens come from one counter).
    #[arg(
        long = "redis-url",
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// The paused holder's lease, in milliseconds; it pauses twice as long.
    #[arg(long, default_value_t = 200)]
    lease_ms: u64,
}

/// Which primitive a round takes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Mutex,
    Semaphore,
    RwLockWriter,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore => "semaphore",
            Kind::RwLockWriter => "rwlock",
        }
    }
}

struct Demo {
    client: LockClient,
    sem: Semaphore,
    rw: RwLock,
    app: Router,
}

impl Demo {
    /// One fenced attempt at `kind`'s lock named `{demo:NAME}`.
    async fn take(&self, kind: Kind, ttl: Duration) -> anyhow::Result<Lock> {
        let key = format!("{{demo:{}}}", kind.name());
        let fence = format!("{key}:fence");
        let got = match kind {
            Kind::Mutex => self.client.try_acquire_fenced(&key, &fence, ttl).await,
            Kind::Semaphore => self.sem.try_acquire_fenced(&key, &fence, ttl).await,
            Kind::RwLockWriter => {
                let writer = self.rw.writer();
                writer.try_acquire_fenced(&key, &fence, ttl).await
            }
        };
        got.with_context(|| format!("acquiring {key}"))?
            .with_context(|| format!("{key} is held: is another demo running against this Redis?"))
    }

    async fn release(&self, kind: Kind, lock: &Lock) -> anyhow::Result<()> {
        match kind {
            Kind::Mutex => self.client.release(lock).await?,
            Kind::Semaphore => self.sem.release(lock).await?,
            Kind::RwLockWriter => self.rw.writer().release(lock).await?,
        };
        Ok(())
    }

    /// `lock`'s holder writes `value` to both resources: whether each accepted it, and the
    /// HTTP answer's status and body.
    async fn write(&self, kind: Kind, lock: &Lock, value: &str) -> anyhow::Result<Written> {
        let token = lock
            .fencing_token()
            .context("the lock has no fencing token")?;
        // A semaphore's tokens are per permit slot: so is the resource's highest token.
        let slot = lock
            .fencing_slot()
            .map_or(String::new(), |s| format!(":{s}"));
        let doc = format!("{{demo:{}}}:doc{slot}", kind.name());
        let in_redis = self
            .client
            .fenced_set(&doc, &format!("{doc}:fence"), token, value.as_bytes())
            .await
            .with_context(|| format!("writing {doc}"))?;
        let path = format!("/doc/{}{}", kind.name(), slot.replace(':', "/"));
        let req = Request::put(path)
            .header(FENCING_TOKEN_HEADER, token.to_string())
            .body(Body::from(value.to_string()))?;
        let resp = self.app.clone().oneshot(req).await?;
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 4096).await?;
        Ok(Written {
            token,
            slot: lock.fencing_slot(),
            in_redis,
            status,
            body: String::from_utf8_lossy(&body).trim().to_string(),
        })
    }
}

struct Written {
    token: u64,
    slot: Option<u32>,
    in_redis: bool,
    status: StatusCode,
    body: String,
}

impl Written {
    fn line(&self, kind: Kind, who: &str) -> String {
        let redis = if self.in_redis { "accepted" } else { "refused" };
        let slot = self.slot.map_or(String::new(), |s| format!(" (slot {s})"));
        format!(
            "{:<9} {who} token {}{slot}: fenced_set {redis}, HTTP {} {}",
            kind.name(),
            self.token,
            self.status.as_u16(),
            self.body
        )
    }
}

async fn round(demo: &Demo, kind: Kind, lease: Duration) -> anyhow::Result<bool> {
    let a = demo.take(kind, lease).await?;
    let first = demo.write(kind, &a, "from A").await?;
    println!("{}", first.line(kind, "A"));
    // The semaphore's other permit: C holds slot 2 all along, so B gets A's slot.
    let c = match kind {
        Kind::Semaphore => Some(demo.take(kind, Duration::from_secs(10)).await?),
        _ => None,
    };
    println!(
        "{:<9} A pauses {} ms, past its {} ms lease",
        kind.name(),
        (lease * 2).as_millis(),
        lease.as_millis()
    );
    tokio::time::sleep(lease * 2).await;
    let b = demo.take(kind, Duration::from_secs(10)).await?;
    let fresh = demo.write(kind, &b, "from B").await?;
    println!("{}", fresh.line(kind, "B"));
    let stale = demo.write(kind, &a, "late, from A").await?;
    println!("{} (A woke up)", stale.line(kind, "A"));
    let mut others_ok = true;
    if let Some(c) = &c {
        let other = demo.write(kind, c, "from C").await?;
        println!("{}", other.line(kind, "C"));
        others_ok = other.in_redis && other.status == StatusCode::OK;
        demo.release(kind, c).await?;
    }
    demo.release(kind, &b).await?;
    let ok = others_ok
        && first.in_redis
        && first.status == StatusCode::OK
        && fresh.in_redis
        && fresh.status == StatusCode::OK
        && !stale.in_redis
        && stale.status == StatusCode::CONFLICT;
    Ok(ok)
}

async fn run(opts: Opts) -> anyhow::Result<bool> {
    let url = redact_url(&opts.redis_url);
    let client = LockClient::connect(&opts.redis_url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let app = Router::new()
        .route(
            "/doc/{*rest}",
            put(|body: String| async move { format!("stored {body:?}") }),
        )
        .layer(FencingCheckLayer::new());
    let demo = Demo {
        sem: Semaphore::new(client.clone(), 2)?,
        rw: RwLock::new(client.clone()),
        client,
        app,
    };
    let lease = Duration::from_millis(opts.lease_ms.max(10));
    let mut all = true;
    for kind in [Kind::Mutex, Kind::Semaphore, Kind::RwLockWriter] {
        all &= round(&demo, kind, lease).await?;
    }
    Ok(all)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Opts::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: a stale write was accepted or a fresh one refused");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

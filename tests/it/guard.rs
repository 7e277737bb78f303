//! Guards at the edges: dropped as their runtime ends, dropped outside any runtime, renewed by
//! an answer that came too late. Real redis-servers.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkit::{
    Error, ExtendOutcome, Lock, LockClient, LockOptions, Locker, LossReason, ReleaseOutcome,
    WatchdogOptions,
};
use lockkit_test_support::RedisServer;

fn direct(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut direct(server))
        .unwrap()
}

fn runtime(flavour: &str) -> tokio::runtime::Runtime {
    match flavour {
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .unwrap()
}

/// Work that fails after the guard was taken: `?` drops the guard on the way out.
async fn work_that_fails() -> lockkit::Result<()> {
    Err(Error::InvalidKey {
        reason: "the work failed on purpose".into(),
    })
}

/// Issue 35, defect 5: a watchdog guard dropped at the end of `main` (or by `?` on the way out
/// of it) as the runtime ends. `Drop` spawns the release, and the ending runtime cancelled it:
/// the key stayed held, unrenewed, for its whole 30 s TTL, and nothing was logged. The release
/// must run: the key is gone once the runtime has been dropped, for both runtime flavours.
#[test]
fn a_guard_dropped_as_the_runtime_ends_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let mut left = Vec::new();
    for flavour in ["current_thread", "multi_thread"] {
        for how in ["end-of-main", "question-mark"] {
            let key = format!("lock:{how}:{flavour}");
            let rt = runtime(flavour);
            let outcome: lockkit::Result<()> = rt.block_on(async {
                let client = LockClient::connect(&server.url()).await?;
                let opts = LockOptions::new(Duration::from_secs(30))?;
                let guard = client.lock(&key, &opts, WatchdogOptions::new()).await?;
                if how == "question-mark" {
                    work_that_fails().await?;
                }
                // The end of main: the guard is dropped here, and the runtime right after.
                drop(guard);
                Ok(())
            });
            assert_eq!(outcome.is_err(), how == "question-mark");
            drop(rt);
            let left_ms = pttl(&server, &key);
            if left_ms != -2 {
                left.push(format!("{key} ({left_ms} ms left)"));
            }
        }
    }
    assert!(
        left.is_empty(),
        "guards dropped as their runtime ended left their keys held: {left:?}"
    );
}

/// A writer the test reads back: what a `tracing` subscriber printed.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Issue 35, defect 5: a guard dropped where no runtime runs cannot release its lock; the key
/// then stays held until its TTL, and the holder is told so: a warning naming the key (nothing
/// was logged).
#[test]
fn a_guard_dropped_outside_any_runtime_warns_naming_its_key() {
    let server = RedisServer::start();
    let key = "lock:dropped-outside-a-runtime";
    let rt = runtime("current_thread");
    let guard = rt.block_on(async {
        let client = LockClient::connect(&server.url()).await.unwrap();
        let opts = LockOptions::new(Duration::from_secs(30)).unwrap();
        client
            .lock(key, &opts, WatchdogOptions::new())
            .await
            .unwrap()
    });
    drop(rt);
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || drop(guard));
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("WARN") && logged.contains(key),
        "no warning naming {key} when its guard was dropped outside a runtime: {logged:?}"
    );
    assert!(pttl(&server, key) > 0, "the key went, yet no runtime ran");
}

/// A locker whose extends answer after the thread stalled past the renewed validity: a
/// stop-the-world pause between the reply and the watchdog (GC, swap, a blocked worker). The
/// answer says `Extended`, but the validity it brings has ended by the time it is read.
#[derive(Clone)]
struct Stalling {
    inner: LockClient,
    extends: Arc<AtomicU32>,
    stall: Duration,
}

impl Locker for Stalling {
    async fn attempt(&self, key: &str, opts: &LockOptions) -> lockkit::Result<Option<Lock>> {
        self.inner.attempt(key, opts).await
    }

    async fn release(&self, lock: &Lock) -> lockkit::Result<ReleaseOutcome> {
        self.inner.release(lock).await
    }

    async fn extend(&self, lock: &mut Lock, ttl: Duration) -> lockkit::Result<ExtendOutcome> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        let outcome = self.inner.extend(lock, ttl).await;
        std::thread::sleep(self.stall);
        outcome
    }

    fn mode(&self) -> &'static str {
        "stalling"
    }
}

/// Issue 35, defect 1 (the watchdog): a renewal answered `Extended` whose renewed validity had
/// ended by the time the watchdog read it is a loss, told at once; no further renewal is sent
/// for it (it used to be stored as a renewal, and the next one went out for a lock whose
/// validity had ended: arriving while the key still held the token, it kept the key alive for
/// another TTL after the holder had been told the lock was lost).
#[tokio::test(flavor = "current_thread")]
async fn a_renewal_answered_after_its_validity_ended_is_a_loss_and_the_last_renewal() {
    let server = RedisServer::start();
    let inner = LockClient::connect(&server.url()).await.unwrap();
    let extends = Arc::new(AtomicU32::new(0));
    let locker = Stalling {
        inner,
        extends: Arc::clone(&extends),
        stall: Duration::from_millis(400),
    };
    let opts = LockOptions::new(Duration::from_millis(300)).unwrap();
    let guard = locker
        .lock("lock:late-renewal", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("no loss reported 10 s into a 300 ms lock whose renewal came late");
    // Whatever else is in flight has had its time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        extends.load(Ordering::SeqCst),
        1,
        "renewals went out after one whose answer came too late (loss: {reason:?})"
    );
    assert_eq!(reason, LossReason::Unreachable);
    drop(guard);
}

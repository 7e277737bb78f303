//! Guards at the edges: renewed by an answer that came too late. Real redis-servers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit::{
    ExtendOutcome, Lock, LockClient, LockOptions, Locker, LossReason, ReleaseOutcome,
    WatchdogOptions,
};
use lockkit_test_support::RedisServer;

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

//! `RwLock`: many readers or one writer, each with its own lease, against a real redis-server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit::{
    ErrorKind, ExtendOutcome, LockClient, LockOptions, Locker, ReleaseOutcome, RetryOptions, RwLock,
};
use lockkit_test_support::RedisServer;

async fn rwlock(server: &RedisServer) -> RwLock {
    RwLock::new(LockClient::connect(&server.url()).await.unwrap())
}

fn retrying(ttl: Duration, deadline: Duration) -> LockOptions {
    LockOptions::builder(ttl)
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(5))
                .deadline(Some(deadline)),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let ttl = Duration::from_secs(30);
    let a = rw.try_read("rw:a", ttl).await.unwrap().expect("a reads");
    let b = rw
        .try_read("rw:a", ttl)
        .await
        .unwrap()
        .expect("b reads too");
    assert!(rw.try_write("rw:a", ttl).await.unwrap().is_none());
    // A single write attempt leaves no claim: readers still enter.
    let c = rw.try_read("rw:a", ttl).await.unwrap().expect("c reads");
    for r in [&a, &b, &c] {
        assert_eq!(
            rw.reader().release(r).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let w = rw
        .try_write("rw:a", ttl)
        .await
        .unwrap()
        .expect("free: written");
    assert!(rw.try_read("rw:a", ttl).await.unwrap().is_none());
    assert!(rw.try_write("rw:a", ttl).await.unwrap().is_none());
    // Only the writer releases it, through the writing side.
    assert_eq!(
        rw.reader().release(&w).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        rw.writer().release(&w).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        server
            .inline("EXISTS rw:a {rw:a}:lockkit-writer {rw:a}:lockkit-writers")
            .unwrap()
            .trim(),
        ":0"
    );
}

/// Readers coming and going can not keep a writer out: once it waits, new readers wait too.
#[tokio::test]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let ttl = Duration::from_secs(30);
    let reader = rw.try_read("rw:w", ttl).await.unwrap().unwrap();
    let writer = {
        let rw = rw.clone();
        let opts = retrying(ttl, Duration::from_secs(20));
        tokio::spawn(async move { rw.writer().acquire("rw:w", &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    assert!(
        rw.try_read("rw:w", ttl).await.unwrap().is_none(),
        "a new reader entered while a writer waited"
    );
    rw.reader().release(&reader).await.unwrap();
    let w = writer.await.unwrap().expect("the writer got in");
    assert_eq!(
        rw.writer().release(&w).await.unwrap(),
        ReleaseOutcome::Released
    );
    // The writer's claim ended with its acquire: readers enter again.
    assert!(rw.try_read("rw:w", ttl).await.unwrap().is_some());
}

#[tokio::test]
async fn downgrade_turns_a_writer_into_a_reader_and_upgrade_is_a_typed_error() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let ttl = Duration::from_secs(30);
    let mut w = rw.try_write("rw:d", ttl).await.unwrap().unwrap();
    assert_eq!(rw.downgrade(&mut w).await.unwrap(), ExtendOutcome::Extended);
    // Now a reader: others read beside it, no writer enters.
    let other = rw
        .try_read("rw:d", ttl)
        .await
        .unwrap()
        .expect("a reader joins");
    assert!(rw.try_write("rw:d", ttl).await.unwrap().is_none());
    assert_eq!(
        rw.downgrade(&mut w.clone()).await.unwrap(),
        ExtendOutcome::NotHeld
    );
    let e = rw.upgrade(&other).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        matches!(e, lockkit::Error::UpgradeUnsupported { .. }),
        "{e}"
    );
    assert_eq!(
        rw.reader().release(&w).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        rw.reader().release(&other).await.unwrap(),
        ReleaseOutcome::Released
    );
}

#[tokio::test]
async fn a_crashed_holders_lease_ends_and_every_key_keeps_a_ttl() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let short = Duration::from_millis(300);
    rw.try_read("rw:c", short).await.unwrap().unwrap();
    let ttl: i64 = server.inline("PTTL rw:c").unwrap().trim()[1..]
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 300, "{ttl}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut w = rw
        .try_write("rw:c", short)
        .await
        .unwrap()
        .expect("the crashed reader's lease ended");
    assert_eq!(
        rw.writer()
            .extend(&mut w, Duration::from_secs(5))
            .await
            .unwrap(),
        ExtendOutcome::Extended
    );
    let mut foreign = w.clone();
    assert_eq!(
        rw.reader()
            .extend(&mut foreign, Duration::from_secs(5))
            .await
            .unwrap(),
        ExtendOutcome::NotHeld
    );
    rw.writer().release(&w).await.unwrap();
    assert_eq!(server.inline("DBSIZE").unwrap().trim(), ":0");
}

#[tokio::test]
async fn readers_and_writers_at_once_keep_the_rule() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let readers_in = Arc::new(AtomicU64::new(0));
    let writers_in = Arc::new(AtomicU64::new(0));
    let most_readers = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let opts = retrying(Duration::from_secs(5), Duration::from_secs(30));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let write = i % 5 == 0;
        let side = if write { rw.writer() } else { rw.reader() };
        let (r, w, most, bad) = (
            readers_in.clone(),
            writers_in.clone(),
            most_readers.clone(),
            violations.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let held = side.acquire("rw:busy", &opts).await.unwrap();
                if write {
                    if w.fetch_add(1, Ordering::SeqCst) > 0 || r.load(Ordering::SeqCst) > 0 {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    most.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    if w.load(Ordering::SeqCst) > 0 {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                if write {
                    w.fetch_sub(1, Ordering::SeqCst);
                } else {
                    r.fetch_sub(1, Ordering::SeqCst);
                }
                assert_eq!(side.release(&held).await.unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers never shared"
    );
}

/// Fenced holds draw from one counter for readers and writers, and a writer gets in only
/// after every earlier hold, so its token is newer than all of theirs: a writer paused past
/// its lease has its late write through `fenced_set` refused once the next writer wrote.
#[tokio::test]
async fn a_paused_writers_write_is_refused_once_the_next_writer_wrote() {
    let server = RedisServer::start();
    let rw = rwlock(&server).await;
    let client = rw.client().clone();
    let (reader, writer) = (rw.reader(), rw.writer());
    let (key, fence) = ("{cat}", "{cat}:fence");
    let long = Duration::from_secs(30);
    let paused = writer.try_acquire_fenced(key, fence, Duration::from_millis(200));
    let paused = paused.await.unwrap().expect("a free lock");
    assert_eq!(paused.fencing_token(), Some(1));
    assert!(reader
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .is_none());
    // The writer stops past its lease; readers come in, each with a newer token.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r1 = reader
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .unwrap();
    let r2 = reader
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r1.fencing_token(), r2.fencing_token()), (Some(2), Some(3)));
    assert!(writer
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .is_none());
    for r in [&r1, &r2] {
        assert_eq!(reader.release(r).await.unwrap(), ReleaseOutcome::Released);
    }
    let next = writer
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.fencing_token(), Some(4));
    let (doc, bar) = ("{cat}:doc", "{cat}:doc:fence");
    assert!(client.fenced_set(doc, bar, 4, b"next").await.unwrap());
    assert!(!client.fenced_set(doc, bar, 1, b"stale").await.unwrap());
    assert!(server.inline("GET {cat}:doc").unwrap().contains("next"));
    assert_eq!(
        writer.release(&next).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        writer.release(&paused).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
}

//! Fencing tokens: a holder paused past its TTL is refused by the resource, and the
//! Function-library mode (FCALL) recovers after the library is gone.

use std::sync::Mutex;
use std::time::Duration;

use lockkit::Locker;
use lockkit::{ClientOptions, LockClient, ReleaseOutcome, ScriptMode};
use lockkit_test_support::RedisServer;

/// A resource that remembers the highest fencing token it accepted and refuses older ones:
/// the check every fenced store must make (in SQL: `UPDATE ... WHERE last_token < $token`).
#[derive(Default)]
struct FencedStore {
    state: Mutex<(u64, Vec<String>)>,
}

impl FencedStore {
    fn write(&self, token: u64, value: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap();
        if token < state.0 {
            return Err(format!("stale fencing token {token} < {}", state.0));
        }
        state.0 = token;
        state.1.push(value.to_string());
        Ok(())
    }
}

#[tokio::test]
async fn stale_holder_write_is_refused_by_fencing_token() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let store = FencedStore::default();
    let (key, fence) = ("{invoice:7}", "{invoice:7}:fence");

    let a = client
        .try_acquire_fenced(key, fence, Duration::from_millis(150))
        .await
        .unwrap()
        .expect("free");
    let ta = a.fencing_token().unwrap();
    // A is paused (GC, swap, SIGSTOP...) past its TTL without a watchdog.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(!a.is_valid());

    let b = client
        .try_acquire_fenced(key, fence, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("A's lock expired, B gets it");
    let tb = b.fencing_token().unwrap();
    assert!(tb > ta, "fencing tokens strictly increase: {ta} then {tb}");
    store.write(tb, "B's invoice").unwrap();

    // A wakes up and writes with its old token: refused.
    let err = store.write(ta, "A's stale invoice").unwrap_err();
    assert!(err.contains("stale"), "{err}");
    assert_eq!(
        store.state.lock().unwrap().1,
        vec!["B's invoice".to_string()]
    );
    // And A cannot release B's lock either.
    assert_eq!(
        client.release(&a).await.unwrap(),
        ReleaseOutcome::HeldByOther
    );
}

#[tokio::test]
async fn busy_fenced_acquire_does_not_advance_the_counter() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let first = client
        .try_acquire_fenced("{f}", "{f}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        assert!(client
            .try_acquire_fenced("{f}", "{f}:fence", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none());
    }
    client.release(&first).await.unwrap();
    let next = client
        .try_acquire_fenced("{f}", "{f}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        next.fencing_token(),
        Some(first.fencing_token().unwrap() + 1)
    );
}

#[tokio::test]
async fn function_mode_recovers_after_function_flush_and_restart() {
    let mut server = RedisServer::start();
    let client = LockClient::connect_with(
        &server.url(),
        ClientOptions::new().script_mode(ScriptMode::Function),
    )
    .await
    .unwrap();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let libs: redis::Value = redis::cmd("FUNCTION").arg("LIST").query(&mut c).unwrap();
    let release = lockkit::scripts::RELEASE.loaded_function_name();
    assert!(format!("{libs:?}").contains(release), "{libs:?}");

    let lock = client
        .try_acquire_fenced("{g}", "{g}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    redis::cmd("FUNCTION").arg("FLUSH").exec(&mut c).unwrap();
    assert!(client.release(&lock).await.unwrap().is_released());
    assert_eq!(client.stats().noscript_recoveries, 1);

    server.restart();
    let mut ok = false;
    for _ in 0..20 {
        match client.try_acquire("{g}", Duration::from_secs(5)).await {
            Ok(Some(lock)) => {
                assert!(client.release(&lock).await.unwrap().is_released());
                ok = true;
                break;
            }
            Ok(None) => panic!("restarted server is empty"),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok);
    assert_eq!(client.stats().noscript_recoveries, 2);
}

/// Issue 26, defect 7: a rolling upgrade. An older client's Function library (`lockkit`, whose
/// text differs from this client's) is on the server; this client connects in function mode.
/// It must not replace the older library (whose clients would then call functions with another
/// argument layout): both are loaded side by side, each client calls its own.
#[tokio::test]
async fn function_mode_leaves_an_older_clients_library_in_place() {
    let server = RedisServer::start();
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // The older client's library: another text under the name and function names it used.
    let older = lockkit::scripts::function_library().replace(
        "-- lockkit's scripts as a Redis Function library.",
        "-- an older lockkit's library.",
    );
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&older)
        .query(&mut c)
        .unwrap();
    let client = LockClient::connect_with(
        &server.url(),
        ClientOptions::new().script_mode(ScriptMode::Function),
    )
    .await
    .unwrap();
    let lock = client
        .try_acquire_fenced("{up}", "{up}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(client.release(&lock).await.unwrap().is_released());
    let code: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("lockkit")
        .arg("WITHCODE")
        .query(&mut c)
        .unwrap();
    assert!(
        format!("{code:?}").contains("an older lockkit's library"),
        "the older client's library was replaced: {code:?}"
    );
    // The older client's calls still reach its own functions.
    let released: i64 = redis::cmd("FCALL")
        .arg("lockkit_release")
        .arg(1)
        .arg("{up}")
        .arg("some-token")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 0);
}

/// Issue 26, item 8: the fencing counter is a plain key; if it goes (deleted, evicted, a
/// restart without persistence), the next token is 1 again and "tokens only grow" no longer
/// holds. The rule lockkit documents: the counter has no TTL, so a server that evicts only keys
/// with a TTL (`volatile-*` policies, or `noeviction`) never evicts it, while lock keys (which
/// all have a TTL) may go. Shown under memory pressure with `volatile-lru`: keys with a TTL are
/// evicted, the counter stays, and the next token is the next number. A deleted counter does
/// start again at 1 (what `allkeys-*` eviction would do): the reason for the rule.
#[tokio::test]
async fn the_fencing_counter_survives_eviction_of_keys_with_a_ttl() {
    let server = RedisServer::start_with(lockkit_test_support::ServerOptions {
        extra_args: vec![
            "--maxmemory".into(),
            "4mb".into(),
            "--maxmemory-policy".into(),
            "volatile-lru".into(),
        ],
        ..Default::default()
    });
    let client = LockClient::connect(&server.url()).await.unwrap();
    let ttl = Duration::from_secs(60);
    let mut last = 0;
    for _ in 0..3 {
        let lock = client
            .try_acquire_fenced("{ev}", "{ev}:fence", ttl)
            .await
            .unwrap()
            .unwrap();
        last = lock.fencing_token().unwrap();
        client.release(&lock).await.unwrap();
    }
    assert_eq!(last, 3);
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // Far more than 4 MB of keys with a TTL: the server evicts them to make room.
    let value = "v".repeat(16 << 10);
    for i in 0..1000 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&value)
            .arg("PX")
            .arg(600_000)
            .query(&mut c)
            .unwrap();
    }
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    let evicted: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(evicted > 0, "nothing was evicted: no memory pressure");
    let lock = client
        .try_acquire_fenced("{ev}", "{ev}:fence", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.fencing_token(), Some(last + 1), "the counter went");
    client.release(&lock).await.unwrap();
    // A counter that does go starts again at 1.
    let _: () = redis::cmd("DEL").arg("{ev}:fence").query(&mut c).unwrap();
    let lock = client
        .try_acquire_fenced("{ev}", "{ev}:fence", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.fencing_token(), Some(1));
}

/// The resource in Redis (`fenced_set.lua`): a holder paused past its TTL wakes up after the
/// next holder wrote, and its write is refused; the value is the newer holder's.
#[tokio::test]
async fn a_stale_holders_write_is_refused_by_the_fenced_set_in_redis() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let (key, fence) = ("{doc:9}:lock", "{doc:9}:fence");
    let (value, written) = ("{doc:9}", "{doc:9}:written");
    let a = client
        .try_acquire_fenced(key, fence, Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    let ta = a.fencing_token().unwrap();
    assert!(client.fenced_set(value, written, ta, b"a1").await.unwrap());
    // a pauses past its TTL; b takes the lock and writes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = client
        .try_acquire_fenced(key, fence, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let tb = b.fencing_token().unwrap();
    assert!(tb > ta);
    assert!(client.fenced_set(value, written, tb, b"b1").await.unwrap());
    assert!(
        !client.fenced_set(value, written, ta, b"a2").await.unwrap(),
        "the stale holder's write was accepted"
    );
    assert!(client.fenced_set(value, written, tb, b"b2").await.unwrap());
    assert_eq!(server.inline("GET {doc:9}").unwrap().trim_end(), "$2\r\nb2");
    let e = client
        .fenced_set(value, written, 0, b"x")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), lockkit::ErrorKind::InvalidInput);
    client.release(&b).await.unwrap();
}

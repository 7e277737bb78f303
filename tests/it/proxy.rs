//! The lock client through twemproxy (nutcracker) in front of two real redis-servers.

use std::time::Duration;

use lockkit::Locker;
use lockkit::{ExtendOutcome, LockClient, ReleaseOutcome};
use lockkit_test_support::{Nutcracker, RedisServer};

#[tokio::test]
async fn locks_work_through_twemproxy_with_detected_proxy_mode() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Nutcracker::start(&[&a, &b]);
    let client = LockClient::connect(&proxy.url())
        .await
        .unwrap_or_else(|e| panic!("connect through nutcracker: {e}\n{}", proxy.log()));
    assert!(
        client.is_proxy(),
        "twemproxy closes the connection on CLIENT SETINFO"
    );

    let mut backends_used = [0usize; 2];
    for i in 0..40 {
        let key = format!("lock:proxied:{i}");
        let mut lock = client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("free key");
        assert!(client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            client
                .extend(&mut lock, Duration::from_secs(10))
                .await
                .unwrap(),
            ExtendOutcome::Extended
        );
        for (n, s) in [&a, &b].iter().enumerate() {
            let mut c = redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let v: Option<String> = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
            if v.as_deref() == Some(lock.token()) {
                backends_used[n] += 1;
            }
        }
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    // Keys were sharded over both backends, and every lock lived on exactly one of them.
    assert_eq!(backends_used[0] + backends_used[1], 40);
    assert!(
        backends_used[0] > 0 && backends_used[1] > 0,
        "{backends_used:?} ports {} {}",
        a.port(),
        b.port()
    );
    // Each backend was seeded once by EVAL per script, then EVALSHA: at most 2 recoveries per
    // backend (release and extend), not one per call.
    assert!(
        client.stats().noscript_recoveries <= 4,
        "{:?}",
        client.stats()
    );
    // No request was lost: the proxy never had to close our connection after the handshake.
    assert!(
        !proxy.log().contains("unsupported command 'SCRIPT'"),
        "{}",
        proxy.log()
    );
}

#[tokio::test]
async fn acquire_many_through_twemproxy() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Nutcracker::start(&[&a, &b]);
    let client = LockClient::connect(&proxy.url()).await.unwrap();
    let keys: Vec<String> = (0..20).map(|i| format!("many:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let got = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(got.iter().all(Option::is_some));
    let held: Vec<_> = got.into_iter().flatten().collect();
    let outcomes = client.release_many(&held).await.unwrap();
    assert!(outcomes.iter().all(|o| o.is_released()), "{outcomes:?}");
}

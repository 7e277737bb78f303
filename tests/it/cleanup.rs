//! The clean-up after an acquire whose outcome is unknown, at its seams: a `SET` that arrives
//! late over a connection the client gave up, and an acquire dropped while its clean-up is in
//! flight. Real redis-servers behind a fault relay; every loop is bounded.

use std::time::{Duration, Instant};

use lockkit::{ClientOptions, LockClient, LockOptions, Locker, Redlock, RedlockOptions, WaitMode};
use lockkit_test_support::{DelayRelay, RedisServer};

fn direct(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// How many times `server` has run `command` (lowercase), from `INFO commandstats`.
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut direct(server))
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut direct(server))
        .unwrap()
}

/// Every key in `keys` on `server` is gone within 10 s (of a 30 s TTL): what is still held then.
async fn still_held_after_10s(server: &RedisServer, keys: &[&str]) -> Vec<String> {
    let mut c = direct(server);
    let mut held = |keys: &[&str]| -> Vec<String> {
        keys.iter()
            .filter(|k| redis::cmd("EXISTS").arg(**k).query::<bool>(&mut c).unwrap())
            .map(|k| k.to_string())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !held(keys).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held(keys)
}

/// Issue 35, defect 2: a connection goes silent while acquires wait on it, and what they sent
/// is held by the network (a route black-holed, then back; a middlebox that buffered it) and
/// delivered 6 s later. The client replaced the connection after about a second; the clean-ups
/// of the last acquires on it ran over the new one, found nothing and stopped, and the late
/// `SET`s then held their keys for the whole 30 s TTL: "a compare-and-delete never overtakes
/// its SET" must hold across connections too. 3 s after the flush no key may be held.
#[tokio::test]
async fn commands_of_a_replaced_silent_connection_arriving_late_leave_no_ghost_lock() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect_with(
        &relay.url(),
        ClientOptions::new()
            .response_timeout(Some(Duration::from_millis(200)))
            .wait(WaitMode::Poll),
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(30);
    let warm = client
        .try_acquire("ghost:warm", ttl)
        .await
        .unwrap()
        .unwrap();
    client.release(&warm).await.unwrap();
    let sets_before = command_calls(&server, "set");
    relay.hold();
    let held_at = Instant::now();
    // An acquire every 50 ms for about 2 s: they time out until the silent connection is
    // replaced, then succeed (and are released at once).
    let (mut failed, mut taken) = (0, 0);
    for i in 0..40 {
        match client.try_acquire(&format!("ghost:{i}"), ttl).await {
            Ok(Some(lock)) => {
                taken += 1;
                client.release(&lock).await.unwrap();
            }
            Ok(None) => panic!("ghost:{i} was busy"),
            Err(_) => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if held_at.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    assert!(
        failed >= 3,
        "only {failed} acquires failed: nothing was held"
    );
    assert!(taken > 0, "the silent connection was never replaced");
    tokio::time::sleep_until((held_at + Duration::from_secs(6)).into()).await;
    relay.flush();
    let flushed_at = Instant::now();
    // The held SETs reach the server now (the test shows the late delivery happened).
    let mut late = 0;
    while late == 0 && flushed_at.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        late = command_calls(&server, "set").saturating_sub(sets_before + taken);
    }
    assert!(late > 0, "the held SETs were never delivered");
    tokio::time::sleep_until((flushed_at + Duration::from_secs(3)).into()).await;
    let ghosts = keys(&server, "ghost:*");
    assert!(
        ghosts.is_empty(),
        "{} keys held by nobody 3 s after {late} late SETs arrived (TTL 30 s): {ghosts:?}",
        ghosts.len()
    );
}

/// How an acquire under test is started, and which script its clean-up runs.
struct Case {
    name: &'static str,
    /// A key its command carries (the relay cuts the connection once it passed).
    key: &'static str,
    /// The keys it may leave held.
    keys: &'static [&'static str],
    fair: bool,
}

/// Issue 35, defect 6: an acquire whose reply was lost (the connection was cut right after its
/// command reached the server) runs a compare-and-delete; the network loses that one too, and
/// while it waits for the reply the acquire is dropped (a timeout around it, a client gone).
/// The background retry must still follow: the key is freed well inside its 30 s TTL, for a
/// plain, fenced, batched and fair acquire. (`Unheard` was disarmed as soon as the reply came,
/// before the clean-up: the dropped clean-up left the key held for its whole TTL.)
#[tokio::test]
async fn an_acquire_dropped_during_its_clean_up_leaves_no_lock_behind() {
    let cases = [
        Case {
            name: "plain",
            key: "clean:plain",
            keys: &["clean:plain"],
            fair: false,
        },
        Case {
            name: "fenced",
            key: "{clean:f}:lock",
            keys: &["{clean:f}:lock"],
            fair: false,
        },
        Case {
            name: "batch",
            key: "clean:m1",
            keys: &["clean:m1", "clean:m2"],
            fair: false,
        },
        Case {
            name: "fair",
            key: "{clean:fair}",
            keys: &["{clean:fair}"],
            fair: true,
        },
    ];
    let server = RedisServer::start();
    let ttl = Duration::from_secs(30);
    let mut left = Vec::new();
    for case in cases {
        let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
        let client = LockClient::connect_with(
            &relay.url(),
            ClientOptions::new()
                .response_timeout(Some(Duration::from_secs(1)))
                .wait(WaitMode::Poll),
        )
        .await
        .unwrap();
        let release = if case.fair {
            lockkit::scripts::RELEASE_FAIR.sha()
        } else {
            lockkit::scripts::RELEASE.sha()
        };
        relay.drop_after(case.key.as_bytes());
        relay.lose_next(release.as_bytes());
        let c = client.clone();
        let task = tokio::spawn(async move {
            match case.name {
                "plain" => c.try_acquire("clean:plain", ttl).await.map(drop),
                "fenced" => c
                    .try_acquire_fenced("{clean:f}:lock", "{clean:f}:fence", ttl)
                    .await
                    .map(drop),
                "batch" => c
                    .acquire_many(&["clean:m1", "clean:m2"], ttl)
                    .await
                    .map(drop),
                _ => {
                    let opts = LockOptions::builder(ttl).fair(true).build().unwrap();
                    c.attempt_fair("{clean:fair}", &opts, &lockkit::new_token())
                        .await
                        .map(drop)
                }
            }
        });
        // The clean-up's compare-and-delete was sent and lost: it waits for its reply now.
        let start = Instant::now();
        while relay.lost() == 0 && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            relay.lost(),
            1,
            "{}: the clean-up never went out",
            case.name
        );
        task.abort();
        let _ = task.await;
        for k in still_held_after_10s(&server, case.keys).await {
            left.push(format!("{} ({})", k, case.name));
        }
    }
    assert!(
        left.is_empty(),
        "held for the 30 s TTL after an acquire was dropped during its clean-up: {left:?}"
    );
}

/// Issue 35, defect 6, Redlock: a round lost to two nodes that refused, after the third granted;
/// the undo of that grant is lost on the network, and the round is dropped while it waits for
/// the undo's reply. The grant must still be undone in the background (the round's guard was
/// disarmed before the undo was awaited: the node held the key for its whole TTL).
#[tokio::test]
async fn a_redlock_round_dropped_during_its_undo_leaves_no_lock_behind() {
    let servers = RedisServer::start_many(3);
    let relays: Vec<DelayRelay> = servers
        .iter()
        .map(|s| DelayRelay::start(s.port(), Duration::ZERO, Duration::ZERO).unwrap())
        .collect();
    let urls: Vec<String> = relays.iter().map(DelayRelay::url).collect();
    let redlock = Redlock::connect_with(
        &urls,
        RedlockOptions::new()
            .restart_rule(false)
            .node_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let key = "clean:redlock";
    // Another holder on nodes 1 and 2; they answer after node 0, so the round is decided (lost)
    // once node 0 has granted, and its undo is awaited.
    for s in &servers[1..] {
        redis::cmd("SET")
            .arg(key)
            .arg("someone-else")
            .arg("PX")
            .arg(30_000)
            .query::<()>(&mut direct(s))
            .unwrap();
    }
    for r in &relays[1..] {
        r.set_delay(Duration::from_millis(100));
    }
    relays[0].lose_next(lockkit::scripts::RELEASE.sha().as_bytes());
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(30)).unwrap();
            redlock.attempt(key, &opts).await.map(drop)
        })
    };
    let start = Instant::now();
    while relays[0].lost() == 0 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(relays[0].lost(), 1, "the undo never went out");
    task.abort();
    let _ = task.await;
    assert_eq!(
        still_held_after_10s(&servers[0], &[key]).await,
        Vec::<String>::new(),
        "node 0 held the grant of a lost round for its TTL"
    );
}

/// A locker whose attempts hand back locks with no `min_validity` check of their own (taken
/// with the caller's TTL, handed back 50 ms later), and whose release is slow (a far server).
#[derive(Clone)]
struct SlowToRelease(LockClient);

impl Locker for SlowToRelease {
    async fn attempt(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> lockkit::Result<Option<lockkit::Lock>> {
        let lock = self.0.attempt(key, &LockOptions::new(opts.ttl())?).await;
        // A slow way back: 50 ms of the validity gone.
        tokio::time::sleep(Duration::from_millis(50)).await;
        lock
    }

    async fn release(&self, lock: &lockkit::Lock) -> lockkit::Result<lockkit::ReleaseOutcome> {
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.0.release(lock).await
    }

    async fn extend(
        &self,
        lock: &mut lockkit::Lock,
        ttl: Duration,
    ) -> lockkit::Result<lockkit::ExtendOutcome> {
        self.0.extend(lock, ttl).await
    }

    fn mode(&self) -> &'static str {
        "slow-to-release"
    }
}

/// Issue 35, defect 6, the retry loop: a lock that came back with too little validity is given
/// back by the loop; an acquire dropped while that give-back is in flight must still give it
/// back (in the background), or the key stays held for its whole TTL.
#[tokio::test]
async fn an_acquire_dropped_while_giving_back_a_spent_lock_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let locker = SlowToRelease(LockClient::connect(&server.url()).await.unwrap());
    // Every lock comes back with less than min_validity: the loop gives each one back.
    let opts = LockOptions::builder(Duration::from_secs(30))
        .min_validity(Duration::from_millis(29_690))
        .build()
        .unwrap();
    let key = "clean:given-back";
    let task = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire(key, &opts).await.map(drop) })
    };
    // The lock is taken; its give-back is under way (half a second each).
    let mut c = direct(&server);
    let start = Instant::now();
    while !redis::cmd("EXISTS").arg(key).query::<bool>(&mut c).unwrap()
        && start.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    task.abort();
    let _ = task.await;
    assert_eq!(
        still_held_after_10s(&server, &[key]).await,
        Vec::<String>::new(),
        "a lock the retry loop was giving back stayed held for its TTL"
    );
}

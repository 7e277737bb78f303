//! The lock client on a real 3-primary Redis Cluster on loopback.

use std::collections::HashSet;
use std::time::Duration;

use lockkit::Locker;
use lockkit::{key_slot, ExtendOutcome, LockClient, ReleaseOutcome, Topology};
use lockkit_test_support::RedisCluster;

/// Which node holds `key`: the one whose `GET` answers without a MOVED error.
fn owner(cluster: &RedisCluster, key: &str) -> usize {
    for (i, node) in cluster.nodes().iter().enumerate() {
        let mut c = redis::Client::open(node.url())
            .unwrap()
            .get_connection()
            .unwrap();
        if redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(&mut c)
            .is_ok()
        {
            return i;
        }
    }
    panic!("no node owns {key}");
}

#[tokio::test]
async fn cluster_is_detected_from_any_node_and_locks_work_across_slots() {
    let cluster = RedisCluster::start(3);
    // The URL of the *last* node: detection must not depend on which node is named.
    let client = LockClient::connect(&cluster.nodes()[2].url())
        .await
        .unwrap();
    assert_eq!(client.topology(), Topology::Cluster);

    let mut owners = HashSet::new();
    for i in 0..60 {
        let key = format!("lock:cl:{i}");
        let mut lock = client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("free");
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
        owners.insert(owner(&cluster, &key));
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    assert_eq!(owners.len(), 3, "keys spread over all three primaries");
}

#[tokio::test]
async fn acquire_many_groups_keys_by_slot_instead_of_crossslot() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let keys: Vec<String> = (0..50).map(|i| format!("sku:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let slots: HashSet<u16> = refs.iter().map(|k| key_slot(k.as_bytes())).collect();
    assert!(slots.len() > 10, "the keys span many slots");
    let got = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(got.iter().all(Option::is_some));
    // A second round finds every key busy, in the right positions.
    let again = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(again.iter().all(Option::is_none));
    let held: Vec<_> = got.into_iter().flatten().collect();
    assert_eq!(held.iter().map(|l| l.key()).collect::<Vec<_>>(), refs);
    let outcomes = client.release_many(&held).await.unwrap();
    assert!(outcomes.iter().all(|o| o.is_released()), "{outcomes:?}");
    let all = client
        .acquire_all(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(all.map(|v| v.len()), Some(50));
}

#[tokio::test]
async fn cluster_survives_script_flush_on_one_node_and_fences_with_hash_tags() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let mut locks = Vec::new();
    for i in 0..30 {
        locks.push(
            client
                .try_acquire(&format!("lock:f:{i}"), Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    cluster.nodes()[1].inline("SCRIPT FLUSH").unwrap();
    for lock in &locks {
        assert_eq!(
            client.release(lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    assert!(client.stats().noscript_recoveries >= 1);
    // Fenced acquire needs both keys in one slot: a hash tag does it.
    let lock = client
        .try_acquire_fenced("{job:9}", "{job:9}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.fencing_token(), Some(1));
    // Without a shared tag, the client refuses before sending, naming the fix.
    let err = client
        .try_acquire_fenced("job:a", "job:b:fence", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, lockkit::Error::InvalidKey { .. }), "{err:?}");
    assert!(err.to_string().contains("hash tag"), "{err}");
}

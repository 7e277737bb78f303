//! `maxmemory-policy` (Redis 7.0's `evict.c`): past `CONFIG SET maxmemory`, a policy other
//! than `noeviction` deletes keys until the keyspace is under the limit again, each with an
//! `evicted` keyspace event, before the next command runs (as Redis's `performEvictions`);
//! only what no key can free is refused with `-OOM`. The `allkeys-*` policies take any key,
//! the `volatile-*` ones only keys with a TTL (`volatile-ttl` the one expiring first). Redis
//! picks its `lru`/`lfu`/`random` victims by sampling; the harness keeps no access times, so it
//! takes the keys in its own order: which key goes first may differ from Redis's, not how many
//! go or the events they send.

use crate::server::Server;

/// Which keys `maxmemory` may evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Policy {
    /// `noeviction`: writes are refused with `-OOM` instead.
    #[default]
    NoEviction,
    /// `allkeys-lru`, `allkeys-lfu`, `allkeys-random`.
    AllKeys,
    /// `volatile-lru`, `volatile-lfu`, `volatile-random`.
    Volatile,
    /// `volatile-ttl`.
    VolatileTtl,
}

/// Redis's names, in the order its error lists them.
const NAMES: [&str; 8] = [
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];

/// The policy `name` (any case) names, as `CONFIG GET` will show it; `None` for another.
pub(crate) fn parse(name: &[u8]) -> Option<(Policy, &'static str)> {
    let name = NAMES
        .iter()
        .find(|n| name.eq_ignore_ascii_case(n.as_bytes()))?;
    let policy = match *name {
        "noeviction" => Policy::NoEviction,
        "volatile-ttl" => Policy::VolatileTtl,
        n if n.starts_with("volatile") => Policy::Volatile,
        _ => Policy::AllKeys,
    };
    Some((policy, name))
}

/// Redis's error for a name that is no policy.
pub(crate) fn bad_name() -> String {
    format!(
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: {}",
        NAMES.join(", ")
    )
}

/// The next key the policy evicts; `None` when it allows none.
fn victim(s: &Server, now: i64) -> Option<Vec<u8>> {
    let mut keys = s.db.iter(now);
    match s.eviction {
        Policy::NoEviction => None,
        Policy::AllKeys => keys.next().map(|(k, _)| k.clone()),
        Policy::Volatile => keys
            .find(|(_, e)| e.expire_at_ms.is_some())
            .map(|(k, _)| k.clone()),
        Policy::VolatileTtl => keys
            .filter_map(|(k, e)| Some((e.expire_at_ms?, k)))
            .min()
            .map(|(_, k)| k.clone()),
    }
}

/// Evicts keys while the keyspace is past `maxmemory`, as the policy allows.
pub(crate) fn evict_due(s: &mut Server) {
    if s.eviction == Policy::NoEviction {
        return;
    }
    while s.db.over_config_max() {
        let now = s.now_ms;
        let Some(key) = victim(s, now) else {
            return;
        };
        s.db.remove(&key, now);
        crate::notify::evicted(s, &key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_redis_names() {
        assert_eq!(
            parse(b"ALLKEYS-LRU"),
            Some((Policy::AllKeys, "allkeys-lru"))
        );
        assert_eq!(
            parse(b"volatile-ttl").map(|p| p.0),
            Some(Policy::VolatileTtl)
        );
        assert_eq!(parse(b"volatile-lfu").map(|p| p.0), Some(Policy::Volatile));
        assert_eq!(parse(b"noeviction").map(|p| p.0), Some(Policy::NoEviction));
        assert_eq!(parse(b"lru"), None);
        assert!(bad_name().ends_with("allkeys-random, noeviction"));
    }
}

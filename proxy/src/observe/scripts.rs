//! Recognising lock scripts from their bodies (as seen in `EVAL` or `SCRIPT LOAD`).
//!
//! The shapes the common lock clients send:
//! - compare-and-delete releases (redis-py, redsync, rslock, node-redlock, lockkit): `GET` the
//!   key(s), compare with `ARGV[1]`, `DEL` on a match; the reply counts what was deleted;
//! - `SET ... NX` inside a script (lockkit's fenced acquire): reply > 0 or `OK` acquired;
//! - node-redlock's multi-key acquire: `EXISTS` every key, then `SET key ARGV[1] PX ARGV[2]`
//!   for each; the reply is the number of keys set, 0 when any was taken;
//! - Redisson's hash locks: `HINCRBY key ARGV[2] 1` + `PEXPIRE key ARGV[1]`, nil when acquired
//!   and the remaining PTTL when taken; the unlock decrements `ARGV[3]` and deletes at zero;
//! - lockkit's fair mode: the acquire queues its ticket (`ZADD`) or takes the lock (`SET`), and
//!   answers `{0, ttl}` or `{place, pttl}`; the release compare-and-deletes `KEYS[1]` only (the
//!   other two keys are the queue); leaving the queue answers 2 when it released a lock held
//!   under the leaver's ticket.

/// What a script does to locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// Compare-and-delete of `KEYS` against `ARGV[1]`.
    CompareDelete,
    /// `SET KEYS[1] ARGV[1] NX PX ARGV[2]`, reply > 0, `OK` or a value when acquired.
    SetNx,
    /// node-redlock: all of `KEYS` set to `ARGV[1]` for `ARGV[2]` ms; reply = keys set.
    MultiAcquire,
    /// Redisson lock: `KEYS[1]`, TTL `ARGV[1]` ms, holder `ARGV[2]`; nil when acquired.
    HashAcquire,
    /// Redisson unlock: `KEYS[1]`, holder `ARGV[3]`; 1 deleted, 0 still held (re-entrant), nil
    /// not held.
    HashRelease,
    /// lockkit's fair acquire: `KEYS[1]` for `ARGV[2]` ms under the ticket `ARGV[1]`; `{0, ttl}`
    /// acquired, `{place, pttl}` queued.
    FairAcquire,
    /// lockkit's fair release: compare-and-delete of `KEYS[1]` (the other keys are its queue).
    FairRelease,
    /// lockkit's fair leave: 2 when it released `KEYS[1]` held by `ARGV[1]`, else not a release.
    FairLeave,
    /// Anything else (extends, application scripts).
    Other,
}

/// Classifies a script body.
///
/// ```
/// use lockkit_proxy::observe::{classify_script, ScriptKind};
/// let release = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end";
/// assert_eq!(classify_script(release.as_bytes()), ScriptKind::CompareDelete);
/// assert_eq!(classify_script(b"return redis.call('INCR', KEYS[1])"), ScriptKind::Other);
/// ```
pub fn classify_script(body: &[u8]) -> ScriptKind {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| {
            if c == '"' {
                '\''
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    let calls = |name: &str| {
        text.contains(&format!("call('{name}'")) || text.contains(&format!("pcall('{name}'"))
    };
    let deletes = calls("del") || calls("unlink");
    if calls("zadd") && calls("set") {
        return ScriptKind::FairAcquire;
    }
    if calls("zrem") && calls("get") && deletes {
        return if text.contains("return2") {
            ScriptKind::FairLeave
        } else {
            ScriptKind::FairRelease
        };
    }
    if calls("hincrby") && calls("pttl") && calls("pexpire") {
        return ScriptKind::HashAcquire;
    }
    if calls("hincrby") && calls("hexists") && deletes {
        return ScriptKind::HashRelease;
    }
    if calls("set") && !deletes {
        if calls("exists") {
            return ScriptKind::MultiAcquire;
        }
        if text.contains("'nx'") {
            return ScriptKind::SetNx;
        }
    }
    if calls("get") && deletes && text.contains("argv[1]") {
        return ScriptKind::CompareDelete;
    }
    ScriptKind::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../lua/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn lockkits_own_scripts() {
        assert_eq!(
            classify_script(&lua("release.lua")),
            ScriptKind::CompareDelete
        );
        assert_eq!(
            classify_script(&lua("acquire_fenced.lua")),
            ScriptKind::SetNx
        );
        assert_eq!(classify_script(&lua("extend.lua")), ScriptKind::Other);
        assert_eq!(
            classify_script(&lua("acquire_fair.lua")),
            ScriptKind::FairAcquire
        );
        assert_eq!(
            classify_script(&lua("release_fair.lua")),
            ScriptKind::FairRelease
        );
        assert_eq!(
            classify_script(&lua("leave_fair.lua")),
            ScriptKind::FairLeave
        );
    }

    #[test]
    fn other_clients_scripts() {
        // redis-py's Lock.release.
        let redis_py = "local token = redis.call('get', KEYS[1])\n\
            if not token or token ~= ARGV[1] then\n    return 0\nend\n\
            redis.call('del', KEYS[1])\nreturn 1\n";
        assert_eq!(
            classify_script(redis_py.as_bytes()),
            ScriptKind::CompareDelete
        );
        // node-redlock 5's acquire and release.
        let acquire = "for i, key in ipairs(KEYS) do\n  if redis.call(\"exists\", key) == 1 then\n    return 0\n  end\nend\n\
            for i, key in ipairs(KEYS) do\n  redis.call(\"set\", key, ARGV[1], \"PX\", ARGV[2])\nend\nreturn #KEYS";
        assert_eq!(
            classify_script(acquire.as_bytes()),
            ScriptKind::MultiAcquire
        );
        let release = "local count = 0\nfor _, key in ipairs(KEYS) do\n  if redis.call(\"get\", key) == ARGV[1] then\n    redis.pcall(\"del\", key)\n    count = count + 1\n  end\nend\nreturn count";
        assert_eq!(
            classify_script(release.as_bytes()),
            ScriptKind::CompareDelete
        );
        // Redisson's RedissonLock.
        let lock = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
            redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; \
            return redis.call('pttl', KEYS[1]);";
        assert_eq!(classify_script(lock.as_bytes()), ScriptKind::HashAcquire);
        let unlock = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; \
            local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then \
            redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); \
            redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";
        assert_eq!(classify_script(unlock.as_bytes()), ScriptKind::HashRelease);
    }
}

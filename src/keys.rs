//! Key rules: which keys lockkit takes, the Redis Cluster hash slot of a key, and the keys
//! lockkit keeps beside a lock key (its fair queue, its release marker).

use crate::error::{Error, Result};

/// Redis refuses keys longer than 512 MB; lockkit keeps lock keys to a sane size.
pub const MAX_KEY_LEN: usize = 64 * 1024;

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "the key is empty; give every lock a name, e.g. `lock:orders:42`".into(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!(
                "the key is {} bytes; lock keys are limited to {MAX_KEY_LEN} bytes (hash long names first)",
                key.len()
            ),
        });
    }
    Ok(())
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key, or of the part inside the
/// first non-empty `{...}` hash tag, modulo 16384 (one implementation for the workspace, in
/// [`lockkit_resp::slot`]).
///
/// ```
/// assert_eq!(lockkit::key_slot(b"foo"), 12182);
/// assert_eq!(lockkit::key_slot(b"{user1000}.following"), lockkit::key_slot(b"{user1000}.followers"));
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    lockkit_resp::slot::key_slot(key)
}

/// The two keys of `key`'s fair queue: the queue itself and the leases of its waiters, in the
/// lock key's hash slot (Redis Cluster): `KEY:lockkit-queue` when the key has a hash tag,
/// `{KEY}:lockkit-queue` when it has none.
///
/// ```
/// assert_eq!(
///     lockkit::fair_queue_keys("order:42"),
///     ["{order:42}:lockkit-queue", "{order:42}:lockkit-leases"]
/// );
/// assert_eq!(
///     lockkit::fair_queue_keys("{order:42}:lock"),
///     ["{order:42}:lock:lockkit-queue", "{order:42}:lock:lockkit-leases"]
/// );
/// ```
pub fn fair_queue_keys(key: &str) -> [String; 2] {
    ["queue", "leases"].map(|what| companion_key(key, what))
}

/// A key lockkit keeps beside `key`, in its hash slot: `KEY:lockkit-WHAT` when the key has a
/// hash tag, `{KEY}:lockkit-WHAT` when it has none. A key whose braces make no tag (`a}b`)
/// gets a name in another slot: callers in a cluster check.
pub(crate) fn companion_key(key: &str, what: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if tagged {
        format!("{key}:lockkit-{what}")
    } else {
        format!("{{{key}}}:lockkit-{what}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_share_the_lock_keys_slot() {
        for key in ["a", "order:42", "{order:42}:lock", "x{y}z", "a{b"] {
            for k in fair_queue_keys(key) {
                assert_eq!(
                    crate::key_slot(k.as_bytes()),
                    crate::key_slot(key.as_bytes())
                );
                assert_ne!(k, key);
            }
        }
        // Braces that make no tag: `{a}b}` would hash `a`; the cluster check refuses these.
        for key in ["a}b", "{}a"] {
            let [q, _] = fair_queue_keys(key);
            assert_ne!(
                crate::key_slot(q.as_bytes()),
                crate::key_slot(key.as_bytes())
            );
        }
    }

    #[test]
    fn empty_and_huge_keys_are_rejected() {
        assert!(matches!(check_key(""), Err(Error::InvalidKey { .. })));
        assert!(matches!(
            check_key(&"x".repeat(MAX_KEY_LEN + 1)),
            Err(Error::InvalidKey { .. })
        ));
        assert!(check_key("lock:a\nb\0c").is_ok());
    }
}

//! Redis Cluster's hash slots: which of the 16,384 slots a key belongs to, as every cluster
//! node and client computes it (the cluster specification's `HASH_SLOT`): CRC16 (XMODEM) of
//! the key, or of its hash tag, modulo 16,384. lockkit's lock client, the proxy and the
//! harness's cluster face all route with this one function.
//!
//! ```
//! use lockkit_resp::slot::key_slot;
//! assert_eq!(key_slot(b"foo"), 12182);
//! // A hash tag puts related keys in one slot.
//! assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
//! ```

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 of the key, or of its hash tag when it has one, modulo
/// [`SLOTS`]. The tag is what lies between the first `{` and the first `}` after it, if that
/// is not empty; an empty tag (`{}`) or a `{` without a `}` hashes the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The part of `key` that decides its slot, if it has a non-empty `{...}` tag.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let len = rest.iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &rest[..len])
}

/// CRC16 as Redis Cluster uses it (XMODEM: polynomial 0x1021, initial value 0, no reflection,
/// no final XOR); its check value, of `123456789`, is `0x31C3`.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_has_the_cluster_specs_check_value() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    /// Slots redis-server itself answers to `CLUSTER KEYSLOT` (asked of redis-server 7.0 with
    /// cluster support on, 2026-12-07).
    #[test]
    fn slots_are_the_ones_redis_answers() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        // An empty tag hashes the whole key: `{user1000}` in the second braces is no tag.
        assert_eq!(key_slot(b"{}{user1000}"), 11203);
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
    }

    #[test]
    fn only_the_first_open_brace_and_the_first_close_after_it_count() {
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(key_slot(b"{bar"), 4015);
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(hash_tag(b"a{b"), None);
        assert_eq!(hash_tag(b"a}b{c}"), Some(&b"c"[..]));
        assert_eq!(hash_tag(b"{}"), None);
        assert_eq!(key_slot(b""), 0);
    }
}

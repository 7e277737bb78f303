//! FUNCTION RESTORE payloads and DEBUG / CONFIG arguments under random input (proptest; cargo
//! fuzz needs a nightly toolchain): no panic, no big reservation, and a refused payload leaves
//! the libraries exactly as they were (issue 40, cases 1, 4, 14, 15). Budget: a few seconds in
//! `cargo test` (64 generated cases each).

use lockkit_harness::{Harness, HarnessOptions, Reply};
use proptest::prelude::*;

/// Redis's CRC-64 (Jones polynomial, reflected).
fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

fn rdb_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// One record of a generated payload.
#[derive(Debug, Clone)]
enum Record {
    /// A library's code as a plain string.
    Code(Vec<u8>),
    /// An LZF string: its compressed bytes and the length it declares.
    Lzf(Vec<u8>, u64),
    /// Bytes as they come (a bad opcode, a cut record).
    Raw(Vec<u8>),
}

fn record() -> impl Strategy<Value = Record> {
    let code = prop_oneof![
        Just(
            b"#!lua name=fresh\nredis.register_function('fresh', function() return 1 end)".to_vec()
        ),
        Just(
            b"#!lua name=mine\nredis.register_function('other', function() return 2 end)".to_vec()
        ),
        Just(b"#!lua name=broken\nlocal x = nil + 1".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    let declared = prop_oneof![0u64..200, Just(1 << 32), Just(1 << 40), Just(u64::MAX)];
    prop_oneof![
        code.prop_map(Record::Code),
        (proptest::collection::vec(any::<u8>(), 0..64), declared)
            .prop_map(|(c, n)| Record::Lzf(c, n)),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Record::Raw),
    ]
}

fn payload(records: &[Record], flip: Option<(usize, u8)>) -> Vec<u8> {
    let mut body = Vec::new();
    for r in records {
        match r {
            Record::Code(c) => {
                body.push(245);
                rdb_len(&mut body, c.len() as u64);
                body.extend_from_slice(c);
            }
            Record::Lzf(c, n) => {
                body.extend_from_slice(&[245, 0xc3]);
                rdb_len(&mut body, c.len() as u64);
                rdb_len(&mut body, *n);
                body.extend_from_slice(c);
            }
            Record::Raw(b) => body.extend_from_slice(b),
        }
    }
    if let Some((at, x)) = flip {
        if !body.is_empty() {
            let at = at % body.len();
            body[at] ^= x;
        }
    }
    body.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

fn harness_with_mine() -> Harness {
    let mut h = Harness::with_options(HarnessOptions::new().memory_limit(16 << 20)).unwrap();
    let r = h.call(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=mine\nlocal calls = 0\n\
         redis.register_function('mine', function() calls = calls + 1 return calls end)",
    ]);
    assert_eq!(r, Reply::Bulk(b"mine".to_vec()));
    h
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_refused_restore_leaves_the_libraries_as_they_were(
        records in proptest::collection::vec(record(), 0..4),
        flip in proptest::option::of((any::<usize>(), 1u8..)),
        policy in prop_oneof![Just("APPEND"), Just("FLUSH"), Just("REPLACE")],
    ) {
        let mut h = harness_with_mine();
        prop_assert_eq!(h.call(&["FCALL", "mine", "0"]), Reply::Int(1));
        let before = h.call(&["FUNCTION", "LIST", "WITHCODE"]);
        let p = payload(&records, flip);
        let r = h.call(&[b"FUNCTION".as_slice(), b"RESTORE", &p, policy.as_bytes()]);
        match r {
            Reply::Error(_) => {
                prop_assert_eq!(h.call(&["FUNCTION", "LIST", "WITHCODE"]), before);
                // The same library, not one loaded again: its state goes on.
                prop_assert_eq!(h.call(&["FCALL", "mine", "0"]), Reply::Int(2));
            }
            Reply::Status(s) => prop_assert_eq!(s, "OK"),
            other => prop_assert!(false, "{:?}", other),
        }
        prop_assert_eq!(h.call(&["PING"]), Reply::Status("PONG".into()));
    }

    #[test]
    fn debug_and_config_arguments_never_panic(
        sub in prop_oneof![
            Just("SLEEP"), Just("SET-ACTIVE-EXPIRE"), Just("SET-DISABLE-DENY-SCRIPTS"),
            Just("JMAP"), Just("QUICKLIST-PACKED-THRESHOLD"), Just("LISTPACK"),
        ],
        arg in proptest::collection::vec(any::<u8>(), 0..24),
        param in prop_oneof![
            Just("maxmemory"), Just("lua-time-limit"), Just("busy-reply-threshold"),
            Just("hash-max-listpack-entries"), Just("notify-keyspace-events"), Just("appendonly"),
        ],
    ) {
        let mut h = Harness::new().unwrap();
        // DEBUG SLEEP moves the virtual clock: no real wait, whatever the number.
        let _ = h.call(&[b"DEBUG".as_slice(), sub.as_bytes(), &arg]);
        let _ = h.call(&[b"CONFIG".as_slice(), b"SET", param.as_bytes(), &arg]);
        let _ = h.call(&[b"CONFIG".as_slice(), b"GET", &arg]);
        let _ = h.call(&[
            b"EVAL".as_slice(),
            b"return redis.pcall('DEBUG', 'SLEEP', ARGV[1])",
            b"0",
            &arg,
        ]);
        prop_assert_eq!(h.call(&["PING"]), Reply::Status("PONG".into()));
    }
}

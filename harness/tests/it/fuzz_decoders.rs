//! The decoders under random input and the script time limit (proptest; cargo fuzz needs a
//! nightly toolchain): `cmsgpack.unpack`, `unpack_one`, `unpack_limit` and `cjson.decode` of
//! random bytes, and of well-formed headers that declare far more than follows, never panic,
//! never hang past the time limit, and leave the next script a working harness (issue 40,
//! cases 8-10). Budget: a few seconds in `cargo test` (64 generated cases).

use std::time::{Duration, Instant};

use lockkit_harness::{Harness, HarnessOptions, Reply};
use proptest::prelude::*;

const LIMIT: Duration = Duration::from_millis(100);

fn harness() -> Harness {
    Harness::with_options(
        HarnessOptions::new()
            .time_limit(LIMIT)
            .memory_limit(32 << 20)
            .keyspace_limit(1 << 20),
    )
    .unwrap()
}

/// The scripts that decode ARGV[1].
const DECODERS: &[&str] = &[
    "local t = {cmsgpack.unpack(ARGV[1])} return #t",
    "local n = cmsgpack.unpack_one(ARGV[1]) return n",
    "local n = cmsgpack.unpack_limit(ARGV[1], 3) return n",
    "local v = cjson.decode(ARGV[1]) return type(v)",
];

/// Input: random bytes, or a MessagePack/JSON head declaring a large container followed by a
/// repeated element (often far fewer than declared, or far more than the time limit allows).
fn input() -> impl Strategy<Value = Vec<u8>> {
    let element = prop_oneof![
        Just(b"\x01".to_vec()),
        Just(b"\x91\x01".to_vec()),
        Just(b"\xa1x".to_vec()),
        proptest::collection::vec(any::<u8>(), 1..4),
    ];
    let msgpack = (
        prop_oneof![Just(0xdcu8), Just(0xddu8), Just(0xdeu8), Just(0xdfu8)],
        any::<u32>(),
        element,
        0usize..200_000,
    )
        .prop_map(|(tag, count, element, reps)| {
            let mut v = vec![tag];
            if tag == 0xdc || tag == 0xde {
                v.extend_from_slice(&(count as u16).to_be_bytes());
            } else {
                v.extend_from_slice(&count.to_be_bytes());
            }
            for _ in 0..reps {
                v.extend_from_slice(&element);
            }
            v
        });
    let json = (
        prop_oneof![Just("[1,"), Just("{\"a\":"), Just("[[[["), Just("\"\\u00")],
        0usize..100_000,
    )
        .prop_map(|(piece, reps)| piece.repeat(reps).into_bytes());
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), msgpack, json,]
}

/// A harness whose next script still works.
fn assert_intact(h: &mut Harness) {
    assert_eq!(
        h.call(&[
            "EVAL",
            "return cjson.encode({cmsgpack.unpack(cmsgpack.pack(1, 2))})",
            "0"
        ]),
        Reply::Bulk(b"[1,2]".to_vec())
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn decoders_never_panic_or_run_past_the_time_limit(data in input(), which in 0..DECODERS.len()) {
        let mut h = harness();
        let started = Instant::now();
        let args: [&[u8]; 4] = [b"EVAL", DECODERS[which].as_bytes(), b"0", &data];
        // An answer or an error are both fine; a panic fails the test.
        let _ = h.call(&args);
        let took = started.elapsed();
        // The limit plus generous room for a shared, noisy machine and a debug build: a
        // decoder that never looked at the clock took seconds per MB.
        prop_assert!(took < LIMIT + Duration::from_secs(3), "{took:?} for {} bytes", data.len());
        assert_intact(&mut h);
    }
}

//! Pub/sub across connections of `lockkit lua serve` (RESP2): the same steps, sent over raw
//! connections to the built binary and to a real redis-server 7.0, must get the same replies
//! and the same messages, PUBLISH from a script included.

use crate::common;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

/// One step: a connection sends a command and reads its reply, or reads one more message.
#[derive(Clone, Copy)]
enum Step {
    A(&'static [&'static str]),
    B(&'static [&'static str]),
    ReadA,
}
use Step::{ReadA, A, B};

const STEPS: &[Step] = &[
    A(&["SUBSCRIBE", "c1", "c2"]),
    ReadA,
    B(&["PUBLISH", "c1", "hello"]),
    ReadA,
    B(&["PUBLISH", "nobody", "x"]),
    A(&["PSUBSCRIBE", "c*"]),
    B(&["PUBLISH", "c2", "both"]),
    ReadA,
    ReadA,
    A(&["GET", "x"]),
    A(&["PING"]),
    A(&["PING", "hi"]),
    B(&["PUBSUB", "NUMSUB", "c1", "c3"]),
    B(&["PUBSUB", "NUMPAT"]),
    B(&["PUBSUB", "CHANNELS", "c1*"]),
    B(&[
        "EVAL",
        "return redis.call('PUBLISH', KEYS[1], ARGV[1])",
        "1",
        "c1",
        "from a script",
    ]),
    ReadA,
    ReadA,
    A(&["UNSUBSCRIBE", "c1"]),
    A(&["UNSUBSCRIBE", "c2"]),
    A(&["UNSUBSCRIBE", "zz"]),
    A(&["PUNSUBSCRIBE"]),
    A(&["PUNSUBSCRIBE"]),
    A(&["UNSUBSCRIBE"]),
    A(&["GET", "x"]),
    B(&["PUBLISH", "c1", "gone"]),
    B(&["PUBSUB", "NUMPAT"]),
    B(&["PUBSUB", "CHANNELS"]),
    A(&["SUBSCRIBE", "c9"]),
    A(&["RESET"]),
    B(&["PUBLISH", "c9", "after reset"]),
];

fn run(port: u16) -> Vec<Reply> {
    let mut a = Client::to(port);
    let mut b = Client::to(port);
    let mut replies = Vec::new();
    for step in STEPS {
        let r = match step {
            A(argv) => a.call(&argv.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()),
            B(argv) => b.call(&argv.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()),
            ReadA => a.reply(),
        };
        replies.push(r);
    }
    replies
}

#[test]
fn pubsub_answers_and_delivers_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let want = run(redis.port());
    let got = run(serve.port);
    let differ: Vec<String> = (0..want.len().max(got.len()))
        .filter(|&i| want.get(i) != got.get(i))
        .map(|i| {
            format!(
                "step {i}: redis-server {:?}, lua serve {:?}",
                want.get(i),
                got.get(i)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} steps differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// Messages of this size published to a subscriber that never reads them.
const BIG: usize = 1 << 20;
/// How many: six times Redis's 32 MiB `client-output-buffer-limit pubsub` hard limit.
const MESSAGES: usize = 192;
/// The server's peak resident memory must stay below this (KiB): the 32 MiB limit plus what
/// the debug build holds anyway after relaying 1 MiB requests (about 60 MiB with nobody
/// subscribed), well under the 192 MiB published.
const BOUNDED_PEAK_KIB: u64 = 128 * 1024;

#[test]
fn a_subscriber_that_never_reads_is_closed_past_the_pubsub_limit() {
    let serve = Serve::start(&[]);
    let mut sub = serve.connect();
    let confirmed = sub.call(&[b"SUBSCRIBE", b"big"]);
    assert_eq!(
        confirmed,
        Reply::Array(vec![
            Reply::Bulk(b"subscribe".to_vec()),
            Reply::Bulk(b"big".to_vec()),
            Reply::Int(1)
        ])
    );
    // `sub` reads nothing more while another connection publishes.
    let mut publisher = serve.connect();
    let payload = vec![b'x'; BIG];
    let mut received = Vec::new();
    for _ in 0..MESSAGES {
        received.push(publisher.call(&[b"PUBLISH", b"big", &payload]));
    }
    let (_, peak) = serve.rss_kib();
    // The subscriber now reads what was written to it before it was closed, then the end of
    // the connection (a read that times out means it was never closed).
    let mut delivered = 0;
    let end = loop {
        match sub.try_reply() {
            Ok(_) => delivered += 1,
            Err(e) => break e.kind(),
        }
    };
    let reached = received.iter().filter(|r| **r == Reply::Int(1)).count();
    eprintln!(
        "peak RSS {peak} KiB; {delivered} of {MESSAGES} messages delivered; {reached} PUBLISH \
         answered 1; the subscriber's connection ended with {end:?}"
    );
    let closed = matches!(
        end,
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
    );
    assert!(
        closed && peak < BOUNDED_PEAK_KIB && delivered < MESSAGES,
        "the subscriber must be closed (ended with {end:?}, {delivered} messages delivered) \
         and the server's peak RSS stay under {BOUNDED_PEAK_KIB} KiB (was {peak} KiB)"
    );
    // The publisher was not closed, and the channel has no subscriber left.
    assert_eq!(
        publisher.call(&[b"PUBSUB", b"NUMSUB", b"big"]),
        Reply::Array(vec![Reply::Bulk(b"big".to_vec()), Reply::Int(0)])
    );
}

//! Pub/sub across connections of `lockkit lua serve` (RESP2): the same steps, sent over raw
//! connections to the built binary and to a real redis-server 7.0, must get the same replies
//! and the same messages, PUBLISH from a script included.

mod common;

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

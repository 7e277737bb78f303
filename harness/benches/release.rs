//! `release.lua` through the offline harness, cached by SHA (EVALSHA): evals per second; and
//! the cost of one `redis.call` inside a script.
//!
//! `cargo bench -p lockkit-harness --bench release`

// `criterion_group!` defines a public function it gives no doc.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lockkit_harness::{Harness, Reply};

fn argv(sha: &str) -> Vec<Vec<u8>> {
    ["EVALSHA", sha, "1", "lock:bench", "tok-1"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect()
}

fn release(c: &mut Criterion) {
    let mut h = Harness::new().expect("the harness starts");
    let sha = h
        .load_script(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/release.lua"))
        .expect("release.lua loads");
    let call = argv(&sha);
    let mut g = c.benchmark_group("release.lua");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("evalsha", "held-by-caller"), |b| {
        b.iter(|| {
            h.set("lock:bench", "tok-1");
            let r = h.call_argv(&call);
            debug_assert_eq!(r, Reply::Int(1));
            r
        })
    });
    g.bench_function(BenchmarkId::new("evalsha", "held-by-other"), |b| {
        h.set("lock:bench", "tok-2");
        b.iter(|| h.call_argv(&call))
    });
    g.bench_function(BenchmarkId::new("evalsha", "not-held"), |b| {
        h.call(&["DEL", "lock:bench"]);
        b.iter(|| h.call_argv(&call))
    });
    g.finish();
}

/// One `redis.call` inside a script: EVALSHA of a script making one call of `GET`, against the
/// same script returning without it (the difference is the call).
fn redis_call(c: &mut Criterion) {
    let mut h = Harness::new().expect("the harness starts");
    h.set("k", "v");
    let mut g = c.benchmark_group("redis.call");
    g.throughput(Throughput::Elements(1));
    for (name, body) in [
        ("none", "return KEYS[1]"),
        ("get", "return redis.call('GET', KEYS[1])"),
        ("get-x4", "redis.call('GET', KEYS[1]) redis.call('GET', KEYS[1]) redis.call('GET', KEYS[1]) return redis.call('GET', KEYS[1])"),
    ] {
        let sha = match h.call(&["SCRIPT", "LOAD", body]) {
            Reply::Bulk(b) => String::from_utf8(b).expect("a hex digest"),
            other => panic!("SCRIPT LOAD answered {other:?}"),
        };
        let call: Vec<Vec<u8>> = ["EVALSHA", sha.as_str(), "1", "k"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        g.bench_function(BenchmarkId::new("evalsha", name), |b| {
            b.iter(|| h.call_argv(&call))
        });
    }
    g.finish();
}

criterion_group!(benches, release, redis_call);
criterion_main!(benches);

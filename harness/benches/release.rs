//! `release.lua` through the offline harness, cached by SHA (EVALSHA): evals per second.
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

criterion_group!(benches, release);
criterion_main!(benches);

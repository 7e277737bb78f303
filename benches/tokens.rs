//! Pure benchmarks (no server): token generation and lock key formatting, the per-acquire work
//! done before anything reaches the network.

// `criterion_group!` defines a public function it gives no doc.
#![allow(missing_docs)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn tokens(c: &mut Criterion) {
    let mut group = c.benchmark_group("token_and_key");
    group.throughput(Throughput::Elements(1));
    group.bench_function("new_token (uuid v4, 32 hex)", |b| {
        b.iter(|| black_box(lockkit::new_token()));
    });
    let mut n = 0u64;
    group.bench_function("key format! (lock:order:N)", |b| {
        b.iter(|| {
            n += 1;
            black_box(format!("lock:order:{n}"))
        });
    });
    let mut buf = String::new();
    group.bench_function("key into reused buffer", |b| {
        b.iter(|| {
            n += 1;
            buf.clear();
            let _ = write!(buf, "lock:order:{n}");
            black_box(buf.len())
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = tokens
}
criterion_main!(benches);

//! Network benchmarks against a throwaway local redis-server (from the test support):
//! a try_acquire + release cycle in each script mode (EVALSHA vs EVAL vs FCALL), and
//! `acquire_many` of 100 keys against 100 sequential acquires, on loopback and behind a proxy
//! that adds ~1 ms each way (a network round trip).
//!
//! `cargo bench --bench lock_ops`; needs `redis-server` on PATH (or REDIS_SERVER_BIN).

// `criterion_group!` defines a public function it gives no doc.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lockkit::Locker;
use lockkit::{ClientOptions, LockClient, ScriptMode};
use lockkit_test_support::{RedisServer, ServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const TTL: Duration = Duration::from_secs(5);
const BATCH: usize = 100;

fn server() -> Option<RedisServer> {
    match RedisServer::try_start(ServerOptions::default()) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("lock_ops benchmarks skipped: {e}");
            None
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn client(rt: &tokio::runtime::Runtime, url: &str, mode: ScriptMode) -> LockClient {
    rt.block_on(LockClient::connect_with(
        url,
        ClientOptions::new().script_mode(mode),
    ))
    .expect("connect to the benchmark server")
}

fn cycle(c: &mut Criterion) {
    let Some(server) = server() else { return };
    let rt = runtime();
    let mut group = c.benchmark_group("cycle");
    group.throughput(Throughput::Elements(1));
    for mode in [ScriptMode::EvalSha, ScriptMode::Eval, ScriptMode::Function] {
        let client = client(&rt, &server.url(), mode);
        let n = AtomicU64::new(0);
        group.bench_function(BenchmarkId::new("try_acquire+release", mode.name()), |b| {
            b.to_async(&rt).iter(|| async {
                let key = format!("bench:cycle:{}", n.fetch_add(1, Ordering::Relaxed) % 1024);
                let lock = client
                    .try_acquire(&key, TTL)
                    .await
                    .expect("acquire")
                    .expect("free key");
                client.release(&lock).await.expect("release");
            });
        });
    }
    group.finish();
}

/// A loopback TCP proxy that holds every chunk for `delay` before passing it on, in both
/// directions: a stand-in for a network round trip (loopback alone is ~15 us here).
async fn delay_proxy(upstream: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind proxy");
    let port = listener.local_addr().expect("proxy address").port();
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                continue;
            };
            let _ = (down.set_nodelay(true), up.set_nodelay(true));
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            tokio::spawn(pump(dr, uw, delay));
            tokio::spawn(pump(ur, dw, delay));
        }
    });
    port
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            return;
        }
        tokio::time::sleep(delay).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn batch(c: &mut Criterion) {
    let Some(server) = server() else { return };
    let rt = runtime();
    batch_group(
        c,
        &rt,
        "acquire_100_keys",
        &server.url(),
        Duration::from_secs(2),
    );
    // The same comparison behind ~1 ms of delay each way (tokio's timer granularity), the order
    // of a round trip between availability zones.
    let port = rt.block_on(delay_proxy(server.port(), Duration::from_millis(1)));
    batch_group(
        c,
        &rt,
        "acquire_100_keys_behind_1ms_each_way",
        &format!("redis://127.0.0.1:{port}"),
        Duration::from_secs(6),
    );
}

fn batch_group(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    url: &str,
    measure: Duration,
) {
    let client = client(rt, url, ScriptMode::EvalSha);
    let keys: Vec<String> = (0..BATCH).map(|i| format!("bench:batch:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(10).measurement_time(measure);
    // Only the acquiring is timed; the locks are released (pipelined) outside the clock.
    group.bench_function("acquire_many", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (client, refs) = (&client, &refs);
            async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let got = client.acquire_many(refs, TTL).await.expect("acquire_many");
                    timed += t.elapsed();
                    let held: Vec<_> = got.into_iter().flatten().collect();
                    assert_eq!(held.len(), BATCH);
                    client.release_many(&held).await.expect("release_many");
                }
                timed
            }
        });
    });
    group.bench_function("sequential_try_acquire", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (client, refs) = (&client, &refs);
            async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let mut held = Vec::with_capacity(BATCH);
                    for k in refs.iter() {
                        held.push(
                            client
                                .try_acquire(k, TTL)
                                .await
                                .expect("acquire")
                                .expect("free"),
                        );
                    }
                    timed += t.elapsed();
                    client.release_many(&held).await.expect("release_many");
                }
                timed
            }
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = cycle, batch
}
criterion_main!(benches);

//! rslock over N Redis nodes: 50 concurrent holders, uniform over 100k keys, hold 0, TTL 5 s,
//! closed loop, one try per cycle (no retry), 1 s warm-up then DURATION s measured.
//! One runtime thread, as `lockkit bench` by default on 2 cores.
//! usage: rslock-peer DURATION_S URL...
use rand::Rng;
use rslock::LockManager;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: usize = 50;
const KEYS: u64 = 100_000;
const TTL: Duration = Duration::from_secs(5);

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let urls: Vec<String> = args.collect();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(secs, urls));
}

async fn run(secs: u64, urls: Vec<String>) {
    let mut lm = LockManager::new(urls);
    // One try per cycle: a contended key is a failed cycle, as `lockkit bench` without --retry.
    lm.set_retry(1, Duration::from_millis(1));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (lm, counting, stop) = (lm.clone(), counting.clone(), stop.clone());
        let (cycles, failed) = (cycles.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let key = format!("rslock:{}", rand::rng().random_range(0..KEYS));
                match lm.lock(key.as_bytes(), TTL).await {
                    Ok(lock) => {
                        lm.unlock(&lock).await;
                        if counting.load(Ordering::Relaxed) {
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    counting.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    counting.store(false, Ordering::Relaxed);
    let took = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let n = cycles.load(Ordering::Relaxed);
    println!(
        "rslock 0.10.0: {:.0} cycles/s over {:.1}s ({} failed acquires)",
        n as f64 / took,
        took,
        failed.load(Ordering::Relaxed)
    );
}

//! `examples/cron.rs` as several processes of several instances each, against real servers:
//! every tick's job runs exactly once.

mod example_bin;

use std::collections::BTreeMap;
use std::time::Duration;

use example_bin::{example_binary, Running};
use lockkit_test_support::RedisServer;

/// What happened to each tick, across all instances.
#[derive(Debug, Default)]
struct Tick {
    ran: usize,
    skipped: usize,
    /// Instances that woke too late or met an error (so "exactly once" may legitimately be 0).
    gave_up: usize,
}

fn run_processes(urls: &[String], processes: &[&str], instances: usize) -> BTreeMap<u64, Tick> {
    let bin = example_binary("cron");
    let running: Vec<Running> = processes
        .iter()
        .map(|name| {
            let mut args = vec![
                "--name".to_string(),
                name.to_string(),
                "--instances".to_string(),
                instances.to_string(),
                "--ticks".to_string(),
                "4".to_string(),
                "--tick-ms".to_string(),
                "500".to_string(),
                "--job-ms".to_string(),
                "40".to_string(),
            ];
            for u in urls {
                args.push("--redis-url".to_string());
                args.push(u.clone());
            }
            Running::start(&bin, &args)
        })
        .collect();
    let mut ticks: BTreeMap<u64, Tick> = BTreeMap::new();
    for p in running {
        for line in p.wait_exit(Duration::from_secs(60)) {
            let Some(rest) = line.strip_prefix("tick=") else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let tick: u64 = words.next().unwrap().parse().unwrap();
            let _instance = words.next().unwrap();
            let t = ticks.entry(tick).or_default();
            match words.next().unwrap() {
                "ran" => t.ran += 1,
                "skipped:" => t.skipped += 1,
                _ => t.gave_up += 1,
            }
        }
    }
    ticks
}

fn assert_each_tick_ran_once(ticks: &BTreeMap<u64, Tick>, instances_total: usize) {
    assert!(ticks.len() >= 4, "{ticks:?}");
    for (n, t) in ticks {
        assert!(t.ran <= 1, "tick {n} ran {} times: {ticks:?}", t.ran);
        if t.gave_up == 0 {
            assert_eq!(t.ran, 1, "tick {n} did not run: {ticks:?}");
        }
        assert!(
            t.ran + t.skipped + t.gave_up <= instances_total,
            "{ticks:?}"
        );
    }
}

#[test]
fn two_processes_of_two_instances_run_each_tick_once() {
    let redis = RedisServer::start();
    let ticks = run_processes(&[redis.url()], &["a", "b"], 2);
    assert_each_tick_ran_once(&ticks, 4);
}

#[test]
fn redlock_over_three_masters_runs_each_tick_once() {
    let servers = RedisServer::start_many(3);
    // Redlock's delayed-restart rule keeps a node out of the vote until it has been up for the
    // lock's TTL (well under a second here; INFO counts whole seconds): as after a real start.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let ticks = run_processes(&urls, &["r"], 3);
    assert_each_tick_ran_once(&ticks, 3);
}

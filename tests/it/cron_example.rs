//! `examples/cron.rs` as several processes of several instances each, against real servers:
//! every tick's job runs exactly once.

use crate::example_bin;

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

#[test]
fn an_unreachable_server_is_one_plain_message_with_no_proxy_guess() {
    let bin = example_binary("cron");
    let dead = format!(
        "redis://127.0.0.1:{}",
        lockkit_test_support::free_port().unwrap()
    );
    let out = std::process::Command::new(&bin)
        .args(["--redis-url", &dead, "--ticks", "1", "--instances", "1"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the cron example");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        !err.contains("proxy"),
        "no proxy guess after a refused connection:\n{err}"
    );
    assert_eq!(
        err.matches("Connection refused").count(),
        1,
        "said once:\n{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal:\n{err}"
    );
    // The tick loop must not start: the error comes before any tick line.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("tick="));
}

#[test]
fn cron_help_does_not_show_an_empty_redis_url() {
    let out = std::process::Command::new(example_binary("cron"))
        .arg("--help")
        .env_remove("REDIS_URL")
        .output()
        .expect("run the cron example");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("REDIS_URL"), "{help}");
    assert!(!help.contains("REDIS_URL="), "{help}");
}

#[test]
fn timings_out_is_replaced_not_appended_and_its_folder_created() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs").join("job-timings.txt");
    for _ in 0..2 {
        let args: Vec<String> = [
            "--redis-url",
            &redis.url(),
            "--instances",
            "1",
            "--ticks",
            "1",
            "--tick-ms",
            "200",
            "--job-ms",
            "10",
            "--timings-out",
            file.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Running::start(&example_binary("cron"), &args).wait_exit(Duration::from_secs(30));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1, "one run's timings only:\n{text}");
    assert!(text.trim_end().ends_with("ms"), "{text}");
}

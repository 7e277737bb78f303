//! The options of `lockkit bench` (clap derive; the doc comments are the help text), parsed into
//! the load generator's plain [`BenchConfig`], which validates them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use lockkit_loadgen::config::{
    BenchConfig, HoldDist, KeyDist, Primitive, ScriptModes, WaitStyle, DEFAULT_OUT,
};
use lockkit_loadgen::faults::{parse_faults, FaultList};
use lockkit_report::units::{parse_count, parse_duration};

/// Which keys the clients lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeyDistArg {
    /// Every cycle locks a key nobody else uses (no contention at all).
    Unique,
    /// Uniformly random over `--keys` keys.
    Uniform,
    /// Zipf over `--keys` keys (`--zipf-s`): a few keys are hot.
    Zipf,
    /// Everybody wants the same one key.
    Hot,
}

/// Which lock primitive the clients take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum PrimitiveArg {
    /// One holder per key (lockkit::LockClient).
    #[default]
    Mutex,
    /// Many readers or one writer per key (lockkit::RwLock); `--read-ratio` of the cycles read.
    Rwlock,
    /// `--permits` holders per key at most (lockkit::Semaphore).
    Semaphore,
}

/// How the hold time inside the critical section varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HoldDistArg {
    /// Exactly `--hold`.
    Fixed,
    /// Uniform in 0..2×`--hold` (mean `--hold`).
    Uniform,
    /// Exponential with mean `--hold`, capped at 10×`--hold`.
    Exp,
}

/// How the lock scripts are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScriptModeArg {
    /// `SCRIPT LOAD` once, then `EVALSHA` (the library's default).
    Evalsha,
    /// `EVAL` with the script text every call.
    Eval,
    /// `FCALL` of the `lockkit` Function library (Redis 7+).
    Fcall,
    /// evalsha, eval and fcall in turn, each for `--duration`, compared in one table.
    All,
}

/// How a worker that meets a busy lock waits for it (with `--retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WaitArg {
    /// Woken by the release (the library's default; polls where the target can not notify).
    Notify,
    /// Sleep the retry delay plus jitter between attempts.
    Poll,
    /// Take turns through a first-come-first-served queue in Redis (`LockOptionsBuilder::fair`),
    /// woken by the release that names the next in line (polling where it can not notify).
    Fair,
}

/// Measure lock latency and throughput on a Redis target and size TTLs from it.
///
/// Without --url (and without REDIS_URL) a throwaway local redis-server is started on a free
/// loopback port, measured and stopped.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Target URL (redis://, rediss://, redis+unix://; password in the URL is never printed).
    /// Repeat for Redlock over independent masters (lockkit::Redlock). Default: $REDIS_URL, else
    /// a throwaway server.
    #[arg(long = "url", value_name = "URL")]
    pub urls: Vec<String>,

    /// Without --url: how many throwaway servers to start; more than one runs Redlock over them.
    #[arg(long, default_value = "1", value_parser = parse_count, allow_hyphen_values = true, value_name = "N", conflicts_with = "urls")]
    pub nodes: u64,

    /// Redlock (several --url, or --nodes above 1): how long one node may take to answer one
    /// command before its vote counts as failed (RedlockOptions::node_timeout). Keep it small
    /// against the TTL; raise it where the nodes are far away or the machine is loaded.
    #[arg(long, default_value = "50ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub node_timeout: Duration,

    /// How long to measure, after the warm-up (e.g. 10s, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub duration: Duration,

    /// Stop after this many measured cycles (the duration still bounds the run).
    #[arg(long, value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub cycles: Option<u64>,

    /// Load before measuring; nothing of it is recorded (except safety violations).
    #[arg(long, default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub warmup: Duration,

    /// Concurrent lock users (tasks).
    #[arg(long, default_value = "50", value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub clients: u64,

    /// Multiplexed connections the clients share (ClientOptions::connections), per server. Each
    /// pipelines concurrent calls; on one server two (the default) let it work on one while the
    /// tool fills the other, and more only split the same work into smaller writes. Redlock
    /// (several --url, or --nodes above 1) defaults to one per node: three nodes already work
    /// in parallel, and one connection gives each node all the clients' commands in one read
    /// (results/2026-12-07-0530-redlock-server-cost).
    #[arg(long, value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub connections: Option<u64>,

    /// Runtime worker threads of the load generator (default: half the cores, at least 1, leaving
    /// the rest to a server on the same machine).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Size of the key space (ignored by --key-dist unique and hot).
    #[arg(long, default_value = "100k", value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub keys: u64,

    /// How keys are picked.
    #[arg(long, value_enum, default_value_t = KeyDistArg::Uniform)]
    pub key_dist: KeyDistArg,

    /// Zipf exponent for --key-dist zipf.
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    pub zipf_s: f64,

    /// Time spent inside the critical section per lock (0: release at once). Sleeps use the
    /// runtime timer, which rounds up to whole milliseconds.
    #[arg(long, default_value = "0", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub hold: Duration,

    /// How the hold time varies around --hold.
    #[arg(long, value_enum, default_value_t = HoldDistArg::Fixed)]
    pub hold_dist: HoldDistArg,

    /// Lock TTL.
    #[arg(long, default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub ttl: Duration,

    /// Retry a busy lock (delay + jitter until a deadline) instead of one attempt per cycle.
    #[arg(long)]
    pub retry: bool,

    /// Fixed pause between retries.
    #[arg(long, default_value = "1ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub retry_delay: Duration,

    /// Random extra pause between retries, uniform in 0..=this.
    #[arg(long, default_value = "1ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub retry_jitter: Duration,

    /// Give up retrying after this long (counted as an `acquire_timeout` error).
    #[arg(long, default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub retry_deadline: Duration,

    /// Holders renew their locks with the library's watchdog (every TTL/3).
    #[arg(long)]
    pub watchdog: bool,

    /// Explicit `extend` calls per held lock, spread over the hold time (measured as `extend`).
    #[arg(long, default_value = "0", value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub extends: u64,

    /// Locks per cycle, taken with one pipelined `acquire_many` and freed with `release_many`.
    #[arg(long, default_value = "1", value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub batch: u64,

    /// How the release/extend scripts are called.
    #[arg(long, value_enum, default_value_t = ScriptModeArg::Evalsha)]
    pub script_mode: ScriptModeArg,

    /// With --retry, how a worker waits for a busy lock: woken by its release, polling, or
    /// taking turns in a fair queue in Redis.
    #[arg(long, value_enum, default_value_t = WaitArg::Notify)]
    pub wait: WaitArg,

    /// Open loop: start this many cycles per second in total, on a fixed schedule; latency counts
    /// from the scheduled start (no coordinated omission). Default: closed loop, as fast as it goes.
    #[arg(long, value_parser = parse_count, allow_hyphen_values = true, value_name = "N")]
    pub rate: Option<u64>,

    /// Folder for the JSON report and the HdrHistogram logs. The default, created in the
    /// current directory, holds a `.gitignore` so runs never land in a git repository.
    #[arg(long, default_value = DEFAULT_OUT, value_name = "DIR")]
    pub out: PathBuf,

    /// Write the JSON report to this path (the logs go beside it).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// No progress line and no summary table; print only where the report went.
    #[arg(long)]
    pub quiet: bool,

    /// Also measure the server's ceiling with redis-benchmark -P 16 (SET NX PX and the release
    /// EVALSHA) and report the ratio. Needs redis-benchmark and a redis:// TCP target.
    #[arg(long)]
    pub ceiling: bool,

    /// Pause budget in the TTL recommendation (GC, swap, a stopped VM).
    #[arg(long, default_value = "50ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub pause_budget: Duration,

    /// Safety factor in the TTL recommendation.
    #[arg(long, default_value_t = 2.0, value_name = "X")]
    pub safety_factor: f64,

    /// Exit 0 even when the safety checker finds violations or lost locks (for demonstrations;
    /// without it such a run exits with code 4).
    #[arg(long)]
    pub allow_violations: bool,

    /// Prefix of every key the benchmark writes.
    #[arg(long, default_value = "lockkit:bench:", value_name = "PREFIX")]
    pub key_prefix: String,

    /// Faults on a seeded schedule, comma-separated, one event per period each:
    /// `server-pause=DURATION/EVERY` (SIGSTOP/SIGCONT a throwaway server),
    /// `holder-pause=DURATION/EVERY` (one holder stops inside its critical section, renewals
    /// too, as in a GC pause), `kill-connections/EVERY` (CLIENT KILL TYPE normal),
    /// `restart/EVERY` (a throwaway server restarted empty). server-pause and restart need the
    /// throwaway servers (no --url). Network faults, through the proxy's `faults` plugin
    /// in-process between the bench and each node: `delay=D[~J]` (every command, give or take
    /// J), `drop=P%` (connections cut), `blackhole=DURATION/EVERY` (nothing passes).
    /// E.g. server-pause=300ms/2s,kill-connections/2s or delay=5ms~2ms,drop=1%,blackhole=300ms/5s.
    #[arg(long, value_name = "LIST", value_parser = parse_faults)]
    pub faults: Option<FaultList>,

    /// Seed of the fault schedule and of the key choice (default: from the clock; the report
    /// says which).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Every holder takes its lock with a fencing token and presents it, on entering and at
    /// the end of its critical section, to an in-process resource that refuses older tokens
    /// (a semaphore's per permit slot; a read-write lock's readers read, its writers write);
    /// safety.violations then counts only what the resource accepted, and safety.fencing the
    /// writes, refused and unsafe accesses and the lease overlaps. One server only (Redlock
    /// cannot issue fencing tokens). Leaves one counter per key, PREFIXfence:{KEY}.
    #[arg(long)]
    pub fencing: bool,

    /// The lock primitive: mutex (one holder per key), rwlock (many readers or one writer) or
    /// semaphore (--permits holders per key). The safety checker applies its rule.
    #[arg(long, value_enum, default_value_t = PrimitiveArg::Mutex)]
    pub primitive: PrimitiveArg,

    /// --primitive semaphore: how many holders one key admits at once.
    #[arg(long, default_value = "2", value_parser = parse_count, value_name = "N")]
    pub permits: u64,

    /// --primitive rwlock: the share of cycles that read (0 to 1); the others write.
    #[arg(long, default_value = "0.9", value_name = "R")]
    pub read_ratio: f64,
}

impl From<BenchArgs> for BenchConfig {
    fn from(a: BenchArgs) -> Self {
        let redlock = a.urls.len() > 1 || a.nodes > 1;
        let connections = a.connections.unwrap_or(if redlock { 1 } else { 2 });
        BenchConfig {
            urls: a.urls,
            nodes: a.nodes,
            node_timeout: a.node_timeout,
            duration: a.duration,
            cycles: a.cycles,
            warmup: a.warmup,
            clients: a.clients,
            connections,
            threads: a.threads,
            keys: a.keys,
            key_dist: a.key_dist.into(),
            zipf_s: a.zipf_s,
            hold: a.hold,
            hold_dist: a.hold_dist.into(),
            ttl: a.ttl,
            retry: a.retry,
            retry_delay: a.retry_delay,
            retry_jitter: a.retry_jitter,
            retry_deadline: a.retry_deadline,
            watchdog: a.watchdog,
            extends: a.extends,
            batch: a.batch,
            script_mode: a.script_mode.into(),
            wait: a.wait.into(),
            rate: a.rate,
            out: a.out,
            json: a.json,
            quiet: a.quiet,
            ceiling: a.ceiling,
            pause_budget: a.pause_budget,
            safety_factor: a.safety_factor,
            allow_violations: a.allow_violations,
            key_prefix: a.key_prefix,
            faults: a.faults,
            seed: a.seed,
            fencing: a.fencing,
            primitive: a.primitive.into(),
            permits: a.permits,
            read_ratio: a.read_ratio,
        }
    }
}

impl From<KeyDistArg> for KeyDist {
    fn from(v: KeyDistArg) -> Self {
        match v {
            KeyDistArg::Unique => KeyDist::Unique,
            KeyDistArg::Uniform => KeyDist::Uniform,
            KeyDistArg::Zipf => KeyDist::Zipf,
            KeyDistArg::Hot => KeyDist::Hot,
        }
    }
}

impl From<PrimitiveArg> for Primitive {
    fn from(v: PrimitiveArg) -> Self {
        match v {
            PrimitiveArg::Mutex => Primitive::Mutex,
            PrimitiveArg::Rwlock => Primitive::Rwlock,
            PrimitiveArg::Semaphore => Primitive::Semaphore,
        }
    }
}

impl From<HoldDistArg> for HoldDist {
    fn from(v: HoldDistArg) -> Self {
        match v {
            HoldDistArg::Fixed => HoldDist::Fixed,
            HoldDistArg::Uniform => HoldDist::Uniform,
            HoldDistArg::Exp => HoldDist::Exp,
        }
    }
}

impl From<ScriptModeArg> for ScriptModes {
    fn from(v: ScriptModeArg) -> Self {
        match v {
            ScriptModeArg::Evalsha => ScriptModes::Evalsha,
            ScriptModeArg::Eval => ScriptModes::Eval,
            ScriptModeArg::Fcall => ScriptModes::Fcall,
            ScriptModeArg::All => ScriptModes::All,
        }
    }
}

impl From<WaitArg> for WaitStyle {
    fn from(v: WaitArg) -> Self {
        match v {
            WaitArg::Notify => WaitStyle::Notify,
            WaitArg::Poll => WaitStyle::Poll,
            WaitArg::Fair => WaitStyle::Fair,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchConfig {
        let mut v = vec!["bench"];
        v.extend_from_slice(args);
        Wrap::parse_from(v).bench.into()
    }

    #[test]
    fn the_command_line_defaults_are_the_configs() {
        let parsed = serde_json::to_value(parse(&[])).unwrap();
        let plain = serde_json::to_value(BenchConfig::default()).unwrap();
        assert_eq!(parsed, plain);
        assert!(parse(&[]).urls.is_empty());
    }

    #[test]
    fn defaults_are_the_speed_goal_workload() {
        let a = parse(&[]);
        assert_eq!(a.clients, 50);
        assert_eq!(a.connections, 2);
        // Redlock: one connection per node unless asked for more.
        let nodes = [
            "--url",
            "redis://a",
            "--url",
            "redis://b",
            "--url",
            "redis://c",
        ];
        assert_eq!(parse(&nodes).connections, 1);
        assert_eq!(parse(&["--nodes", "3"]).connections, 1);
        assert_eq!(
            parse(&[&nodes[..], &["--connections", "2"]].concat()).connections,
            2
        );
        assert_eq!(a.keys, 100_000);
        assert_eq!(a.hold, Duration::ZERO);
        assert_eq!(a.ttl, Duration::from_secs(5));
        assert_eq!(a.loop_mode(), "closed");
        assert!(a.validate().is_ok());
    }

    #[test]
    fn wait_fair_is_a_wait_mode_and_refuses_fencing() {
        let a = parse(&["--retry", "--wait", "fair"]);
        assert!(a.wait.is_fair());
        assert_eq!(a.wait.mode(), lockkit::WaitMode::Notify);
        assert!(a.validate().is_ok());
        let e = parse(&[
            "--retry",
            "--wait",
            "fair",
            "--fencing",
            "--key-dist",
            "hot",
        ])
        .validate()
        .unwrap_err();
        assert!(e.contains("--fencing"), "{e}");
    }

    #[test]
    fn counts_and_durations_take_suffixes() {
        let a = parse(&[
            "--keys",
            "10k",
            "--rate",
            "2k",
            "--hold",
            "250ms",
            "--duration",
            "2m",
        ]);
        assert_eq!(a.keys, 10_000);
        assert_eq!(a.rate, Some(2_000));
        assert_eq!(a.hold, Duration::from_millis(250));
        assert_eq!(a.duration, Duration::from_secs(120));
        assert_eq!(a.loop_mode(), "open");
    }

    #[test]
    fn bad_values_are_refused_by_the_parser() {
        for args in [
            vec!["bench", "--duration", "10x"],
            vec!["bench", "--keys", "ten"],
            vec!["bench", "--key-dist", "gaussian"],
        ] {
            assert!(Wrap::try_parse_from(args).is_err());
        }
        // A negative value reaches the value parser, which names the accepted forms.
        let e = Wrap::try_parse_from(["bench", "--clients", "-1"]).unwrap_err();
        assert!(e.to_string().contains("`-1` is not a count"), "{e}");
        let e = Wrap::try_parse_from(["bench", "--hold", "-5ms"]).unwrap_err();
        assert!(e.to_string().contains("`-5ms` is not a duration"), "{e}");
    }

    #[test]
    fn zero_ttl_and_zero_rate_name_the_flag() {
        assert!(parse(&["--ttl", "0"])
            .validate()
            .unwrap_err()
            .contains("--ttl"));
        assert!(parse(&["--ttl", "9000h"])
            .validate()
            .unwrap_err()
            .contains("at most a year"));
        assert!(parse(&["--rate", "0"])
            .validate()
            .unwrap_err()
            .contains("--rate"));
        assert!(parse(&["--batch", "5", "--watchdog"])
            .validate()
            .unwrap_err()
            .contains("--batch"));
        assert!(parse(&["--node-timeout", "0"])
            .validate()
            .unwrap_err()
            .contains("--node-timeout"));
        assert_eq!(
            parse(&["--node-timeout", "2s"]).node_timeout,
            Duration::from_secs(2)
        );
    }

    #[test]
    fn fault_and_fencing_combinations_that_cannot_work_are_refused() {
        let a = parse(&[
            "--faults",
            "server-pause=300ms/2s,kill-connections/1s",
            "--seed",
            "7",
        ]);
        assert!(a.validate().is_ok());
        assert_eq!(a.seed, Some(7));
        let e = a.check_fault_target(true).unwrap_err();
        assert!(e.contains("server-pause") && e.contains("throwaway"), "{e}");
        assert!(a.check_fault_target(false).is_ok());
        // Faults that need no server process are fine against a URL.
        let a = parse(&["--faults", "holder-pause=300ms/1s,kill-connections/2s"]);
        assert!(a.check_fault_target(true).is_ok());
        for (args, says) in [
            (
                vec!["--fencing", "--nodes", "3"],
                "Redlock cannot issue fencing tokens",
            ),
            (
                vec!["--fencing", "--url", "redis://a", "--url", "redis://b"],
                "Redlock",
            ),
            (vec!["--fencing", "--batch", "4"], "--batch"),
            (
                vec!["--faults", "holder-pause=1ms/1s", "--batch", "4"],
                "--batch",
            ),
            (vec!["--fencing", "--key-dist", "unique"], "unique"),
        ] {
            let e = parse(&args).validate().unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
        assert!(Wrap::try_parse_from(["bench", "--faults", "gc-pause=1s/2s"]).is_err());
        assert!(parse(&["--fencing"]).validate().is_ok());
    }
}

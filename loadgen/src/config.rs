//! What a benchmark runs: [`BenchConfig`], a plain struct (the command line's `lockkit bench`
//! options are parsed into it by the `lockkit` binary, `cli/src/bench_args.rs`), its defaults
//! and its validation.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::faults::{FaultKind, FaultList};

/// Which keys the clients lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Primitive {
    /// One holder per key (lockkit::LockClient).
    #[default]
    Mutex,
    /// Many readers or one writer per key (lockkit::RwLock); `--read-ratio` of the cycles read.
    Rwlock,
    /// `--permits` holders per key at most (lockkit::Semaphore).
    Semaphore,
}

impl Primitive {
    /// The name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Rwlock => "rwlock",
            Primitive::Semaphore => "semaphore",
        }
    }
}

/// How the hold time inside the critical section varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldDist {
    /// Exactly `--hold`.
    Fixed,
    /// Uniform in 0..2×`--hold` (mean `--hold`).
    Uniform,
    /// Exponential with mean `--hold`, capped at 10×`--hold`.
    Exp,
}

/// How the lock scripts are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptModes {
    /// `SCRIPT LOAD` once, then `EVALSHA` (the library's default).
    Evalsha,
    /// `EVAL` with the script text every call.
    Eval,
    /// `FCALL` of the `lockkit` Function library (Redis 7+).
    Fcall,
    /// evalsha, eval and fcall in turn, each for `--duration`, compared in one table.
    All,
}

impl ScriptModes {
    /// The library modes this choice runs, in order.
    pub fn modes(self) -> Vec<lockkit::ScriptMode> {
        use lockkit::ScriptMode as M;
        match self {
            ScriptModes::Evalsha => vec![M::EvalSha],
            ScriptModes::Eval => vec![M::Eval],
            ScriptModes::Fcall => vec![M::Function],
            ScriptModes::All => vec![M::EvalSha, M::Eval, M::Function],
        }
    }
}

/// How a worker that meets a busy lock waits for it (with `--retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitStyle {
    /// Woken by the release (the library's default; polls where the target can not notify).
    Notify,
    /// Sleep the retry delay plus jitter between attempts.
    Poll,
    /// Take turns through a first-come-first-served queue in Redis (`LockOptionsBuilder::fair`),
    /// woken by the release that names the next in line (polling where it can not notify).
    Fair,
}

impl WaitStyle {
    /// The library's wait mode.
    pub fn mode(self) -> lockkit::WaitMode {
        match self {
            WaitStyle::Notify | WaitStyle::Fair => lockkit::WaitMode::Notify,
            WaitStyle::Poll => lockkit::WaitMode::Poll,
        }
    }

    /// Whether acquires queue in fair mode.
    pub fn is_fair(self) -> bool {
        self == WaitStyle::Fair
    }
}

/// One benchmark: the target, the workload, the reports. Each field is the `lockkit bench`
/// option of the same name (`urls`: `--url`); [`BenchConfig::default`] has the command line's
/// defaults. Without `urls` (and without REDIS_URL) a throwaway local redis-server is started on
/// a free loopback port, measured and stopped.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// Target URL (redis://, rediss://, redis+unix://; password in the URL is never printed).
    /// Repeat for Redlock over independent masters (lockkit::Redlock). Default: $REDIS_URL, else
    /// a throwaway server.
    #[serde(skip)]
    pub urls: Vec<String>,

    /// Without --url: how many throwaway servers to start; more than one runs Redlock over them.
    pub nodes: u64,

    /// Redlock (several --url, or --nodes above 1): how long one node may take to answer one
    /// command before its vote counts as failed (RedlockOptions::node_timeout). Keep it small
    /// against the TTL; raise it where the nodes are far away or the machine is loaded.
    #[serde(serialize_with = "ser_dur")]
    pub node_timeout: Duration,

    /// How long to measure, after the warm-up (e.g. 10s, 2m).
    #[serde(serialize_with = "ser_dur")]
    pub duration: Duration,

    /// Stop after this many measured cycles (the duration still bounds the run).
    pub cycles: Option<u64>,

    /// Load before measuring; nothing of it is recorded (except safety violations).
    #[serde(serialize_with = "ser_dur")]
    pub warmup: Duration,

    /// Concurrent lock users (tasks).
    pub clients: u64,

    /// Multiplexed connections the clients share (ClientOptions::connections), per server (per
    /// node for Redlock). Each pipelines concurrent calls; on one server two let it work on one
    /// while the tool fills the other, and more only split the same work into smaller writes.
    /// The CLI gives Redlock one per node unless asked (each node then reads all the clients'
    /// commands in one read).
    pub connections: u64,

    /// Runtime worker threads of the load generator (default: half the cores, at least 1, leaving
    /// the rest to a server on the same machine).
    pub threads: Option<usize>,

    /// Size of the key space (ignored by --key-dist unique and hot).
    pub keys: u64,

    /// How keys are picked.
    pub key_dist: KeyDist,

    /// Zipf exponent for --key-dist zipf.
    pub zipf_s: f64,

    /// Time spent inside the critical section per lock (0: release at once). Sleeps use the
    /// runtime timer, which rounds up to whole milliseconds.
    #[serde(serialize_with = "ser_dur")]
    pub hold: Duration,

    /// How the hold time varies around --hold.
    pub hold_dist: HoldDist,

    /// Lock TTL.
    #[serde(serialize_with = "ser_dur")]
    pub ttl: Duration,

    /// Retry a busy lock (delay + jitter until a deadline) instead of one attempt per cycle.
    pub retry: bool,

    /// Fixed pause between retries.
    #[serde(serialize_with = "ser_dur")]
    pub retry_delay: Duration,

    /// Random extra pause between retries, uniform in 0..=this.
    #[serde(serialize_with = "ser_dur")]
    pub retry_jitter: Duration,

    /// Give up retrying after this long (counted as an `acquire_timeout` error).
    #[serde(serialize_with = "ser_dur")]
    pub retry_deadline: Duration,

    /// Holders renew their locks with the library's watchdog (every TTL/3).
    pub watchdog: bool,

    /// Explicit `extend` calls per held lock, spread over the hold time (measured as `extend`).
    pub extends: u64,

    /// Locks per cycle, taken with one pipelined `acquire_many` and freed with `release_many`.
    pub batch: u64,

    /// How the release/extend scripts are called.
    pub script_mode: ScriptModes,

    /// With --retry, how a worker waits for a busy lock: woken by its release, polling, or
    /// taking turns in a fair queue in Redis.
    pub wait: WaitStyle,

    /// Open loop: start this many cycles per second in total, on a fixed schedule; latency counts
    /// from the scheduled start (no coordinated omission). Default: closed loop, as fast as it goes.
    pub rate: Option<u64>,

    /// Folder for the JSON report and the HdrHistogram logs. The default, created in the
    /// current directory, holds a `.gitignore` so runs never land in a git repository.
    pub out: PathBuf,

    /// Write the JSON report to this path (the logs go beside it).
    pub json: Option<PathBuf>,

    /// No progress line and no summary table; print only where the report went.
    pub quiet: bool,

    /// Also measure the server's ceiling with redis-benchmark -P 16 (SET NX PX and the release
    /// EVALSHA) and report the ratio. Needs redis-benchmark and a redis:// TCP target.
    pub ceiling: bool,

    /// Pause budget in the TTL recommendation (GC, swap, a stopped VM).
    #[serde(serialize_with = "ser_dur")]
    pub pause_budget: Duration,

    /// Safety factor in the TTL recommendation.
    pub safety_factor: f64,

    /// Exit 0 even when the safety checker finds violations or lost locks (for demonstrations;
    /// without it such a run exits with code 4).
    pub allow_violations: bool,

    /// Prefix of every key the benchmark writes.
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
    pub faults: Option<FaultList>,

    /// Seed of the fault schedule and of the key choice (default: from the clock; the report
    /// says which).
    pub seed: Option<u64>,

    /// Every holder takes its lock with a fencing token and presents it, on entering and at
    /// the end of its critical section, to an in-process resource that refuses older tokens
    /// (a semaphore's per permit slot; a read-write lock's readers read, its writers write);
    /// safety.violations then counts only what the resource accepted, and safety.fencing the
    /// writes, refused and unsafe accesses and the lease overlaps. One server only (Redlock
    /// cannot issue fencing tokens). Leaves one counter per key, PREFIXfence:{KEY}.
    pub fencing: bool,

    /// The lock primitive: mutex (one holder per key), rwlock (many readers or one writer) or
    /// semaphore (--permits holders per key). The safety checker applies its rule.
    pub primitive: Primitive,

    /// --primitive semaphore: how many holders one key admits at once.
    pub permits: u64,

    /// --primitive rwlock: the share of cycles that read (0 to 1); the others write.
    pub read_ratio: f64,
}

fn ser_dur<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&lockkit_report::units::format_duration(*d))
}

/// Where `lockkit bench` writes its reports without `--out` or `--json`.
pub const DEFAULT_OUT: &str = "lockkit-results";

/// The largest key space (the safety checker keeps 4 bytes per key).
pub const MAX_KEYS: u64 = 100_000_000;

impl BenchConfig {
    /// Checks the options against each other; the error names the flag and the fix.
    pub fn validate(&self) -> Result<(), String> {
        self.check_run_length()?;
        self.check_sizes()?;
        self.check_batch()?;
        self.check_primitive()?;
        self.check_fencing()?;
        self.check_timing()?;
        self.check_output()?;
        Ok(())
    }

    /// Checks the TTL, the duration and the open loop's rate.
    fn check_run_length(&self) -> Result<(), String> {
        if self.ttl < Duration::from_millis(3) {
            return Err(
                "--ttl must be at least 3 ms (Redis counts whole ms and 2 ms go to the drift allowance); try --ttl 5s"
                    .into(),
            );
        }
        if self.ttl > lockkit::MAX_TTL {
            return Err(
                "--ttl must be at most a year (the lock library refuses longer locks); try --ttl 5s"
                    .into(),
            );
        }
        if self.duration.is_zero() {
            return Err("--duration 0: nothing would be measured; try --duration 10s".into());
        }
        if self.rate == Some(0) {
            return Err(
                "--rate 0: an open loop needs at least one cycle per second; omit --rate for a closed loop"
                    .into(),
            );
        }
        Ok(())
    }

    /// Checks clients, connections, nodes, threads, keys and the batch size, each in its range.
    fn check_sizes(&self) -> Result<(), String> {
        if self.clients == 0 || self.clients > 10_000 {
            return Err("--clients must be between 1 and 10k".into());
        }
        if self.connections == 0 || self.connections > 1024 {
            return Err("--connections must be between 1 and 1024".into());
        }
        if self.nodes == 0 || self.nodes > 9 {
            return Err("--nodes must be between 1 and 9".into());
        }
        if self.threads == Some(0) {
            return Err("--threads must be at least 1".into());
        }
        if self.keys == 0 || self.keys > MAX_KEYS {
            return Err("--keys must be between 1 and 100m".into());
        }
        if !(self.zipf_s > 0.0 && self.zipf_s.is_finite()) {
            return Err("--zipf-s must be a positive number, e.g. 0.99".into());
        }
        if self.batch == 0 || self.batch > 10_000 {
            return Err("--batch must be between 1 and 10k".into());
        }
        Ok(())
    }

    /// Checks what a batch of several locks does not combine with.
    fn check_batch(&self) -> Result<(), String> {
        if self.batch > 1 && self.key_dist == KeyDist::Hot {
            return Err("--batch > 1 needs several keys; use --key-dist uniform or zipf".into());
        }
        if self.batch > 1 && (self.retry || self.watchdog || self.extends > 0) {
            return Err(
                "--batch > 1 runs single acquire_many attempts; it does not combine with --retry, --watchdog or --extends"
                    .into(),
            );
        }
        let holder_pause = self
            .faults
            .as_ref()
            .is_some_and(|f| f.has(FaultKind::HolderPause));
        if self.batch > 1 && (self.fencing || holder_pause) {
            return Err(
                "--batch > 1 has no single critical section per lock; it does not combine with --fencing or --faults holder-pause"
                    .into(),
            );
        }
        Ok(())
    }

    /// Checks the primitive (one server for a semaphore or read-write lock), its permits and read ratio.
    fn check_primitive(&self) -> Result<(), String> {
        if self.primitive != Primitive::Mutex {
            let name = self.primitive.name();
            if self.nodes > 1 || self.urls.len() > 1 {
                return Err(format!(
                    "--primitive {name} runs on one server (Redlock has only the mutex); use one --url"
                ));
            }
            if self.batch > 1 || self.wait.is_fair() {
                return Err(format!(
                    "--primitive {name} does not combine with --batch > 1 or --wait fair (they are the mutex's); drop them"
                ));
            }
        }
        if self.permits == 0 || self.permits > u64::from(u32::MAX) {
            return Err("--permits must be at least 1; try --permits 3".into());
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return Err(
                "--read-ratio is a share of the cycles, from 0 to 1; try --read-ratio 0.9".into(),
            );
        }
        Ok(())
    }

    /// Checks what fencing needs: one server, no fair queue, keys that holders share.
    fn check_fencing(&self) -> Result<(), String> {
        if self.fencing && (self.nodes > 1 || self.urls.len() > 1) {
            return Err(
                "--fencing needs one server: Redlock cannot issue fencing tokens (independent nodes share no counter); drop --fencing or use one --url"
                    .into(),
            );
        }
        if self.wait.is_fair() && self.fencing {
            return Err(
                "--wait fair takes its locks through the fair queue's script, which draws no fencing token; it does not combine with --fencing"
                    .into(),
            );
        }
        if self.fencing && self.key_dist == KeyDist::Unique {
            return Err(
                "--fencing guards keys that holders share; --key-dist unique never shares one (use uniform, zipf or hot)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Checks the node timeout, the retry deadline and delay, extends and the safety factor.
    fn check_timing(&self) -> Result<(), String> {
        if self.node_timeout.is_zero() {
            return Err("--node-timeout must be greater than zero; try --node-timeout 50ms".into());
        }
        if self.retry && self.retry_deadline.is_zero() {
            return Err("--retry-deadline must be greater than zero".into());
        }
        if self.retry && self.retry_delay > self.retry_deadline {
            return Err("--retry-delay is longer than --retry-deadline".into());
        }
        if self.extends > 1_000 {
            return Err("--extends must be at most 1000".into());
        }
        if !(self.safety_factor >= 1.0 && self.safety_factor.is_finite()) {
            return Err("--safety-factor must be at least 1".into());
        }
        Ok(())
    }

    /// Checks the key prefix and the JSON path.
    fn check_output(&self) -> Result<(), String> {
        if self.key_prefix.is_empty() {
            return Err("--key-prefix must not be empty".into());
        }
        // The library refuses keys over 64 KiB; leave room for the key number.
        if self.key_prefix.len() > 60 * 1024 {
            return Err(
                "--key-prefix is longer than 60 KiB; lockkit refuses keys over 64 KiB".into(),
            );
        }
        if self.json.as_ref().is_some_and(|p| p.is_dir()) {
            return Err("--json names a folder; give a file path (or use --out DIR)".into());
        }
        Ok(())
    }

    /// Refuses faults that act on server processes against a target lockkit did not start.
    pub fn check_fault_target(&self, url_given: bool) -> Result<(), String> {
        let Some(list) = &self.faults else {
            return Ok(());
        };
        match list.scheduled.iter().find(|s| s.kind.needs_throwaway()) {
            Some(s) if url_given => Err(format!(
                "--faults {}: lockkit only pauses and restarts the throwaway servers it starts itself, not a --url (or REDIS_URL) target; drop the URL to run against throwaway servers (--nodes N for several), or keep kill-connections and holder-pause",
                s.kind.name()
            )),
            _ => Ok(()),
        }
    }

    /// Closed or open loop, for the report.
    pub fn loop_mode(&self) -> &'static str {
        if self.rate.is_some() {
            "open"
        } else {
            "closed"
        }
    }
}

impl Default for BenchConfig {
    /// The defaults of `lockkit bench` (the speed goal's workload).
    fn default() -> Self {
        BenchConfig {
            urls: Vec::new(),
            nodes: 1,
            node_timeout: Duration::from_millis(50),
            duration: Duration::from_secs(10),
            cycles: None,
            warmup: Duration::from_secs(1),
            clients: 50,
            connections: 2,
            threads: None,
            keys: 100_000,
            key_dist: KeyDist::Uniform,
            zipf_s: 0.99,
            hold: Duration::ZERO,
            hold_dist: HoldDist::Fixed,
            ttl: Duration::from_secs(5),
            retry: false,
            retry_delay: Duration::from_millis(1),
            retry_jitter: Duration::from_millis(1),
            retry_deadline: Duration::from_secs(1),
            watchdog: false,
            extends: 0,
            batch: 1,
            script_mode: ScriptModes::Evalsha,
            wait: WaitStyle::Notify,
            rate: None,
            out: PathBuf::from(DEFAULT_OUT),
            json: None,
            quiet: false,
            ceiling: false,
            pause_budget: Duration::from_millis(50),
            safety_factor: 2.0,
            allow_violations: false,
            key_prefix: "lockkit:bench:".to_string(),
            faults: None,
            seed: None,
            fencing: false,
            primitive: Primitive::Mutex,
            permits: 2,
            read_ratio: 0.9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_closed_loop() {
        let c = BenchConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.loop_mode(), "closed");
        let e = BenchConfig {
            fencing: true,
            nodes: 3,
            ..BenchConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("Redlock cannot issue fencing tokens"), "{e}");
    }
}

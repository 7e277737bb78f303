//! lockkit-loadgen: the load generator behind `lockkit bench`.
//!
//! It drives the lock library ([`lockkit::LockClient`]) exactly as users do and measures it:
//! throughput, contention, per-operation latency in HdrHistograms (one per task and operation,
//! merged once a second into interval logs), errors by kind, lost locks, and mutual-exclusion
//! violations found by an exact in-process checker. It writes a JSON report (schema
//! `lockkit.bench/1`), one HdrHistogram interval log per operation and a self-contained HTML
//! report with SVG plots ([`lockkit_report::html`], also `lockkit report` for several runs), and
//! sizes TTLs from the measured timings ([`lockkit_report::ttl`]).
//!
//! It takes a plain [`config::BenchConfig`] (no command-line parsing here: the `lockkit` binary
//! parses `lockkit bench`'s options into it).
//!
//! ```no_run
//! use std::time::Duration;
//! use lockkit_loadgen::config::BenchConfig;
//!
//! # fn main() -> anyhow::Result<()> {
//! let config = BenchConfig {
//!     duration: Duration::from_secs(2),
//!     keys: 10_000,
//!     out: "/tmp/r".into(),
//!     ..BenchConfig::default()
//! };
//! let outcome = lockkit_loadgen::bench::bench(config)?;
//! assert_eq!(outcome.violations(), 0);
//! # Ok(()) }
//! ```
//!
//! # Loop modes
//! Closed loop (the default) runs every client as fast as it can: peak throughput, with latency
//! counted from each request's send. Open loop (`--rate N`) starts cycles on a fixed schedule and
//! counts latency from the *scheduled* start, as wrk2 does, so a stalled server shows in the tail
//! instead of hiding (coordinated omission); the report counts late starts.
//!
//! # Errors
//! Bad options, an unreachable or refusing server, or an unwritable output folder fail before
//! anything is written, with one line naming the cause and the fix.
//!
//! # Limitations and caveats
//! - The safety checker is exact only within one process: several load machines each check
//!   their own holders.
//! - The tool's CPU is read from `/proc/self/stat` (Linux); elsewhere it is left out.
//! - Several `--url` run [`lockkit::Redlock`] through the same [`lockkit::Locker`] trait; its
//!   batches (`--batch`) are sequential rounds, not one pipelined round trip.

pub mod bench;
pub mod ceiling;
pub mod checker;
pub mod config;
pub mod faults;
pub mod fencing;
pub mod keys;
pub mod locker;
pub mod progress;
mod run;
pub mod target;
pub mod worker;

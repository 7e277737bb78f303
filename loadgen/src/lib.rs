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
//! ```no_run
//! use clap::Parser;
//! use lockkit_loadgen::args::BenchArgs;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: BenchArgs,
//! }
//!
//! # fn main() -> anyhow::Result<()> {
//! let cli = Cli::parse_from(["bench", "--duration", "2s", "--keys", "10k", "--out", "/tmp/r"]);
//! lockkit_loadgen::bench::run(cli.bench)?;
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

#![warn(missing_docs)]

pub mod args;
pub mod bench;
pub mod ceiling;
pub mod checker;
pub mod exit;
pub mod faults;
pub mod fencing;
pub mod keys;
pub mod locker;
pub mod progress;
mod run;
pub mod target;
pub mod worker;

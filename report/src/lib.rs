//! lockkit-report: what lockkit's reports share, for the load generator that writes
//! `lockkit.bench/1`, the proxy that writes `lockkit.observe/1` and the `lockkit` binary that
//! reads both. No tokio, no redis.
//!
//! - [`bench`](mod@bench): the JSON types of `lockkit.bench/1` and the terminal summary;
//! - [`observe`]: the JSON types of `lockkit.observe/1`;
//! - [`files`]: whole-or-nothing writes, reading reports, HdrHistogram interval logs;
//! - [`html`]: the self-contained HTML pages (`lockkit report`);
//! - [`stats`]: HdrHistograms, counters and latency summaries;
//! - [`ttl`]: TTL sizing from measured timings;
//! - [`ttl_advice`]: `lockkit ttl`, the TTL advice read from a bench or observe report;
//! - [`merge`](mod@merge): `lockkit merge`, interval logs of several load machines merged;
//! - [`faults`]: the network fault options and the faults a report records;
//! - [`units`]: counts, durations and rates as the command line takes and prints them;
//! - [`exit`]: the exit codes of `lockkit`.
//!
//! ```
//! use lockkit_report::units::{format_duration, parse_duration};
//! let d = parse_duration("250ms").unwrap();
//! assert_eq!(d, std::time::Duration::from_millis(250));
//! assert_eq!(format_duration(d), "250.0ms");
//! ```

pub mod bench;
pub mod exit;
pub mod faults;
pub mod files;
pub mod html;
pub mod merge;
pub mod observe;
pub mod stats;
pub mod ttl;
pub mod ttl_advice;
pub mod units;

//! `lockkit ttl`: its options (the advice itself is `lockkit_report::ttl_advice`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use lockkit_report::ttl_advice::{TtlOptions, WorkQuantile};
use lockkit_report::units::parse_duration;

/// Print a TTL, watchdog interval and retry policy recommendation, with its reasoning.
#[derive(Debug, Clone, Args)]
pub struct TtlArgs {
    /// A JSON report written by `lockkit bench`.
    #[arg(value_name = "RESULT.json", required_unless_present = "observed")]
    pub result: Option<PathBuf>,

    /// A report of `lockkit proxy --plugin observe` (observe-DATE.json): one TTL per lock
    /// pattern, with the observed hold time (at --quantile) as the work.
    #[arg(long, value_name = "OBSERVE.json", conflicts_with_all = ["result", "work_p99", "work_timings"])]
    pub observed: Option<PathBuf>,

    /// The guarded work's p99 (e.g. 120ms). Default: the benchmark's hold time.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "work_timings", value_name = "DURATION")]
    pub work_p99: Option<Duration>,

    /// The guarded work's measured durations: one per line (12ms, 0.8s, or plain ms) or an
    /// HdrHistogram log in microseconds (as `lockkit bench` writes).
    #[arg(long, value_name = "FILE")]
    pub work_timings: Option<PathBuf>,

    /// Which quantile of --work-timings (or of the observed hold times) to size for.
    #[arg(long, value_enum, default_value_t = QuantileArg::P99)]
    pub quantile: QuantileArg,

    /// Allowance for process pauses (GC, swap, a stopped VM).
    #[arg(long, default_value = "50ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub pause_budget: Duration,

    /// Multiplier over the sum of the timings.
    #[arg(long, default_value_t = 2.0, value_name = "X")]
    pub safety_factor: f64,

    /// Print the recommendation as JSON (the report's `ttl` object).
    #[arg(long)]
    pub json: bool,
}

/// A quantile of the work timings, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuantileArg {
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// The largest seen.
    Max,
}

impl From<TtlArgs> for TtlOptions {
    fn from(a: TtlArgs) -> Self {
        TtlOptions {
            result: a.result,
            observed: a.observed,
            work_p99: a.work_p99,
            work_timings: a.work_timings,
            quantile: match a.quantile {
                QuantileArg::P99 => WorkQuantile::P99,
                QuantileArg::P999 => WorkQuantile::P999,
                QuantileArg::Max => WorkQuantile::Max,
            },
            pause_budget: a.pause_budget,
            safety_factor: a.safety_factor,
            json: a.json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct W {
        #[command(flatten)]
        t: TtlArgs,
    }

    #[test]
    fn work_p99_conflicts_with_timings_file() {
        let r = W::try_parse_from(["ttl", "r.json", "--work-p99", "5ms", "--work-timings", "f"]);
        assert!(r.is_err());
        let ok = W::parse_from(["ttl", "r.json", "--work-p99", "5ms"]).t;
        assert_eq!(ok.work_p99, Some(Duration::from_millis(5)));
    }

    #[test]
    fn the_quantile_reaches_the_options() {
        let o = TtlOptions::from(W::parse_from(["ttl", "r.json", "--quantile", "p999"]).t);
        assert_eq!(o.quantile, WorkQuantile::P999);
        assert_eq!(o.pause_budget, Duration::from_millis(50));
    }
}

//! `lockkit merge`: its options (the merge itself is `lockkit_report::merge`).

use std::path::PathBuf;

use clap::Args;

/// Merge HdrHistogram interval logs from several load machines into one report.
#[derive(Debug, Clone, Args)]
pub(crate) struct MergeArgs {
    /// Interval logs (`.hlog`) written by `lockkit bench`; histograms merge by tag (operation).
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,

    /// Write the merged latencies as JSON to this path.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

//! `lockkit report`: its options (the page itself is `lockkit_report::html`).

use std::path::PathBuf;

use clap::Args;

/// Render one or several bench reports as one self-contained HTML page.
#[derive(Debug, Clone, Args)]
pub(crate) struct ReportArgs {
    /// JSON reports written by `lockkit bench` (their interval logs are read from beside them),
    /// or by `lockkit proxy --plugin observe`; one kind per page. Several reports share every
    /// plot: before/after, two servers, script modes.
    #[arg(required = true, value_name = "JSON")]
    pub inputs: Vec<PathBuf>,

    /// The HTML file to write (written whole or not at all). With one input it defaults to the
    /// JSON's path with `.html`; with several it is required.
    #[arg(short = 'o', long = "out", value_name = "FILE.html")]
    pub out: Option<PathBuf>,
}

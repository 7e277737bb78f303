//! The progress bar of a run on a terminal (indicatif): a spinner while warming up, then a bar
//! over the measured duration with the live figures. Hidden with `--quiet` or when stderr is not
//! a terminal, so logs and pipes get no control characters.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use lockkit_report::units::format_duration;

/// A run's progress display.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Shown only when `quiet` is off and stderr is a terminal.
    pub fn new(quiet: bool) -> Self {
        Self::with_target(if !quiet && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        })
    }

    fn with_target(target: ProgressDrawTarget) -> Self {
        Progress {
            bar: ProgressBar::with_draw_target(None, target),
        }
    }

    /// Whether anything is drawn.
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// A spinner while the warm-up runs.
    pub fn warming_up(&self, warmup: Duration) {
        self.bar.set_style(ProgressStyle::default_spinner());
        self.bar
            .set_message(format!("warming up for {} ...", format_duration(warmup)));
        self.bar.enable_steady_tick(Duration::from_millis(120));
    }

    /// The bar over the measured `duration`.
    pub fn measuring(&self, duration: Duration) {
        self.bar.disable_steady_tick();
        let style = ProgressStyle::with_template("  {spinner} [{bar:30}] {secs:>11}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("secs", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(
                    w,
                    "{:.0}s / {:.0}s",
                    s.pos() as f64 / 1000.0,
                    s.len().unwrap_or(0) as f64 / 1000.0
                );
            })
            .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_length(duration.as_millis() as u64);
        self.bar.set_position(0);
        self.bar.set_message("measuring ...");
    }

    /// Moves the bar to `elapsed` with the live figures.
    pub fn update(&self, elapsed: Duration, msg: String) {
        self.bar.set_position(elapsed.as_millis() as u64);
        self.bar.set_message(msg);
    }

    /// A way to print whole lines on stderr from any task without tearing the bar: the bar steps
    /// aside for each line and is drawn again below it.
    pub fn line_printer(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let bar = self.bar.clone();
        move |line: &str| bar.suspend(|| eprintln!("{line}"))
    }

    /// Takes the bar off the screen (the summary follows).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_or_not_a_terminal_draws_nothing() {
        // Under `cargo test` stderr is captured, not a terminal: hidden either way.
        assert!(Progress::new(true).is_hidden());
        assert!(Progress::new(false).is_hidden() || std::io::stderr().is_terminal());
        let p = Progress::with_target(ProgressDrawTarget::hidden());
        p.warming_up(Duration::from_secs(1));
        p.measuring(Duration::from_secs(10));
        p.update(Duration::from_secs(3), "cycles/s 10k".into());
        assert_eq!(p.bar.position(), 3000);
        assert_eq!(p.bar.length(), Some(10_000));
        p.finish();
        assert!(p.bar.is_finished());
    }
}

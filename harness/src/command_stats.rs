//! What INFO commandstats shows: per command (`parent|sub` for a subcommand), its calls, the
//! time they took, the calls refused before they ran and the ones that answered an error.
//!
//! Counted as Redis 7.0 counts them: a command called from a script or inside `EXEC` is a
//! call of its own (and its time is also in the script's or EXEC's); a call refused before it
//! ran (wrong arity, `-MOVED`, `-NOAUTH`, `-BUSY`, `-OOM`) is a rejected call; a call that ran
//! and answered an error (a script's included) is a failed call; a name Redis does not know,
//! or an unknown subcommand, is counted nowhere.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One command's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    calls: u64,
    usec: u64,
    rejected_calls: u64,
    failed_calls: u64,
}

/// Every command's figures, shared by whatever runs commands (the engine, `lua serve`'s
/// connections); clones count into the same figures.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandStats(Arc<Mutex<BTreeMap<&'static str, Counts>>>);

impl CommandStats {
    fn with(&self, name: &'static str, f: impl FnOnce(&mut Counts)) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(name).or_default());
    }

    /// `name` ran for `took`; `failed`: it answered an error.
    pub(crate) fn called(&self, name: &'static str, took: Duration, failed: bool) {
        self.with(name, |c| {
            c.calls += 1;
            c.usec += u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            c.failed_calls += u64::from(failed);
        });
    }

    /// `name` was refused before it ran.
    pub(crate) fn rejected(&self, name: &'static str) {
        self.with(name, |c| c.rejected_calls += 1);
    }

    /// CONFIG RESETSTAT.
    #[cfg(feature = "serve")]
    pub(crate) fn reset(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The lines of INFO's `# Commandstats` section (without its header), in name order
    /// (Redis's is its hash table's).
    #[cfg(feature = "serve")]
    pub(crate) fn lines(&self) -> String {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for (name, c) in map.iter() {
            let per_call = if c.calls == 0 {
                0.0
            } else {
                c.usec as f64 / c.calls as f64
            };
            out.push_str(&format!(
                "cmdstat_{name}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                c.calls, c.usec, c.rejected_calls, c.failed_calls
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_show_calls_time_rejections_and_failures() {
        let s = CommandStats::default();
        s.called("get", Duration::from_micros(3), false);
        s.called("get", Duration::from_micros(4), true);
        s.clone().rejected("get");
        s.rejected("config|get");
        assert_eq!(
            s.lines(),
            "cmdstat_config|get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n\
             cmdstat_get:calls=2,usec=7,usec_per_call=3.50,rejected_calls=1,failed_calls=1\r\n"
        );
        s.reset();
        assert_eq!(s.lines(), "");
    }
}

//! The exit codes of `lockkit`, and the failures that map to them.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | the run is clean |
//! | 1 | any other failure (no redis-server to start, a report that cannot be written, ...) |
//! | 2 | bad input: a flag value, a URL that does not parse, an unwritable `--out` |
//! | 3 | the target cannot be used: unreachable, not Redis, wrong password, ACL refusal |
//! | 4 | `bench`: the safety checker found violations or lost locks (`--allow-violations`: 0) |
//! | 130 | stopped with Ctrl-C (the report of what ran is written) |

use std::fmt;

/// Any failure not classified below.
pub const FAILED: u8 = 1;
/// Bad input (also what clap's own usage errors exit with).
pub const BAD_INPUT: u8 = 2;
/// The target is unreachable, is no Redis server, or refuses the user.
pub const UNREACHABLE: u8 = 3;
/// The safety checker found mutual-exclusion violations or lost locks.
pub const UNSAFE: u8 = 4;
/// Stopped by Ctrl-C (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

/// The exit codes as `lockkit bench --help` shows them.
pub const HELP: &str = "Exit codes:
  0    the run is clean
  1    any other failure (no redis-server to start, a report that cannot be written, ...)
  2    bad input: a flag value, a URL that does not parse, an unwritable --out
  3    the target cannot be used: unreachable, not Redis, wrong password, ACL refusal
  4    the safety checker found violations or lost locks (--allow-violations: exit 0)
  130  stopped with Ctrl-C (the report of what ran is written)";

/// A failure with its exit code; its text is the whole message.
#[derive(Debug)]
struct Classified {
    code: u8,
    message: String,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Classified {}

fn classified(code: u8, e: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Classified {
        code,
        message: format!("{e:#}"),
    })
}

/// A bad-input failure (exit code 2) saying `e`.
pub fn bad_input(e: impl fmt::Display) -> anyhow::Error {
    classified(BAD_INPUT, e)
}

/// An unusable-target failure (exit code 3) saying `e`.
pub fn unreachable(e: impl fmt::Display) -> anyhow::Error {
    classified(UNREACHABLE, e)
}

/// The exit code for `e`: the first classified failure in its chain, else [`FAILED`].
pub fn code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<Classified>())
        .map_or(FAILED, |c| c.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_code_survives_added_context_and_the_text_is_kept() {
        let e = Err::<(), _>(unreachable("connecting to x: refused"))
            .context("benchmarking")
            .unwrap_err();
        assert_eq!(code(&e), UNREACHABLE);
        assert_eq!(format!("{e:#}"), "benchmarking: connecting to x: refused");
        assert_eq!(code(&bad_input("--ttl 0")), BAD_INPUT);
        assert_eq!(code(&anyhow::anyhow!("other")), FAILED);
    }
}

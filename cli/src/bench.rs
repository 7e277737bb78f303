//! `lockkit bench`: the load generator's outcome mapped to the exit code (the run itself is
//! `lockkit_loadgen::bench`).

use std::process::ExitCode;
use std::sync::Arc;

use lockkit_loadgen::bench::Outcome;
use lockkit_report::exit;

use crate::bench_args::BenchArgs;
use crate::bench_faults::ProxyFaults;

/// Runs the benchmark; the network faults of `--faults` are the proxy's `faults` plugin,
/// in-process.
pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let allow_violations = args.allow_violations;
    let outcome = lockkit_loadgen::bench::bench_with(args.into(), Some(Arc::new(ProxyFaults)))?;
    Ok(ExitCode::from(exit_code(&outcome, allow_violations)))
}

/// 130 for an interrupted run, 4 for violations or lost locks (0 with `--allow-violations`,
/// with a warning), else 0; what is wrong goes to stderr.
fn exit_code(outcome: &Outcome, allow_violations: bool) -> u8 {
    if outcome.interrupted() {
        return exit::INTERRUPTED;
    }
    let (violations, lost) = (outcome.violations(), outcome.lost_locks());
    if violations + lost == 0 {
        return 0;
    }
    if allow_violations {
        eprintln!(
            "warning: the safety checker found {violations} violation(s) and {lost} lost lock(s); \
             exit 0 because of --allow-violations"
        );
        return 0;
    }
    // With 0 violations (fencing stopped every stale write), only leases were lost.
    let what = if violations > 0 {
        "mutual exclusion did not hold (a TTL shorter than the hold time?)"
    } else {
        "the rule held, but leases ran out under their holders (a TTL shorter than the hold \
         time, or paused holders?)"
    };
    eprintln!(
        "error: the safety checker found {violations} violation(s) and {lost} lost lock(s): \
         {what}; exit code {} (--allow-violations exits 0 for a demonstration)",
        exit::UNSAFE
    );
    exit::UNSAFE
}

//! The human summary of a run, printed on the terminal.

use std::time::Duration;

use super::schema::Report;
use crate::units::{format_duration, format_rate};

fn us(v: u64) -> String {
    format_duration(Duration::from_micros(v))
}

/// The human summary of a report.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let interrupted = if r.interrupted {
        "  (INTERRUPTED: partial run)"
    } else {
        ""
    };
    s.push_str(&format!(
        "lockkit bench: {} ({} {}, {}), {} loop{}, {:.1}s measured{interrupted}\n",
        r.target.url,
        r.target.mode,
        r.target.server_version,
        r.target.script_mode,
        r.load.mode,
        r.load
            .rate
            .map(|x| format!(
                " at {}/s ({} late starts)",
                format_rate(x as f64),
                r.load.late_starts
            ))
            .unwrap_or_default(),
        r.duration_s,
    ));
    s.push_str(&format!(
        "  cycles/s {}   attempts/s {} ({:.2} per lock, waiters {})   contention {:.2}%   errors {}   violations {}   lost locks {}\n",
        format_rate(r.throughput.cycles_per_s),
        format_rate(r.throughput.attempts_per_s),
        r.throughput.attempts_per_lock,
        if r.target.wait.is_empty() { "-" } else { &r.target.wait },
        r.contention_rate * 100.0,
        r.errors.total,
        r.safety.violations,
        r.safety.lost_locks,
    ));
    s.push_str(&format!(
        "  {:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "op", "count", "p50", "p90", "p99", "p99.9", "max", "mean"
    ));
    for (op, l) in &r.latency_us {
        if l.count == 0 {
            continue;
        }
        s.push_str(&format!("  {op:<18}"));
        for c in l.cells(us) {
            s.push_str(&format!(" {c:>9}"));
        }
        s.push('\n');
    }
    if r.errors.total > 0 {
        let kinds: Vec<String> = r
            .errors
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        s.push_str(&format!("  errors by kind: {}\n", kinds.join(", ")));
    }
    let rec = &r.errors.recovered;
    let (noscript, cleanups) = (
        rec.noscript.unwrap_or(0),
        rec.unknown_outcome_cleanups.unwrap_or(0),
    );
    if noscript + cleanups + r.safety.watchdog_lost > 0 {
        s.push_str(&format!(
            "  recovered: NOSCRIPT re-sends {noscript}, unknown-outcome clean-ups {cleanups}; watchdog losses {}\n",
            r.safety.watchdog_lost
        ));
    }
    if let Some(f) = &r.safety.fencing {
        let reads = match f.reads {
            0 => String::new(),
            n => format!(", reads {n}"),
        };
        s.push_str(&format!(
            "  fencing: writes {}{reads}, refused {} (stale tokens stopped), unsafe writes {}, lease overlaps {}\n",
            f.writes, f.refused, f.unsafe_writes, f.lease_overlaps
        ));
    }
    if let Some(f) = &r.faults {
        let mut kinds: Vec<(&str, usize)> = Vec::new();
        for e in &f.events {
            match kinds.iter_mut().find(|(k, _)| *k == e.kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((&e.kind, 1)),
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        s.push_str(&format!(
            "  faults {} (seed {}): {} events{}{}\n",
            f.schedule,
            f.seed,
            f.events.len(),
            if kinds.is_empty() { "" } else { ": " },
            kinds.join(", ")
        ));
        if let Some(n) = &f.network {
            s.push_str(&format!(
                "  network faults: {} commands, {} delayed, {} cut before sending, {} replies lost, {} held by a blackhole\n",
                n.commands, n.delayed, n.dropped_before_send, n.dropped_reply_lost, n.blackholed
            ));
        }
    }
    if r.load.mode == "closed" {
        s.push_str("  (closed loop: latencies count from each request's send; a stalled server shows in throughput more than in the tail. Use --rate for an open loop.)\n");
    }
    if let (Some(t), Some(sv)) = (r.cpu.tool_us_per_cycle, r.cpu.server_us_per_cycle) {
        s.push_str(&format!(
            "  CPU per cycle: lockkit {t:.2}us, server {sv:.2}us\n"
        ));
    }
    if let Some(c) = &r.ceiling {
        s.push_str(&format!(
            "  server ceiling 1/(1/{} + 1/{}) = {} cycles/s; this run reached {:.0}% of it\n",
            format_rate(c.set_nx_px_ops),
            format_rate(c.release_evalsha_ops),
            format_rate(c.ceiling_cycles_per_s),
            c.ratio * 100.0
        ));
    }
    s.push_str(&format!(
        "  TTL: {} ms, watchdog every {} ms, retry delay {} ms + jitter {} ms\n",
        r.ttl.recommended_ms,
        r.ttl.watchdog_interval_ms,
        r.ttl.retry.delay_ms,
        r.ttl.retry.jitter_ms
    ));
    s
}

//! The live table `observe` draws on a terminal while the proxy runs.

use std::io::Write;
use std::time::Duration;

use super::LockPatternReport;

/// Rows shown at most (the busiest patterns).
const ROWS: usize = 20;

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// The table as text: one row per pattern, busiest first.
pub(super) fn render(patterns: &[LockPatternReport], elapsed: Duration) -> String {
    let mut rows: Vec<&LockPatternReport> = patterns.iter().collect();
    rows.sort_by_key(|p| std::cmp::Reverse(p.acquired + p.contended));
    let mut out = format!(
        "lockkit proxy: observe, {} s, {} lock pattern(s)\n{:<32} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}\n",
        elapsed.as_secs(),
        patterns.len(),
        "pattern",
        "acquired",
        "contended",
        "released",
        "not held",
        "hold p50",
        "hold p99",
        "hold max",
        "TTL rec."
    );
    for p in rows.iter().take(ROWS) {
        let name: String = p.pattern.chars().take(32).collect();
        out.push_str(&format!(
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}\n",
            name,
            p.acquired,
            p.contended,
            p.released,
            p.released_not_held,
            ms(p.hold_us.p50),
            ms(p.hold_us.p99),
            ms(p.hold_us.max),
            p.recommended_ttl_ms
                .map_or_else(|| "-".to_string(), |t| format!("{t}")),
        ));
    }
    if rows.len() > ROWS {
        out.push_str(&format!("... and {} more\n", rows.len() - ROWS));
    }
    out.push_str("(hold times and TTL in ms; Ctrl-C stops and writes the report)\n");
    out
}

/// Redraws the table in place (home, clear, table).
pub(super) fn draw(patterns: &[LockPatternReport], elapsed: Duration) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\x1b[H\x1b[2J{}", render(patterns, elapsed));
    let _ = out.flush();
}

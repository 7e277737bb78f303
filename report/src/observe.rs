//! The report `lockkit proxy --plugin observe` writes (schema `lockkit.observe/1`): the JSON
//! types, shared by the proxy that writes it and by `lockkit ttl --observed` and
//! `lockkit report` that read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::LatencySummary;

/// The schema name of the observe report.
pub const SCHEMA: &str = "lockkit.observe/1";

/// The report `observe` writes (`DIR/observe-<date>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserveReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// The upstream URL, password hidden.
    pub target: String,
    /// How long the proxy ran, seconds.
    pub duration_s: f64,
    /// Commands seen, by name.
    pub commands: BTreeMap<String, u64>,
    /// One entry per lock pattern, in first-seen order.
    pub locks: Vec<LockPatternReport>,
}

/// The per-pattern part of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockPatternReport {
    /// The folded key (`order:{id}:lock`).
    pub pattern: String,
    /// Acquires that got the lock.
    pub acquired: u64,
    /// Acquires that found it taken.
    pub contended: u64,
    /// Releases that deleted the holder's lock.
    pub released: u64,
    /// Releases that found the lock gone (expired while held, or another holder's by then).
    pub released_not_held: u64,
    /// Locks acquired and never released, forgotten long after their TTL.
    #[serde(default)]
    pub expired_unreleased: u64,
    /// From acquire to release, microseconds.
    pub hold_us: LatencySummary,
    /// TTLs the application asked for, ms (`null` when none was given).
    pub ttl_ms: TtlRange,
    /// The acquire round trip from the proxy to the server and back, microseconds.
    #[serde(default)]
    pub acquire_us: LatencySummary,
    /// The release round trip from the proxy to the server and back, microseconds.
    #[serde(default)]
    pub release_us: LatencySummary,
    /// What `lockkit ttl`'s formula recommends (defaults: safety 2, pause budget 50 ms) with
    /// the observed hold p99 as the work (`null` before a release was seen).
    pub recommended_ttl_ms: Option<u64>,
}

/// The smallest and largest TTL requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TtlRange {
    /// Smallest, ms.
    pub min: Option<u64>,
    /// Largest, ms.
    pub max: Option<u64>,
}

//! The files a run writes: whole-or-nothing writes, HdrHistogram interval logs, file names.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, LogIteratorError, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2Serializer};
use hdrhistogram::Histogram;

use crate::stats::new_histogram;

/// Writes `bytes` to `path` whole or not at all (temporary file in the same folder, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

/// Reads the JSON file at `path`; `hint` says which file to give instead when it is not JSON.
///
/// # Errors
/// An unreadable file, or one that is not JSON.
pub fn read_json(path: &Path, hint: &str) -> anyhow::Result<serde_json::Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON; {hint}", path.display()))
}

/// Reads the JSON report at `path` and checks that its `schema` is `schema`. `kind` names such
/// a report ("a lockkit bench report"); `hint` says which file to give instead, in both errors.
///
/// # Errors
/// An unreadable file, one that is not JSON, or one of another schema.
pub fn read_report(
    path: &Path,
    schema: &str,
    kind: &str,
    hint: &str,
) -> anyhow::Result<serde_json::Value> {
    let value = read_json(path, hint)?;
    check_schema(path, &value, schema, kind, hint)?;
    Ok(value)
}

/// The report's `schema` field ("" when absent).
pub fn schema_of(value: &serde_json::Value) -> &str {
    value.get("schema").and_then(|s| s.as_str()).unwrap_or("")
}

/// Checks that the report `value` read from `path` has `schema`; `kind` and `hint` as in
/// [`read_report`].
///
/// # Errors
/// The report is of another schema (or has none).
pub fn check_schema(
    path: &Path,
    value: &serde_json::Value,
    schema: &str,
    kind: &str,
    hint: &str,
) -> anyhow::Result<()> {
    let found = schema_of(value);
    if found != schema {
        anyhow::bail!(
            "{} is not {kind} (schema {found:?}, expected {schema:?}); {hint}",
            path.display()
        );
    }
    Ok(())
}

/// Checks early that reports can be written to `dir` (creating it), so a bad `--out` fails
/// before the run, not after. Returns whether the folder was created (and can be removed again
/// if the run fails before writing anything).
pub fn check_writable(dir: &Path) -> anyhow::Result<bool> {
    let created = !dir.exists();
    let hint = || {
        format!(
            "cannot write reports to {}; pick a writable folder with --out DIR (or --json FILE)",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).with_context(hint)?;
    tempfile::NamedTempFile::new_in(dir).with_context(hint)?;
    Ok(created)
}

/// One operation's interval log: a sequence of (start offset, length, histogram), offsets
/// counted from the wall-clock moment measuring began.
#[derive(Debug)]
pub struct IntervalLog {
    start: SystemTime,
    entries: Vec<(Duration, Duration, Histogram<u64>)>,
}

impl IntervalLog {
    /// An empty log whose offsets count from `start`.
    pub fn starting(start: SystemTime) -> Self {
        IntervalLog {
            start,
            entries: Vec::new(),
        }
    }

    /// Adds an interval.
    pub fn push(&mut self, start: Duration, len: Duration, h: Histogram<u64>) {
        self.entries.push((start, len, h));
    }

    /// The log text (values in microseconds, tagged with the operation).
    pub fn render(&self, tag: &str) -> anyhow::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let mut ser = V2Serializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "lockkit bench {}: {tag} latency in microseconds",
                env!("CARGO_PKG_VERSION")
            ))
            .with_start_time(self.start)
            .with_base_time(self.start)
            .begin_log_with(&mut buf, &mut ser)?;
        let t = Tag::new(tag);
        for (start, len, h) in &self.entries {
            w.write_histogram(h, *start, *len, t)
                .map_err(|e| anyhow::anyhow!("serializing a histogram: {e:?}"))?;
        }
        drop(w);
        Ok(buf)
    }
}

/// Where the files of one run go: the JSON path and the stem the logs share.
pub fn paths(out: &Path, json: Option<&PathBuf>, stamp: &str, suffix: &str) -> (PathBuf, PathBuf) {
    let json = match json {
        Some(p) if suffix.is_empty() => p.clone(),
        Some(p) => {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
            p.with_file_name(format!("{stem}-{suffix}.json"))
        }
        None if suffix.is_empty() => out.join(format!("bench-{stamp}.json")),
        None => out.join(format!("bench-{stamp}-{suffix}.json")),
    };
    let stem = json.with_extension("");
    (json, stem)
}

/// One interval of a log, as written.
#[derive(Debug)]
pub struct LogInterval {
    /// Its start, as the log gives it (`lockkit bench`: since measuring began).
    pub start: Duration,
    /// Its length.
    pub len: Duration,
    /// Its tag (`untagged` for none).
    pub tag: String,
    /// Its histogram.
    pub hist: Histogram<u64>,
}

/// Reads every interval of an interval log, in order.
///
/// # Errors
/// A line that is neither a comment nor an interval, or a histogram that does not decode.
pub fn read_intervals(bytes: &[u8]) -> anyhow::Result<Vec<LogInterval>> {
    let mut out = Vec::new();
    let mut de = Deserializer::new();
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|LogIteratorError::ParseError { offset }| {
            anyhow::anyhow!(
                "not an HdrHistogram interval log (the line at byte {offset} does not parse); \
                 pass a .hlog written by lockkit bench or another HdrHistogram tool"
            )
        })?;
        let LogEntry::Interval(i) = entry else {
            continue;
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(i.encoded_histogram())
            .context("an interval's histogram is not valid base64")?;
        let hist: Histogram<u64> = de
            .deserialize(&mut raw.as_slice())
            .map_err(|e| anyhow::anyhow!("an interval's histogram does not decode: {e:?}"))?;
        out.push(LogInterval {
            start: i.start_timestamp(),
            len: i.duration(),
            tag: i.tag().map_or("untagged", |t| t.as_str()).to_string(),
            hist,
        });
    }
    if out.is_empty() && !bytes.is_empty() && !bytes.starts_with(b"#") {
        anyhow::bail!("not an HdrHistogram interval log (no intervals found)");
    }
    Ok(out)
}

/// Reads an interval log and merges its intervals by tag (`untagged` for none).
///
/// # Errors
/// As [`read_intervals`].
pub fn read_log(bytes: &[u8]) -> anyhow::Result<BTreeMap<String, Histogram<u64>>> {
    let mut out: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for i in read_intervals(bytes)? {
        let slot = out.entry(i.tag).or_insert_with(new_histogram);
        slot.add(&i.hist)
            .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_leaves_the_whole_file_and_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"{}").unwrap();
        write_atomic(&p, b"{\"a\":1}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn unwritable_out_is_refused_early() {
        let e = check_writable(Path::new("/proc/lockkit-cannot-be-here")).unwrap_err();
        assert!(format!("{e:#}").contains("--out"), "{e:#}");
    }

    #[test]
    fn file_names_follow_json_or_out() {
        let (j, stem) = paths(Path::new("res"), None, "20260101-000000", "");
        assert_eq!(j, Path::new("res/bench-20260101-000000.json"));
        assert_eq!(stem, Path::new("res/bench-20260101-000000"));
        let given = PathBuf::from("x/run.json");
        let (j, _) = paths(Path::new("res"), Some(&given), "s", "eval");
        assert_eq!(j, Path::new("x/run-eval.json"));
    }

    #[test]
    fn interval_log_round_trips_through_the_parser() {
        let mut log = IntervalLog::starting(SystemTime::now());
        let mut h = crate::stats::new_histogram();
        h.record(120).unwrap();
        log.push(Duration::ZERO, Duration::from_secs(1), h);
        let text = log.render("cycle").unwrap();
        let merged = read_log(&text).unwrap();
        assert_eq!(merged["cycle"].len(), 1);
    }
}

//! The command metrics of one connection (`lockkit_proxy_commands_total`,
//! `lockkit_proxy_command_duration_seconds`), kept by the connection itself and handed to the
//! recorder in batches: the counts once per read from the client, the durations once per read
//! from upstream. A command costs an index into the connection's own table of handles (no
//! lock, no allocation); its reply shares one [`super::owed::OwedReply::Timed`] slot with the
//! others of its read, and the replies of one upstream read that were sent in the same read
//! from the client are recorded at once, with one clock read per read on each side.

use std::time::Instant;

use ::metrics::{Counter, Histogram};
use fnv::FnvHashMap;

use crate::plugin::Plugin;

/// Names outside Redis's table a connection gives a label of their own before they share the
/// first one's handles (the recorder bounds the labels again, `other` past its limit).
const MAX_UNKNOWN: usize = 16;

/// A label's handles and what the connection has of it not handed over yet.
#[derive(Debug)]
struct Label {
    counter: Counter,
    histogram: Histogram,
    /// Commands read and not yet counted.
    commands: u64,
}

/// One connection's command metrics.
#[derive(Debug, Default)]
pub(crate) struct ConnMetrics {
    labels: Vec<Label>,
    /// Names of Redis's table, by their static text.
    known: FnvHashMap<&'static str, u16>,
    /// Other names, bounded by [`MAX_UNKNOWN`].
    unknown: FnvHashMap<String, u16>,
    /// The last name asked for (a pipeline repeats one command).
    last: Option<(&'static str, u16)>,
    /// Some label has commands not counted yet.
    uncounted: bool,
    /// Replies in and not yet recorded: label, when their read from the client began, how many.
    replied: Vec<(u16, Instant, u32)>,
}

impl ConnMetrics {
    /// The label of a command (`name`: its name in Redis's table, else `raw`, upper case),
    /// counted once more.
    pub(crate) fn command(
        &mut self,
        metrics: &dyn Plugin,
        name: Option<&'static str>,
        raw: &[u8],
    ) -> u16 {
        let label = match name {
            Some(n) => self.known_label(metrics, n),
            None => self.unknown_label(metrics, raw),
        };
        self.labels[usize::from(label)].commands += 1;
        self.uncounted = true;
        label
    }

    fn known_label(&mut self, metrics: &dyn Plugin, name: &'static str) -> u16 {
        if let Some((n, l)) = self.last {
            if std::ptr::eq(n, name) {
                return l;
            }
        }
        let l = match self.known.get(name) {
            Some(&l) => l,
            None => {
                let l = self.add(metrics, name);
                self.known.insert(name, l);
                l
            }
        };
        self.last = Some((name, l));
        l
    }

    fn unknown_label(&mut self, metrics: &dyn Plugin, raw: &[u8]) -> u16 {
        let name = String::from_utf8_lossy(raw);
        if let Some(&l) = self.unknown.get(name.as_ref()) {
            return l;
        }
        if self.unknown.len() >= MAX_UNKNOWN {
            // Past the bound, under the recorder's `other`.
            return match self.unknown.get("") {
                Some(&l) => l,
                None => {
                    let l = self.add(metrics, "");
                    self.unknown.insert(String::new(), l);
                    l
                }
            };
        }
        let l = self.add(metrics, &name);
        self.unknown.insert(name.into_owned(), l);
        l
    }

    fn add(&mut self, metrics: &dyn Plugin, name: &str) -> u16 {
        let (counter, histogram) = metrics
            .command_handles(name)
            .unwrap_or_else(|| (Counter::noop(), Histogram::noop()));
        self.labels.push(Label {
            counter,
            histogram,
            commands: 0,
        });
        u16::try_from(self.labels.len() - 1).unwrap_or(u16::MAX)
    }

    /// Hands the commands counted since the last call to the recorder.
    pub(crate) fn count(&mut self) {
        if !std::mem::take(&mut self.uncounted) {
            return;
        }
        for l in &mut self.labels {
            if l.commands > 0 {
                l.counter.increment(std::mem::take(&mut l.commands));
            }
        }
    }

    /// The reply of a command of `label` sent from the read that began at `sent` is in.
    pub(crate) fn replied(&mut self, label: u16, sent: Instant) {
        match self.replied.last_mut() {
            Some((l, s, n)) if *l == label && *s == sent => *n += 1,
            _ => self.replied.push((label, sent, 1)),
        }
    }

    /// Records the durations of the replies in since the last call, as of now.
    pub(crate) fn record(&mut self) {
        if self.replied.is_empty() {
            return;
        }
        let now = Instant::now();
        for (label, sent, n) in self.replied.drain(..) {
            if let Some(l) = self.labels.get(usize::from(label)) {
                let secs = now.saturating_duration_since(sent).as_secs_f64();
                l.histogram.record_many(secs, n as usize);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_of_one_command_is_one_label_and_one_batch_of_replies() {
        let metrics = crate::metrics::CommandMetrics::default();
        let mut m = ConnMetrics::default();
        let sent = Instant::now();
        let get = m.command(&metrics as &dyn Plugin, Some("GET"), b"GET");
        for _ in 0..15 {
            assert_eq!(m.command(&metrics as &dyn Plugin, Some("GET"), b"GET"), get);
        }
        let set = m.command(&metrics as &dyn Plugin, Some("SET"), b"SET");
        assert_ne!(set, get);
        assert_eq!(m.labels.len(), 2);
        assert_eq!(m.labels[usize::from(get)].commands, 16);
        m.count();
        assert_eq!(m.labels[usize::from(get)].commands, 0);
        for _ in 0..16 {
            m.replied(get, sent);
        }
        m.replied(set, sent);
        assert_eq!(m.replied, vec![(get, sent, 16), (set, sent, 1)]);
        m.record();
        assert!(m.replied.is_empty());
    }

    #[test]
    fn names_outside_the_table_are_bounded() {
        let metrics = crate::metrics::CommandMetrics::default();
        let mut m = ConnMetrics::default();
        for i in 0..100 {
            m.command(
                &metrics as &dyn Plugin,
                None,
                format!("MADEUP{i}").as_bytes(),
            );
        }
        assert_eq!(m.labels.len(), MAX_UNKNOWN + 1);
        assert_eq!(m.command(&metrics as &dyn Plugin, None, b"MADEUP3"), 3);
    }
}

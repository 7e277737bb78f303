//! The replies a client is owed, in the order it sent its commands: what to do with each reply
//! from upstream as it comes, and where the proxy's own answers go among them.
//!
//! Every command forwarded puts one slot here (runs of commands nobody needs to look at share
//! one [`OwedReply::Plain`]); every answer of the proxy's own puts a [`OwedReply::Local`], written once
//! every reply before it is out. A command after which replies no longer pair with commands
//! puts [`OwedReply::Unpair`]: once the replies before it are in, the connection's bytes are copied
//! as they come.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::plugin::Plugin;

/// A command plugins want the reply of.
#[derive(Debug)]
pub(crate) struct Tracked {
    /// The command's arguments, its name first; empty when none of its plugins reads them
    /// ([`Plugin::reply_reads_args`]).
    pub(crate) args: Vec<Vec<u8>>,
    /// Its name as plugins see it (a name of Redis's table is not copied).
    pub(crate) name: Cow<'static, str>,
    /// Its first key's position.
    pub(crate) first_key: Option<usize>,
    /// The plugins that want it, in order.
    pub(crate) plugins: Vec<usize>,
    /// When it was forwarded.
    pub(crate) sent: Instant,
    /// Its number on the connection.
    pub(crate) index: u64,
    /// When it was read from the client.
    pub(crate) arrived: Instant,
    /// Its label in the connection's command metrics, when they time it
    /// ([`super::metered`]).
    pub(crate) timed: Option<u16>,
}

impl Tracked {
    /// What is kept of a command (`args`, its name first) until its reply, for the plugins
    /// `wants` of `plugins`: its arguments only when one of them reads them.
    pub(crate) fn keep(
        plugins: &[Arc<dyn Plugin>],
        wants: Vec<usize>,
        name: Cow<'static, str>,
        args: &[&[u8]],
        first_key: Option<usize>,
        index: u64,
        arrived: Instant,
    ) -> Tracked {
        let reads = wants.iter().any(|&p| plugins[p].reply_reads_args());
        Tracked {
            args: if reads {
                args.iter().map(|a| a.to_vec()).collect()
            } else {
                Vec::new()
            },
            name,
            first_key: first_key.filter(|_| reads),
            plugins: wants,
            sent: Instant::now(),
            index,
            arrived,
            timed: None,
        }
    }

    /// A command only the command metrics wait for, whose reply is not plain (a blocking
    /// command, a `CONFIG GET` to scrub): timed from when it was read.
    pub(crate) fn timed_only(label: u16, index: u64, arrived: Instant) -> Tracked {
        Tracked {
            args: Vec::new(),
            name: Cow::Borrowed(""),
            first_key: None,
            plugins: Vec::new(),
            sent: arrived,
            index,
            arrived,
            timed: Some(label),
        }
    }
}

/// What to do with one reply (or, for the markers, at one point of the queue).
#[derive(Debug)]
pub(crate) enum OwedReply {
    /// This many replies, passed on as they come.
    Plain(u32),
    /// This many replies, passed on as they come, of commands of one label of the command
    /// metrics read from the client in the read that began at `sent` (they share one slot).
    Timed {
        /// The label in the connection's command metrics.
        label: u16,
        /// When the read that brought the commands began.
        sent: Instant,
        /// How many.
        n: u32,
    },
    /// One reply, passed on, of a command that may block longer than the operation timeout.
    Blocking,
    /// A reply plugins want to see.
    Tracked(Box<Tracked>),
    /// This many replies that are not the client's (the proxy's own commands, or the client's
    /// under `CLIENT REPLY OFF|SKIP`): read and dropped.
    Swallow(u32),
    /// A `CONFIG GET` reply: passed on with its secrets blanked.
    Scrub,
    /// An `EXEC` reply whose transaction queued a `CONFIG GET`: blanked element by element.
    ScrubExec,
    /// RESET's reply: once it is out, a fresh upstream connection replaces this one.
    Reset,
    /// A reply a plugin loses: the connection closes when it comes, without passing it on.
    Lose,
    /// An answer of the proxy's own: written once the replies before it are out.
    Local(Vec<u8>),
    /// From here on replies no longer pair with commands.
    Unpair,
    /// The connection closes once the replies before this are out.
    Close,
}

impl OwedReply {
    /// Whether a reply from upstream fills it.
    fn awaits_upstream(&self) -> bool {
        !matches!(
            self,
            OwedReply::Local(_) | OwedReply::Unpair | OwedReply::Close
        )
    }
}

/// The queue of owed replies.
#[derive(Debug, Default)]
pub(crate) struct Owed {
    slots: VecDeque<OwedReply>,
    /// Runs of plain commands not queued yet (they join one slot).
    plain: u32,
    /// Commands that may block among those owed.
    blocking: u32,
}

impl Owed {
    /// Queues `slot` after what is queued (and the plain run before it).
    pub(crate) fn push(&mut self, slot: OwedReply) {
        self.flush_plain();
        if matches!(slot, OwedReply::Blocking) {
            self.blocking += 1;
        }
        if let (OwedReply::Swallow(n), Some(OwedReply::Swallow(m))) = (&slot, self.slots.back_mut())
        {
            *m += n;
            return;
        }
        self.slots.push_back(slot);
    }

    /// One more plain reply owed.
    pub(crate) fn push_plain(&mut self) {
        self.plain += 1;
    }

    /// One more plain reply owed, timed by the command metrics under `label`, of a command read
    /// in the read that began at `sent`: joins the slot before it when that is of the same.
    pub(crate) fn push_timed(&mut self, label: u16, sent: Instant) {
        self.flush_plain();
        if let Some(OwedReply::Timed {
            label: l,
            sent: s,
            n,
        }) = self.slots.back_mut()
        {
            if *l == label && *s == sent {
                *n += 1;
                return;
            }
        }
        self.slots.push_back(OwedReply::Timed { label, sent, n: 1 });
    }

    fn flush_plain(&mut self) {
        let n = std::mem::take(&mut self.plain);
        if n == 0 {
            return;
        }
        match self.slots.back_mut() {
            Some(OwedReply::Plain(m)) => *m += n,
            _ => self.slots.push_back(OwedReply::Plain(n)),
        }
    }

    /// The slot the next reply from upstream fills, taken off the queue (one reply's worth of
    /// a `Plain` or `Swallow` run). The caller handles `Local`, `Unpair` and `Close` slots at
    /// the head first ([`Owed::front`]).
    pub(crate) fn take_for_reply(&mut self) -> Option<OwedReply> {
        self.flush_plain();
        let slot = match self.slots.front_mut() {
            Some(OwedReply::Plain(n)) if *n > 1 => {
                *n -= 1;
                return Some(OwedReply::Plain(1));
            }
            Some(OwedReply::Swallow(n)) if *n > 1 => {
                *n -= 1;
                return Some(OwedReply::Swallow(1));
            }
            Some(OwedReply::Timed { label, sent, n }) if *n > 1 => {
                *n -= 1;
                return Some(OwedReply::Timed {
                    label: *label,
                    sent: *sent,
                    n: 1,
                });
            }
            _ => self.slots.pop_front()?,
        };
        if matches!(slot, OwedReply::Blocking) {
            self.blocking -= 1;
        }
        Some(slot)
    }

    /// The slot at the head, if any.
    pub(crate) fn front(&mut self) -> Option<&OwedReply> {
        self.flush_plain();
        self.slots.front()
    }

    /// Takes the slot at the head.
    pub(crate) fn pop(&mut self) -> Option<OwedReply> {
        self.take_for_reply()
    }

    /// Whether replies from upstream are still owed before the replies stop pairing.
    pub(crate) fn awaits_upstream(&self) -> bool {
        self.plain > 0
            || self
                .slots
                .iter()
                .take_while(|s| !matches!(s, OwedReply::Unpair))
                .any(OwedReply::awaits_upstream)
    }

    /// Whether a command that may block is among those owed.
    pub(crate) fn blocking(&self) -> bool {
        self.blocking > 0
    }

    /// Whether nothing at all is queued.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.plain == 0 && self.slots.is_empty()
    }

    /// Empties the queue, slot by slot (for failing every reply owed).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = OwedReply> + '_ {
        self.flush_plain();
        self.blocking = 0;
        self.slots.drain(..)
    }

    /// Forgets everything queued.
    pub(crate) fn clear(&mut self) {
        self.plain = 0;
        self.blocking = 0;
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_runs_join_and_replies_fill_slots_in_order() {
        let mut q = Owed::default();
        q.push_plain();
        q.push_plain();
        q.push(OwedReply::Scrub);
        q.push_plain();
        q.push(OwedReply::Blocking);
        q.push(OwedReply::Local(b"+OK\r\n".to_vec()));
        assert!(q.blocking() && q.awaits_upstream());
        assert!(matches!(q.take_for_reply(), Some(OwedReply::Plain(1))));
        assert!(matches!(q.take_for_reply(), Some(OwedReply::Plain(1))));
        assert!(matches!(q.take_for_reply(), Some(OwedReply::Scrub)));
        assert!(matches!(q.take_for_reply(), Some(OwedReply::Plain(1))));
        assert!(matches!(q.take_for_reply(), Some(OwedReply::Blocking)));
        assert!(!q.blocking() && !q.awaits_upstream());
        assert!(matches!(q.front(), Some(OwedReply::Local(_))));
        assert!(matches!(q.pop(), Some(OwedReply::Local(_))));
        assert!(q.is_empty());
    }

    /// With `--metrics-listen`, a pipeline of one command read at once owes one slot, not one
    /// boxed slot per command; a new read or another command starts a new one.
    #[test]
    fn timed_runs_of_one_label_and_one_read_share_a_slot() {
        let mut q = Owed::default();
        let (a, b) = (
            Instant::now(),
            Instant::now() + std::time::Duration::from_millis(1),
        );
        for _ in 0..16 {
            q.push_timed(7, a);
        }
        q.push_timed(8, a);
        q.push_timed(8, b);
        assert_eq!(q.slots.len(), 3);
        for _ in 0..16 {
            let slot = q.take_for_reply();
            assert!(matches!(slot, Some(OwedReply::Timed { label: 7, sent, n: 1 }) if sent == a));
        }
        assert!(
            matches!(q.take_for_reply(), Some(OwedReply::Timed { label: 8, sent, .. }) if sent == a)
        );
        assert!(
            matches!(q.take_for_reply(), Some(OwedReply::Timed { label: 8, sent, .. }) if sent == b)
        );
        assert!(q.is_empty());
    }

    /// With `--metrics-listen` every command's reply is timed: a `GET` only the metrics time
    /// was copied, its name and arguments, until its reply came (three allocations per
    /// command), for a plugin that reads the name alone.
    #[test]
    fn a_command_only_timed_by_name_keeps_no_copy_of_its_arguments() {
        use crate::observe::{Observe, ObserveOptions};
        let metrics: Arc<dyn Plugin> = Arc::new(crate::metrics::CommandMetrics::default());
        let observe: Arc<dyn Plugin> = Arc::new(Observe::new(ObserveOptions::default()));
        let plugins = [metrics, observe];
        let now = Instant::now();
        let get: [&[u8]; 2] = [b"GET", b"k"];
        let timed = Tracked::keep(&plugins, vec![0], "GET".into(), &get, Some(1), 1, now);
        let copied: usize = timed.args.iter().map(Vec::len).sum();
        println!(
            "GET timed by the metrics alone: {} arguments ({copied} bytes) kept until its reply",
            timed.args.len()
        );
        assert_eq!((timed.args.len(), timed.first_key), (0, None));
        assert!(matches!(timed.name, Cow::Borrowed("GET")));
        // A plugin that reads them (observe: a SET NX's key and token) still has them.
        let set: [&[u8]; 6] = [b"SET", b"lock:1", b"t", b"NX", b"PX", b"100"];
        let seen = Tracked::keep(&plugins, vec![0, 1], "SET".into(), &set, Some(1), 2, now);
        assert_eq!(seen.args.len(), 6);
        assert_eq!(
            seen.first_key.map(|k| &seen.args[k][..]),
            Some(&b"lock:1"[..])
        );
    }

    #[test]
    fn nothing_is_awaited_past_the_point_replies_stop_pairing() {
        let mut q = Owed::default();
        q.push(OwedReply::Swallow(1));
        q.push(OwedReply::Swallow(2));
        q.push(OwedReply::Unpair);
        q.push_plain();
        assert!(q.awaits_upstream());
        for _ in 0..3 {
            assert!(matches!(q.take_for_reply(), Some(OwedReply::Swallow(1))));
        }
        assert!(!q.awaits_upstream());
        assert!(matches!(q.front(), Some(OwedReply::Unpair)));
    }
}

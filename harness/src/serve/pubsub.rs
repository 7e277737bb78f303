//! Pub/sub across connections: who is subscribed to which channel and pattern, and the
//! delivery of a PUBLISH (from a client or a script) to them, channels first, then patterns,
//! as Redis 7.0's `pubsubPublishMessage`. Shard channels (SSUBSCRIBE, SPUBLISH) are a
//! namespace of their own, as in Redis 7.0: a PUBLISH never reaches them, an SPUBLISH only
//! them (with `--cluster`, both only on the port owning the channel's slot).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use crate::commands::glob_match;
use crate::reply::Reply;

/// Redis's default `client-output-buffer-limit pubsub` hard limit: a subscriber with more
/// than this not yet written to it is closed.
pub(super) const PUBSUB_LIMIT: usize = 32 << 20;

/// What one connection's messages not yet written hold, and whether it went past its limit.
#[derive(Debug)]
struct Backlog {
    bytes: AtomicUsize,
    over: AtomicBool,
    closing: Notify,
    limit: usize,
}

/// Where a connection's messages go: its task writes them between replies. The bytes queued
/// and not yet written are counted; past the limit the connection is closed (Redis's
/// `client-output-buffer-limit pubsub` hard limit) and gets nothing more.
#[derive(Debug, Clone)]
pub(super) struct Outbox {
    tx: UnboundedSender<Reply>,
    backlog: Arc<Backlog>,
}

/// The connection's end of its [`Outbox`].
#[derive(Debug)]
pub(super) struct Inbox {
    rx: UnboundedReceiver<Reply>,
    backlog: Arc<Backlog>,
}

/// A connection's outbox and inbox, closed past `limit` bytes not yet written (0: never).
pub(super) fn mailbox(limit: usize) -> (Outbox, Inbox) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let backlog = Arc::new(Backlog {
        bytes: AtomicUsize::new(0),
        over: AtomicBool::new(false),
        closing: Notify::new(),
        limit,
    });
    let inbox = Inbox {
        rx,
        backlog: backlog.clone(),
    };
    (Outbox { tx, backlog }, inbox)
}

/// About what `r` takes in an output buffer: its payload and a header per element.
pub(super) fn reply_size(r: &Reply) -> usize {
    match r {
        Reply::Array(items) => 16 + items.iter().map(reply_size).sum::<usize>(),
        Reply::Bulk(b) => 16 + b.len(),
        Reply::Status(s) | Reply::Error(s) => 3 + s.len(),
        _ => 16,
    }
}

impl Outbox {
    /// Queues `m`; false if the connection is gone. Past the limit the connection is told to
    /// close and `m` is dropped; it still counts as received, as Redis counts a subscriber
    /// it then closes.
    pub(super) fn send(&self, m: Reply) -> bool {
        let b = &self.backlog;
        if b.over.load(Ordering::Relaxed) {
            return false;
        }
        let size = reply_size(&m);
        let queued = b.bytes.fetch_add(size, Ordering::Relaxed) + size;
        if b.limit > 0 && queued > b.limit {
            b.over.store(true, Ordering::Relaxed);
            b.closing.notify_one();
            return true;
        }
        self.tx.send(m).is_ok()
    }

    /// Closes the connection (CLIENT KILL): as past its limit, it gets nothing more.
    pub(super) fn close(&self) {
        self.backlog.over.store(true, Ordering::Relaxed);
        self.backlog.closing.notify_one();
    }
}

impl Inbox {
    /// The next message.
    pub(super) async fn recv(&mut self) -> Option<Reply> {
        self.rx.recv().await
    }

    /// A message already queued, without waiting.
    pub(super) fn try_recv(&mut self) -> Option<Reply> {
        self.rx.try_recv().ok()
    }

    /// `bytes` (as [`reply_size`] counts them) were written to the client.
    pub(super) fn written(&self, bytes: usize) {
        self.backlog.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// What tells the connection it went past its limit.
    pub(super) fn closing(&self) -> Closing {
        Closing(self.backlog.clone())
    }
}

/// See [`Inbox::closing`].
#[derive(Debug)]
pub(super) struct Closing(Arc<Backlog>);

impl Closing {
    /// Resolves once the connection went past its limit and must be closed.
    pub(super) async fn overflowed(&self) {
        if !self.0.over.load(Ordering::Relaxed) {
            self.0.closing.notified().await;
        }
    }
}

/// Every subscription of every connection.
#[derive(Debug, Default)]
pub(super) struct Subscribers {
    channels: HashMap<Vec<u8>, Vec<(u64, Outbox)>>,
    /// Shard channels (SSUBSCRIBE).
    shard: HashMap<Vec<u8>, Vec<(u64, Outbox)>>,
    /// In the order they were subscribed.
    patterns: Vec<(Vec<u8>, u64, Outbox)>,
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(b.to_vec())
}

type Channels = HashMap<Vec<u8>, Vec<(u64, Outbox)>>;

/// Subscribes `client` to `channel` of `map`; false if it already was.
fn join(map: &mut Channels, client: u64, out: &Outbox, channel: &[u8]) -> bool {
    let subs = map.entry(channel.to_vec()).or_default();
    if subs.iter().any(|(id, _)| *id == client) {
        return false;
    }
    subs.push((client, out.clone()));
    true
}

/// Unsubscribes `client` from `channel` of `map`.
fn leave(map: &mut Channels, client: u64, channel: &[u8]) {
    if let Some(subs) = map.get_mut(channel) {
        subs.retain(|(id, _)| *id != client);
        if subs.is_empty() {
            map.remove(channel);
        }
    }
}

/// The channels of `map` with a subscriber (matching `pattern`, and kept by `keep`), sorted.
fn names(map: &Channels, pattern: Option<&[u8]>, keep: impl Fn(&[u8]) -> bool) -> Reply {
    let mut names: Vec<&Vec<u8>> = (map.keys())
        .filter(|c| pattern.is_none_or(|p| glob_match(p, c, false)) && keep(c))
        .collect();
    names.sort();
    Reply::Array(names.into_iter().map(|c| bulk(c)).collect())
}

/// Each channel of `channels` and its subscribers in `map` (0 where `keep` refuses it).
fn counts(map: &Channels, channels: &[Vec<u8>], keep: impl Fn(&[u8]) -> bool) -> Reply {
    let mut out = Vec::new();
    for c in channels {
        out.push(bulk(c));
        let n = map.get(c).filter(|_| keep(c)).map_or(0, |s| s.len() as i64);
        out.push(Reply::Int(n));
    }
    Reply::Array(out)
}

impl Subscribers {
    /// Subscribes `client` to `channel`; false if it already was.
    pub(super) fn subscribe(&mut self, client: u64, out: &Outbox, channel: &[u8]) -> bool {
        join(&mut self.channels, client, out, channel)
    }

    /// Unsubscribes `client` from `channel`.
    pub(super) fn unsubscribe(&mut self, client: u64, channel: &[u8]) {
        leave(&mut self.channels, client, channel);
    }

    /// Sends `message` to the subscribers of shard channel `channel` (SPUBLISH); how many
    /// received it.
    pub(super) fn spublish(&self, channel: &[u8], message: &[u8]) -> i64 {
        let mut n = 0;
        for (_, out) in self.shard.get(channel).into_iter().flatten() {
            let m = Reply::Array(vec![bulk(b"smessage"), bulk(channel), bulk(message)]);
            n += i64::from(out.send(m));
        }
        n
    }

    /// PUBSUB SHARDCHANNELS [pattern]: the shard channels with a subscriber that `mine`
    /// keeps (with `--cluster`, the port's slots).
    pub(super) fn shard_channels(
        &self,
        pattern: Option<&[u8]>,
        mine: impl Fn(&[u8]) -> bool,
    ) -> Reply {
        names(&self.shard, pattern, mine)
    }

    /// PUBSUB SHARDNUMSUB channel...: each shard channel and its subscribers (0 for one
    /// `mine` refuses).
    pub(super) fn shard_numsub(&self, channels: &[Vec<u8>], mine: impl Fn(&[u8]) -> bool) -> Reply {
        counts(&self.shard, channels, mine)
    }

    /// Subscribes `client` to `pattern`; false if it already was.
    pub(super) fn psubscribe(&mut self, client: u64, out: &Outbox, pattern: &[u8]) -> bool {
        if (self.patterns.iter()).any(|(p, id, _)| *id == client && p == pattern) {
            return false;
        }
        self.patterns.push((pattern.to_vec(), client, out.clone()));
        true
    }

    /// Unsubscribes `client` from `pattern`.
    pub(super) fn punsubscribe(&mut self, client: u64, pattern: &[u8]) {
        self.patterns
            .retain(|(p, id, _)| !(*id == client && p == pattern));
    }

    /// Sends `message` to the subscribers of `channel` and of the patterns it matches; how
    /// many received it.
    pub(super) fn publish(&self, channel: &[u8], message: &[u8]) -> i64 {
        let mut n = 0;
        for (_, out) in self.channels.get(channel).into_iter().flatten() {
            let m = Reply::Array(vec![bulk(b"message"), bulk(channel), bulk(message)]);
            n += i64::from(out.send(m));
        }
        for (p, _, out) in &self.patterns {
            if glob_match(p, channel, false) {
                let m = Reply::Array(vec![
                    bulk(b"pmessage"),
                    bulk(p),
                    bulk(channel),
                    bulk(message),
                ]);
                n += i64::from(out.send(m));
            }
        }
        n
    }

    /// PUBSUB CHANNELS [pattern]: the channels with a subscriber.
    pub(super) fn channels(&self, pattern: Option<&[u8]>) -> Reply {
        names(&self.channels, pattern, |_| true)
    }

    /// PUBSUB NUMSUB channel...: each channel and its subscribers.
    pub(super) fn numsub(&self, channels: &[Vec<u8>]) -> Reply {
        counts(&self.channels, channels, |_| true)
    }

    /// PUBSUB NUMPAT: the distinct patterns subscribed to.
    pub(super) fn numpat(&self) -> Reply {
        let mut pats: Vec<&Vec<u8>> = self.patterns.iter().map(|(p, _, _)| p).collect();
        pats.sort();
        pats.dedup();
        Reply::Int(pats.len() as i64)
    }
}

/// One connection's subscriptions, in the order it made them.
#[derive(Debug)]
pub(super) struct Subscriptions {
    id: u64,
    out: Outbox,
    channels: Vec<Vec<u8>>,
    patterns: Vec<Vec<u8>>,
    shard_channels: Vec<Vec<u8>>,
}

impl Subscriptions {
    pub(super) fn new(id: u64, out: Outbox) -> Subscriptions {
        Subscriptions {
            id,
            out,
            channels: Vec::new(),
            patterns: Vec::new(),
            shard_channels: Vec::new(),
        }
    }

    /// How many channels, patterns and shard channels (a RESP2 connection with any is in
    /// the subscribed context).
    pub(super) fn count(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard_channels.len()
    }

    /// How many channels, and how many patterns (CLIENT LIST's `sub` and `psub`).
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.channels.len(), self.patterns.len())
    }

    /// The confirmation of `kind` for `name`, with the count Redis 7.0 gives: the shard
    /// channels for SSUBSCRIBE / SUNSUBSCRIBE, the channels and patterns for the others.
    fn confirm(&self, kind: &[u8], name: Option<&[u8]>) -> Reply {
        let n = if matches!(kind, b"ssubscribe" | b"sunsubscribe") {
            self.shard_channels.len()
        } else {
            self.channels.len() + self.patterns.len()
        };
        Reply::Array(vec![
            bulk(kind),
            name.map_or(Reply::Nil, bulk),
            Reply::Int(n as i64),
        ])
    }

    /// SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE (`top`,
    /// lower case): one reply per channel or pattern, as Redis sends them.
    pub(super) fn command(
        &mut self,
        hub: &mut Subscribers,
        top: &str,
        args: &[Vec<u8>],
    ) -> Vec<Reply> {
        let mut replies = Vec::new();
        match top {
            "subscribe" => {
                for c in args {
                    if hub.subscribe(self.id, &self.out, c) {
                        self.channels.push(c.clone());
                    }
                    replies.push(self.confirm(b"subscribe", Some(c)));
                }
            }
            "ssubscribe" => {
                for c in args {
                    if join(&mut hub.shard, self.id, &self.out, c) {
                        self.shard_channels.push(c.clone());
                    }
                    replies.push(self.confirm(b"ssubscribe", Some(c)));
                }
            }
            "sunsubscribe" => {
                let names = if args.is_empty() {
                    self.shard_channels.clone()
                } else {
                    args.to_vec()
                };
                for c in &names {
                    leave(&mut hub.shard, self.id, c);
                    self.shard_channels.retain(|x| x != c);
                    replies.push(self.confirm(b"sunsubscribe", Some(c)));
                }
                if names.is_empty() {
                    replies.push(self.confirm(b"sunsubscribe", None));
                }
            }
            "psubscribe" => {
                for p in args {
                    if hub.psubscribe(self.id, &self.out, p) {
                        self.patterns.push(p.clone());
                    }
                    replies.push(self.confirm(b"psubscribe", Some(p)));
                }
            }
            "unsubscribe" => {
                let names = if args.is_empty() {
                    self.channels.clone()
                } else {
                    args.to_vec()
                };
                for c in &names {
                    hub.unsubscribe(self.id, c);
                    self.channels.retain(|x| x != c);
                    replies.push(self.confirm(b"unsubscribe", Some(c)));
                }
                if names.is_empty() {
                    replies.push(self.confirm(b"unsubscribe", None));
                }
            }
            _ => {
                let names = if args.is_empty() {
                    self.patterns.clone()
                } else {
                    args.to_vec()
                };
                for p in &names {
                    hub.punsubscribe(self.id, p);
                    self.patterns.retain(|x| x != p);
                    replies.push(self.confirm(b"punsubscribe", Some(p)));
                }
                if names.is_empty() {
                    replies.push(self.confirm(b"punsubscribe", None));
                }
            }
        }
        replies
    }

    /// Ends every subscription (RESET, a closed connection).
    pub(super) fn clear(&mut self, hub: &mut Subscribers) {
        for c in std::mem::take(&mut self.channels) {
            hub.unsubscribe(self.id, &c);
        }
        for p in std::mem::take(&mut self.patterns) {
            hub.punsubscribe(self.id, &p);
        }
        for c in std::mem::take(&mut self.shard_channels) {
            leave(&mut hub.shard, self.id, &c);
        }
    }
}

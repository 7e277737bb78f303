//! The in-memory keyspace: typed values, expiry against the virtual clock, lazy deletion.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// A hash that remembers insertion order, as Redis's listpack encoding does for small hashes
/// (the encoding every hash a lock or rate-limit script creates has).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderedHash {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl OrderedHash {
    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&Vec<u8>> {
        self.entries
            .iter()
            .find(|(f, _)| f.as_slice() == field)
            .map(|(_, v)| v)
    }

    /// Sets `field`; returns whether it is new.
    pub fn insert(&mut self, field: &[u8], value: Vec<u8>) -> bool {
        match self.entries.iter_mut().find(|(f, _)| f.as_slice() == field) {
            Some(slot) => {
                slot.1 = value;
                false
            }
            None => {
                self.entries.push((field.to_vec(), value));
                true
            }
        }
    }

    /// Removes `field`; returns whether it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self.entries.iter().position(|(f, _)| f.as_slice() == field) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Fields and values in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<u8>)> {
        self.entries.iter().map(|(f, v)| (f, v))
    }
}

/// A score with a total order (NaN never gets in: Redis refuses it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set: members ordered by score, then bytewise.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortedSet {
    pub(crate) by_member: HashMap<Vec<u8>, f64>,
    pub(crate) ordered: BTreeSet<(Score, Vec<u8>)>,
}

impl SortedSet {
    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.by_member.get(member).copied()
    }

    /// Sets `member`'s score; returns whether it is new.
    pub fn insert(&mut self, member: &[u8], score: f64) -> bool {
        let score = if score == 0.0 { 0.0 } else { score };
        match self.by_member.insert(member.to_vec(), score) {
            Some(old) => {
                self.ordered.remove(&(Score(old), member.to_vec()));
                self.ordered.insert((Score(score), member.to_vec()));
                false
            }
            None => {
                self.ordered.insert((Score(score), member.to_vec()));
                true
            }
        }
    }

    /// Removes `member`; returns whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.by_member.remove(member) {
            Some(old) => {
                self.ordered.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// Members in order (score, then bytes).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Vec<u8>, f64)> {
        self.ordered.iter().map(|(s, m)| (m, s.0))
    }
}

/// A stream entry ID: milliseconds and sequence number.
pub type StreamId = (u64, u64);

/// One stream entry.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEntry {
    /// Its ID.
    pub id: StreamId,
    /// Field, value, field, value...
    pub fields: Vec<Vec<u8>>,
    /// Deleted by XDEL or an exact trim, but still in its node (as in Redis's listpack).
    pub deleted: bool,
}

/// A group of entries, as one of Redis's radix-tree listpack nodes holds them: at most
/// [`STREAM_NODE_MAX_ENTRIES`] added, deleted ones included. `~` trimming removes whole nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamNode {
    /// Every entry added to the node, in ID order.
    pub entries: Vec<StreamEntry>,
    /// How many are not deleted.
    pub live: usize,
}

/// Redis's `stream-node-max-entries` default.
pub const STREAM_NODE_MAX_ENTRIES: usize = 100;

/// A stream: its nodes in ID order and the last ID ever added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stream {
    /// Nodes in ID order; a node whose entries are all deleted is removed.
    pub nodes: Vec<StreamNode>,
    /// The greatest ID ever added (XADD must go above it).
    pub last_id: StreamId,
    /// Entries not deleted.
    pub len: usize,
    /// Entries ever added (`entries-added`).
    pub entries_added: u64,
    /// The greatest ID XDEL removed (`max-deleted-entry-id`).
    pub max_deleted: StreamId,
    /// Its consumer groups, by name (Redis keeps them sorted too).
    pub groups: std::collections::BTreeMap<Vec<u8>, StreamGroup>,
}

/// A stream's consumer group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamGroup {
    /// The last ID delivered to one of its consumers (`last-delivered-id`).
    pub last_id: StreamId,
    /// How many entries the group read (`entries-read`); `None` when unknown.
    pub entries_read: Option<u64>,
    /// Entries delivered and not acknowledged (the group's PEL), by ID.
    pub pending: std::collections::BTreeMap<StreamId, PendingEntry>,
    /// Its consumers, by name, with when each was last seen (virtual-clock milliseconds).
    pub consumers: std::collections::BTreeMap<Vec<u8>, i64>,
}

/// One entry of a group's PEL.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEntry {
    /// The consumer it was delivered to.
    pub consumer: Vec<u8>,
    /// When it was last delivered (virtual-clock milliseconds).
    pub delivered_ms: i64,
    /// How many times it was delivered.
    pub deliveries: u64,
}

impl Stream {
    /// The first live entry's ID, (0, 0) when empty (`recorded-first-entry-id`).
    pub fn first_id(&self) -> StreamId {
        self.live().next().map_or((0, 0), |e| e.id)
    }

    /// The live entry `id`, if any.
    pub fn entry(&self, id: StreamId) -> Option<&StreamEntry> {
        self.live().find(|e| e.id == id)
    }

    /// Entries not deleted, in ID order.
    pub fn live(&self) -> impl DoubleEndedIterator<Item = &StreamEntry> {
        self.nodes
            .iter()
            .flat_map(|n| n.entries.iter())
            .filter(|e| !e.deleted)
    }
}

/// A value of one of the emulated types.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (also integers and floats, stored as text).
    Str(Vec<u8>),
    /// A hash.
    Hash(OrderedHash),
    /// A list.
    List(VecDeque<Vec<u8>>),
    /// A sorted set.
    ZSet(SortedSet),
    /// A set.
    Set(std::collections::HashSet<Vec<u8>>),
    /// A stream.
    Stream(Stream),
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
            Value::Set(_) => "set",
            Value::Stream(_) => "stream",
        }
    }

    fn is_empty_container(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::Stream(_) => false,
        }
    }
}

/// A key's value and its expiry time (Unix milliseconds on the virtual clock).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The value.
    pub value: Value,
    /// When it expires, if ever.
    pub expire_at_ms: Option<i64>,
}

/// Bytes a key costs beyond its name and value (dict entry, object header, expiry).
const KEY_OVERHEAD: usize = 64;
/// Bytes an element of a list, set, hash or sorted set costs beyond its own bytes.
pub(crate) const ELEMENT_OVERHEAD: usize = 24;

/// `denyoom` commands that can grow memory by more than their own arguments (copies, stores,
/// offsets that pad): after one of them the keyspace is measured again before the next.
const GROWS_BEYOND_ARGS: &[&str] = &[
    "bitfield",
    "bitop",
    "copy",
    "georadius",
    "georadiusbymember",
    "geosearchstore",
    "pfmerge",
    "sdiffstore",
    "setbit",
    "setrange",
    "sinterstore",
    "sort",
    "sunionstore",
    "zdiffstore",
    "zinterstore",
    "zrangestore",
    "zunionstore",
];

/// The most bytes SETRANGE, SETBIT or BITFIELD (SET, INCRBY) could pad a string to, from their
/// offsets; `None` for other commands, or arguments the command itself refuses (so that its
/// own error answers, as in Redis).
fn padding_growth(name: &str, argv: &[Vec<u8>]) -> Option<usize> {
    const MAX_BITS: i64 = (MAX_STRING as i64) * 8;
    let int = |i: usize| argv.get(i).and_then(|a| crate::number::parse_i64(a));
    let bytes = |bits: i64| (bits / 8 + 1) as usize;
    match name {
        "setrange" => {
            let (off, len) = (int(2)?, argv.get(3)?.len());
            if len == 0 {
                return Some(0);
            }
            (off >= 0 && off.saturating_add(len as i64) <= MAX_STRING as i64)
                .then(|| off as usize + len)
        }
        "setbit" => int(2).filter(|b| (0..MAX_BITS).contains(b)).map(bytes),
        "bitfield" => {
            let mut most = 0;
            let mut i = 2;
            while i < argv.len() {
                match argv[i].to_ascii_lowercase().as_slice() {
                    b"overflow" => i += 2,
                    b"get" => i += 3,
                    b"set" | b"incrby" => {
                        let ty = argv.get(i + 1)?.to_ascii_lowercase();
                        let width: i64 = std::str::from_utf8(ty.get(1..)?).ok()?.parse().ok()?;
                        let most_width = match ty.first() {
                            Some(b'i') => 64,
                            Some(b'u') => 63,
                            _ => return None,
                        };
                        if !(1..=most_width).contains(&width) {
                            return None;
                        }
                        let off = argv.get(i + 2)?;
                        let bit = match off.strip_prefix(b"#") {
                            Some(n) => crate::number::parse_i64(n)?.checked_mul(width)?,
                            None => crate::number::parse_i64(off)?,
                        };
                        if !(0..MAX_BITS).contains(&bit) {
                            return None;
                        }
                        most = most.max(bytes(bit + width));
                        i += 4;
                    }
                    _ => return None,
                }
            }
            Some(most)
        }
        _ => None,
    }
}

/// The longest string Redis stores (`proto-max-bulk-len`, 512 MiB).
pub const MAX_STRING: usize = 512 << 20;

/// What the server itself is counted at against a `CONFIG SET maxmemory` limit, beside the
/// keyspace: about what an empty redis-server 7.0 reports as `used_memory`.
pub const SERVER_OVERHEAD: usize = 1 << 20;

/// Redis's reply to a write while `min-replicas-to-write` replicas are not connected.
pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// Redis's reply past `maxmemory`.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// The error of a command whose result (or the copies it makes) would carry the keyspace past
/// its hard bound; Redis has no such check (it builds the result and goes past `maxmemory`).
pub(crate) fn too_big(command: &str, bytes: usize, room: usize) -> String {
    format!(
        "OOM harness: {} would build at least {bytes} bytes, more than the {room} bytes the \
         keyspace has left under its bound (twice maxmemory)",
        command.to_ascii_uppercase()
    )
}

impl Value {
    /// Approximate bytes this value takes: its own bytes plus a fixed overhead per element.
    pub fn memory_usage(&self) -> usize {
        let total =
            |n: usize, bytes: usize| bytes.saturating_add(n.saturating_mul(ELEMENT_OVERHEAD));
        match self {
            Value::Str(v) => v.len(),
            Value::Hash(h) => total(h.len(), h.iter().map(|(f, v)| f.len() + v.len()).sum()),
            Value::List(l) => total(l.len(), l.iter().map(Vec::len).sum()),
            Value::ZSet(z) => total(z.len(), z.iter().map(|(m, _)| 2 * m.len() + 16).sum()),
            Value::Set(s) => total(s.len(), s.iter().map(Vec::len).sum()),
            Value::Stream(x) => total(
                x.len,
                x.live()
                    .map(|e| 16 + e.fields.iter().map(Vec::len).sum::<usize>())
                    .sum(),
            ),
        }
    }
}

fn usage(key: &[u8], e: &Entry) -> usize {
    KEY_OVERHEAD + key.len() + e.value.memory_usage()
}

/// The keyspace of database 0, with its memory use (approximately: [`Value::memory_usage`]
/// plus a fixed cost per key) kept up to date, so that a limit refuses commands as Redis's
/// `maxmemory` with the `noeviction` policy does.
#[derive(Debug, Clone, Default)]
pub struct Db {
    /// Each entry with the bytes it was last counted at.
    map: HashMap<Vec<u8>, (Entry, usize)>,
    /// The sum of the counted sizes.
    counted: usize,
    /// Keys handed out mutably since they were last counted.
    dirty: HashSet<Vec<u8>>,
    /// What the commands since the last count may have added, at most.
    pending: usize,
    /// `maxmemory` in bytes; 0 for none.
    max_memory: usize,
    /// `maxmemory` as `CONFIG SET` last gave it (`None`: never; 0: no limit beyond
    /// `max_memory`): deny-oom commands are refused while the keyspace plus
    /// [`SERVER_OVERHEAD`] is above it.
    config_max: Option<usize>,
    /// The keys connections WATCH, and which of them commands touched (see [`Db::take_touched`]).
    watch: WatchHook,
}

/// What WATCH needs from the keyspace: which watched keys were written. A key replaced or
/// deleted is touched at once; a key handed out mutably is remembered as it was and counted
/// touched only if it differs afterwards, as reads hand keys out mutably too.
#[derive(Debug, Clone, Default)]
struct WatchHook {
    keys: HashSet<Vec<u8>>,
    touched: HashSet<Vec<u8>>,
    before: HashMap<Vec<u8>, Entry>,
}

impl WatchHook {
    fn touch(&mut self, key: &[u8]) {
        if self.keys.contains(key) && !self.touched.contains(key) {
            self.before.remove(key);
            self.touched.insert(key.to_vec());
        }
    }
}

impl Db {
    /// The live entry at `key`, deleting it first if it expired by `now_ms`.
    pub fn get_mut(&mut self, key: &[u8], now_ms: i64) -> Option<&mut Entry> {
        let expired = match self.map.get(key) {
            None => return None,
            Some((e, _)) => e.expire_at_ms.is_some_and(|t| t < now_ms),
        };
        if expired {
            self.forget(key);
            return None;
        }
        if !self.dirty.contains(key) {
            self.dirty.insert(key.to_vec());
        }
        let w = &mut self.watch;
        if !w.keys.is_empty()
            && w.keys.contains(key)
            && !w.touched.contains(key)
            && !w.before.contains_key(key)
        {
            if let Some((e, _)) = self.map.get(key) {
                w.before.insert(key.to_vec(), e.clone());
            }
        }
        self.map.get_mut(key).map(|(e, _)| e)
    }

    /// The live entry at `key` without deleting anything.
    pub fn peek(&self, key: &[u8], now_ms: i64) -> Option<&Entry> {
        self.map
            .get(key)
            .map(|(e, _)| e)
            .filter(|e| e.expire_at_ms.is_none_or(|t| t >= now_ms))
    }

    /// Whether `key` is live.
    pub fn exists(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.get_mut(key, now_ms).is_some()
    }

    /// Stores `value` at `key` with `expire_at_ms`, replacing whatever was there.
    pub fn set(&mut self, key: &[u8], value: Value, expire_at_ms: Option<i64>) {
        let e = Entry {
            value,
            expire_at_ms,
        };
        let size = usage(key, &e);
        self.counted += size;
        if let Some((_, old)) = self.map.insert(key.to_vec(), (e, size)) {
            self.counted -= old;
        }
        self.dirty.remove(key);
        if !self.watch.keys.is_empty() {
            self.watch.touch(key);
        }
    }

    /// Removes `key` whatever its state; the entry.
    fn forget(&mut self, key: &[u8]) -> Option<Entry> {
        let (e, size) = self.map.remove(key)?;
        self.counted -= size;
        self.dirty.remove(key);
        if !self.watch.keys.is_empty() {
            self.watch.touch(key);
        }
        Some(e)
    }

    /// Removes `key`; returns whether a live key was removed.
    pub fn remove(&mut self, key: &[u8], now_ms: i64) -> bool {
        match self.forget(key) {
            Some(e) => e.expire_at_ms.is_none_or(|t| t >= now_ms),
            None => false,
        }
    }

    /// Deletes `key` if it holds an empty container (Redis never keeps empty ones).
    pub fn drop_if_empty(&mut self, key: &[u8]) {
        if self
            .map
            .get(key)
            .is_some_and(|(e, _)| e.value.is_empty_container())
        {
            self.forget(key);
        }
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        let present: Vec<Vec<u8>> = (self.watch.keys.iter())
            .filter(|k| self.map.contains_key(*k))
            .cloned()
            .collect();
        present.iter().for_each(|k| self.watch.touch(k));
        self.map.clear();
        self.dirty.clear();
        self.counted = 0;
        self.pending = 0;
    }

    /// Live keys and entries, in no particular order.
    pub fn iter(&self, now_ms: i64) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.map
            .iter()
            .map(|(k, (e, _))| (k, e))
            .filter(move |(_, e)| e.expire_at_ms.is_none_or(|t| t >= now_ms))
    }

    /// Sets the keys some connection WATCHes: only writes to these are recorded.
    pub fn set_watched(&mut self, keys: HashSet<Vec<u8>>) {
        self.watch.before.retain(|k, _| keys.contains(k));
        self.watch.touched.retain(|k| keys.contains(k));
        self.watch.keys = keys;
    }

    /// The watched keys written since the last call, each with whether it is still in the
    /// keyspace (expired or not): Redis's `signalModifiedKey` calls, as WATCH sees them.
    pub fn take_touched(&mut self) -> Vec<(Vec<u8>, bool)> {
        if self.watch.touched.is_empty() && self.watch.before.is_empty() {
            return Vec::new();
        }
        let before = std::mem::take(&mut self.watch.before);
        let mut touched = std::mem::take(&mut self.watch.touched);
        for (k, was) in before {
            if self.map.get(&k).map(|(e, _)| e) != Some(&was) {
                touched.insert(k);
            }
        }
        (touched.into_iter())
            .map(|k| {
                let present = self.map.contains_key(&k);
                (k, present)
            })
            .collect()
    }

    /// Whether `key` is live (in the keyspace and not past its expiry).
    pub fn iter_one(&self, key: &[u8], now_ms: i64) -> bool {
        (self.map.get(key)).is_some_and(|(e, _)| e.expire_at_ms.is_none_or(|t| t >= now_ms))
    }

    /// The keys past their expiry and not yet deleted, sorted.
    pub fn stale_keys(&self, now_ms: i64) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = (self.map.iter())
            .filter(|(_, (e, _))| e.expire_at_ms.is_some_and(|t| t < now_ms))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Whether `key` is in the keyspace but past its expiry (Redis's `keyIsExpired`: not yet
    /// deleted, no longer visible).
    pub fn is_stale(&self, key: &[u8], now_ms: i64) -> bool {
        self.map
            .get(key)
            .is_some_and(|(e, _)| e.expire_at_ms.is_some_and(|t| t < now_ms))
    }

    /// The number of live keys.
    pub fn len(&self, now_ms: i64) -> usize {
        self.iter(now_ms).count()
    }

    /// Sets `maxmemory` (bytes; 0 for no limit).
    pub fn set_max_memory(&mut self, bytes: usize) {
        self.max_memory = bytes;
    }

    /// Sets `maxmemory` as `CONFIG SET maxmemory` does (0: none but the start limit, which
    /// stays the keyspace's bound); see [`config_max_memory`](Self::config_max_memory).
    pub fn set_config_max_memory(&mut self, bytes: usize) {
        self.config_max = Some(bytes);
    }

    /// `maxmemory` as `CONFIG GET` answers it: the last `CONFIG SET`, else the start limit.
    pub fn config_max_memory(&self) -> usize {
        self.config_max.unwrap_or(self.max_memory)
    }

    /// Whether a `CONFIG SET maxmemory` limit is passed: Redis's out-of-memory state, where
    /// deny-oom commands and scripts without `allow-oom` are refused. The keyspace's bytes
    /// plus [`SERVER_OVERHEAD`] are compared (an empty Redis already uses about 0.9 MB).
    pub fn over_config_max(&mut self) -> bool {
        match self.config_max {
            Some(limit) if limit > 0 => self.used_memory().saturating_add(SERVER_OVERHEAD) > limit,
            _ => false,
        }
    }

    /// Bytes the keyspace uses now (approximate, see [`Value::memory_usage`]).
    pub fn used_memory(&mut self) -> usize {
        for key in std::mem::take(&mut self.dirty) {
            if let Some((e, size)) = self.map.get_mut(&key) {
                let now = usage(&key, e);
                self.counted = self.counted - *size + now;
                *size = now;
            }
        }
        self.pending = 0;
        self.counted
    }

    /// Redis's `maxmemory` check before command `name` (lower case) with `argv`, flagged
    /// `denyoom` or not in Redis's command table: the OOM error when the keyspace is past the
    /// limit and the command may grow it.
    ///
    /// # Errors
    /// [`OOM`], as Redis answers it.
    pub fn check_memory(
        &mut self,
        deny_oom: bool,
        name: &str,
        argv: &[Vec<u8>],
    ) -> Result<(), String> {
        if deny_oom && self.over_config_max() {
            return Err(OOM.to_string());
        }
        self.check_memory_under(self.max_memory, deny_oom, name, argv)
    }

    /// [`check_memory`](Self::check_memory) for a script that has already written: Redis
    /// lets it go on past `maxmemory` (a script is atomic); the harness still stops it at
    /// twice the limit, so that memory stays bounded.
    ///
    /// # Errors
    /// [`OOM`] past twice the limit.
    pub fn check_memory_after_write(
        &mut self,
        deny_oom: bool,
        name: &str,
        argv: &[Vec<u8>],
    ) -> Result<(), String> {
        self.check_memory_under(self.max_memory.saturating_mul(2), deny_oom, name, argv)
    }

    /// The bytes `key` is counted at now (0 when missing), its count brought up to date.
    fn size_of(&mut self, key: &[u8]) -> usize {
        if self.dirty.remove(key) {
            if let Some((e, size)) = self.map.get_mut(key) {
                let now = usage(key, e);
                self.counted = self.counted - *size + now;
                *size = now;
            }
        }
        self.map.get(key).map_or(0, |(_, size)| *size)
    }

    /// Bytes one command may still build (a result to store or answer, copies of its
    /// inputs): the keyspace's hard bound, twice `maxmemory`, less what it holds. `None`
    /// without a limit.
    pub fn room(&mut self) -> Option<usize> {
        if self.max_memory == 0 {
            return None;
        }
        if self.pending > 0 || !self.dirty.is_empty() {
            self.used_memory();
        }
        Some(
            self.max_memory
                .saturating_mul(2)
                .saturating_sub(self.counted),
        )
    }

    /// Checks, before anything is copied, that a command which copies the values of `keys`
    /// (each time one is named) and builds a result no bigger than them (SUNIONSTORE,
    /// ZINTERSTORE, BITOP, COPY...) fits in the [`room`](Self::room).
    ///
    /// # Errors
    /// An OOM error that names the command and the sizes.
    pub fn check_copies(&mut self, command: &str, keys: &[Vec<u8>]) -> Result<(), String> {
        let Some(room) = self.room() else {
            return Ok(());
        };
        let mut bytes = 0usize;
        for k in keys {
            bytes = bytes.saturating_add(self.size_of(k));
            if bytes > room {
                return Err(too_big(command, bytes, room));
            }
        }
        Ok(())
    }

    fn check_memory_under(
        &mut self,
        limit: usize,
        deny_oom: bool,
        name: &str,
        argv: &[Vec<u8>],
    ) -> Result<(), String> {
        if limit == 0 || !deny_oom {
            return Ok(());
        }
        // Measuring walks the values changed since the last measure; skip it while even the
        // most the commands since then could have added keeps the keyspace under the limit.
        if self.counted.saturating_add(self.pending) > limit {
            self.used_memory();
        }
        if self.counted > limit {
            return Err(OOM.to_string());
        }
        let padding = padding_growth(name, argv);
        let grows_beyond_args = GROWS_BEYOND_ARGS.contains(&name) && padding.is_none();
        let growth = if grows_beyond_args {
            self.max_memory
        } else {
            argv.iter()
                .map(|a| a.len() + ELEMENT_OVERHEAD)
                .sum::<usize>()
                .saturating_add(padding.unwrap_or(0))
                + KEY_OVERHEAD
        };
        // One command must not carry the keyspace past its hard bound either (one RPUSH of
        // 25 references to a 40 MB string stored 1 GB, one SETRANGE at offset 100,000,000):
        // what it would add is checked first.
        if !grows_beyond_args {
            let bound = self.max_memory.saturating_mul(2);
            if self
                .counted
                .saturating_add(self.pending)
                .saturating_add(growth)
                > bound
            {
                self.used_memory();
            }
            if self.counted.saturating_add(growth) > bound {
                return Err(OOM.to_string());
            }
        }
        self.pending = self.pending.saturating_add(growth);
        Ok(())
    }
}

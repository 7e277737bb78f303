//! The in-memory keyspace: typed values, expiry against the virtual clock, lazy deletion.

use std::collections::{BTreeSet, HashMap, VecDeque};

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
        }
    }

    fn is_empty_container(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Set(s) => s.is_empty(),
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

/// The keyspace of database 0.
#[derive(Debug, Clone, Default)]
pub struct Db {
    map: HashMap<Vec<u8>, Entry>,
}

impl Db {
    /// The live entry at `key`, deleting it first if it expired by `now_ms`.
    pub fn get_mut(&mut self, key: &[u8], now_ms: i64) -> Option<&mut Entry> {
        let expired = match self.map.get(key) {
            None => return None,
            Some(e) => e.expire_at_ms.is_some_and(|t| t < now_ms),
        };
        if expired {
            self.map.remove(key);
            return None;
        }
        self.map.get_mut(key)
    }

    /// The live entry at `key` without deleting anything.
    pub fn peek(&self, key: &[u8], now_ms: i64) -> Option<&Entry> {
        self.map
            .get(key)
            .filter(|e| e.expire_at_ms.is_none_or(|t| t >= now_ms))
    }

    /// Whether `key` is live.
    pub fn exists(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.get_mut(key, now_ms).is_some()
    }

    /// Stores `value` at `key` with `expire_at_ms`, replacing whatever was there.
    pub fn set(&mut self, key: &[u8], value: Value, expire_at_ms: Option<i64>) {
        self.map.insert(
            key.to_vec(),
            Entry {
                value,
                expire_at_ms,
            },
        );
    }

    /// Removes `key`; returns whether a live key was removed.
    pub fn remove(&mut self, key: &[u8], now_ms: i64) -> bool {
        match self.map.remove(key) {
            Some(e) => e.expire_at_ms.is_none_or(|t| t >= now_ms),
            None => false,
        }
    }

    /// Deletes `key` if it holds an empty container (Redis never keeps empty ones).
    pub fn drop_if_empty(&mut self, key: &[u8]) {
        if self
            .map
            .get(key)
            .is_some_and(|e| e.value.is_empty_container())
        {
            self.map.remove(key);
        }
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Live keys and entries, in no particular order.
    pub fn iter(&self, now_ms: i64) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.map
            .iter()
            .filter(move |(_, e)| e.expire_at_ms.is_none_or(|t| t >= now_ms))
    }

    /// The number of live keys.
    pub fn len(&self, now_ms: i64) -> usize {
        self.iter(now_ms).count()
    }
}

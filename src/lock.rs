//! A held lock as data, the outcomes of release and extend, and the pieces every acquire path
//! shares: the token, the key check, the `SET NX PX` command and its reply, validity.

use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{Error, Result};
use crate::options::LockOptions;

/// What a token holds, for the paths that give it back without a [`Lock`] at hand (the
/// clean-up of an acquire whose outcome is unknown, the give-back of one with too little
/// validity): each kind is released by its own script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A plain lock (`release.lua`).
    Lock,
    /// A lock taken in fair mode (`release_fair.lua`, which names the queue's head).
    Fair,
    /// A semaphore's permit (`semaphore_release.lua`).
    Permit,
    /// A read-write lock held for reading (`rw_release.lua`).
    Read,
    /// A read-write lock held for writing (`rw_release.lua`).
    Write,
}

impl Hold {
    /// A mutex's hold: [`Hold::Fair`] when taken in fair mode.
    pub(crate) fn mutex(fair: bool) -> Hold {
        if fair {
            Hold::Fair
        } else {
            Hold::Lock
        }
    }
}

/// A held lock: the key, the token that proves it is ours, and how long it is valid for.
///
/// A `Lock` is plain data; it does not release itself. Use [`LockGuard`](crate::LockGuard) for that.
///
/// A lock carries the [`LockOptions`] it was taken with, so every later validity computation
/// (after an extend, in the watchdog) uses the caller's drift allowance.
///
/// ```no_run
/// use std::time::Duration;
/// use lockkit::LockClient;
/// # async fn demo() -> lockkit::Result<()> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// if let Some(lock) = client.try_acquire("lock:a", Duration::from_secs(5)).await? {
///     println!("{} held with token {} ({:?} TTL)", lock.key(), lock.token(), lock.ttl());
///     assert!(lock.is_valid() && lock.remaining_validity() <= lock.ttl());
///     assert!(lock.valid_until() > lock.acquired_at());
///     assert_eq!(lock.fencing_token(), None);
///     assert_eq!(lock.options().ttl(), lock.ttl());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) options: LockOptions,
    pub(crate) acquired_at: Instant,
    pub(crate) valid_until: Instant,
    pub(crate) fencing_token: Option<u64>,
    /// A fenced semaphore permit: its slot (1 to the permits), whose own counter drew
    /// `fencing_token`; 0 for every other lock.
    pub(crate) fencing_slot: u32,
    /// Redlock: the nodes (bit `i` for node `i`) the acquiring `SET` was never sent to, their
    /// circuit breaker being open. The lock cannot be on them, so its extends and its release
    /// skip them. Zero for every other lock.
    pub(crate) unsent: u64,
}

impl Lock {
    /// The one constructor: a lock whose acquiring command was sent at `sent` with `options`.
    pub(crate) fn acquired(
        key: &str,
        token: String,
        options: &LockOptions,
        sent: Instant,
        fencing_token: Option<u64>,
    ) -> Lock {
        Lock {
            key: key.to_string(),
            token,
            options: *options,
            acquired_at: sent,
            valid_until: options.valid_until(sent),
            fencing_token,
            fencing_slot: 0,
            unsent: 0,
        }
    }

    /// After an extend to `ttl` sent at `sent` was answered "extended": takes the renewed TTL
    /// and validity (with the drift allowance of the options the lock was taken with) if that
    /// validity has not ended by now, and says whether it did. An answer
    /// that came back later than that (held up on the network, read after a stall) renews
    /// nothing the holder can use: the key may have expired meanwhile and be someone else's, so
    /// the lock is left as it was, and must be taken for lost.
    pub(crate) fn renew_if_valid(&mut self, ttl: Duration, sent: Instant) -> bool {
        let options = self.options.with_ttl(ttl);
        let valid_until = options.valid_until(sent);
        if Instant::now() >= valid_until {
            return false;
        }
        (self.options, self.valid_until) = (options, valid_until);
        true
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The random token (UUID v4, 32 hex digits) stored in the key; proves the lock is ours.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The TTL the key was last set or extended with.
    pub fn ttl(&self) -> Duration {
        self.options.ttl
    }

    /// The options the lock was taken with (its TTL updated by extends).
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// When the acquiring command was sent (the TTL cannot have started earlier).
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The instant after which the lock must be assumed gone: request start + TTL − drift.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How much validity is left now (zero once it ran out).
    pub fn remaining_validity(&self) -> Duration {
        self.validity_left_at(Instant::now())
    }

    /// How much validity is left at `now` (zero once it ran out).
    pub(crate) fn validity_left_at(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// Whether validity is left.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// The fencing token, when acquired with
    /// [`LockClient::try_acquire_fenced`](crate::LockClient::try_acquire_fenced),
    /// [`Semaphore::try_acquire_fenced`](crate::Semaphore::try_acquire_fenced) or
    /// [`RwLocker::try_acquire_fenced`](crate::RwLocker::try_acquire_fenced).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The slot of a fenced semaphore permit (1 to the semaphore's permits): its
    /// [`fencing_token`](Self::fencing_token) is that slot's, so a resource compares it with
    /// the highest token *of this slot* it has accepted. `None` for every other lock.
    pub fn fencing_slot(&self) -> Option<u32> {
        (self.fencing_slot > 0).then_some(self.fencing_slot)
    }
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The key held our token and was deleted.
    Released,
    /// The key was gone (our lock expired and nobody took it); nothing changed.
    NotHeld,
    /// Another token is in the key (our lock expired and someone else holds it now); untouched.
    HeldByOther,
}

/// What an extend did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// The key held our token; its TTL was reset, and the renewed validity had not ended when
    /// the answer was read.
    Extended,
    /// The key was gone; nothing changed (the lock was lost). Also the answer to an extend that
    /// the server did run, but whose answer came back after the validity it brought had ended
    /// (a reply held up on the network, a stall): the key may have expired and been taken by
    /// then, so the lock is lost all the same (Redlock answers the same for its quorum).
    NotHeld,
    /// Another token is in the key; untouched (the lock was lost).
    HeldByOther,
}

impl ReleaseOutcome {
    /// `true` for [`Released`](Self::Released).
    pub fn is_released(self) -> bool {
        self == ReleaseOutcome::Released
    }
}

impl ExtendOutcome {
    /// `true` for [`Extended`](Self::Extended).
    pub fn is_extended(self) -> bool {
        self == ExtendOutcome::Extended
    }
}

/// Reads a script's `1 / 0 / -1` reply.
fn ownership_reply(what: &'static str, v: &Value) -> Result<i64> {
    match v {
        Value::Int(n @ -1..=1) => Ok(*n),
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        other => Err(Error::UnexpectedReply {
            what,
            reply: format!("{other:?}"),
        }),
    }
}

pub(crate) fn release_outcome(v: &Value) -> Result<ReleaseOutcome> {
    Ok(match ownership_reply("release.lua", v)? {
        1 => ReleaseOutcome::Released,
        0 => ReleaseOutcome::NotHeld,
        _ => ReleaseOutcome::HeldByOther,
    })
}

pub(crate) fn extend_outcome(v: &Value) -> Result<ExtendOutcome> {
    Ok(match ownership_reply("extend.lua", v)? {
        1 => ExtendOutcome::Extended,
        0 => ExtendOutcome::NotHeld,
        _ => ExtendOutcome::HeldByOther,
    })
}

/// The acquire: `SET key token NX PX ttl`, one command; with `get`, `SET ... NX PX ttl GET`
/// (Redis 7.0 and later), whose reply names the holder, so an acquire re-sent by the cluster
/// client after a dropped connection recognises its own landed `SET`.
pub(crate) fn set_nx_cmd(key: &str, token: &str, ttl: Duration, get: bool) -> redis::Cmd {
    // Sized up front: built once per attempt, without regrowing.
    let mut c = redis::Cmd::with_capacity(7, key.len() + token.len() + 32);
    c.arg("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms(ttl));
    if get {
        c.arg("GET");
    }
    c
}

/// `SET key token NX PX ttl [GET]`, encoded by lockkit itself on the hot path
/// ([`Command`](crate::command::Command)): the bytes of [`set_nx_cmd`], without building it.
pub(crate) struct SetNx<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) get: bool,
}

impl crate::command::Command for SetNx<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        use crate::resp::{write_array_len, write_bulk, write_bulk_uint};
        write_array_len(out, if self.get { 7 } else { 6 });
        write_bulk(out, b"SET");
        write_bulk(out, self.key.as_bytes());
        write_bulk(out, self.token.as_bytes());
        write_bulk(out, b"NX");
        write_bulk(out, b"PX");
        write_bulk_uint(out, ttl_ms(self.ttl));
        if self.get {
            write_bulk(out, b"GET");
        }
    }

    fn cmd(&self) -> redis::Cmd {
        set_nx_cmd(self.key, self.token, self.ttl, self.get)
    }
}

/// Reads a `SET NX` reply: taken, busy, or an error. Plain: `OK` taken, nil busy. With `GET`:
/// nil taken (the key was free), our own token taken (a re-sent `SET` after the first landed),
/// another value busy.
pub(crate) fn set_nx_taken(v: &Value, token: &str, get: bool) -> Result<bool> {
    match (v, get) {
        (Value::Okay, false) | (Value::Nil, true) => Ok(true),
        (Value::Nil, false) => Ok(false),
        (Value::BulkString(held), true) => Ok(held.as_slice() == token.as_bytes()),
        (Value::ServerError(e), _) => Err(Error::Redis(e.clone().into())),
        (other, _) => Err(Error::UnexpectedReply {
            what: "SET NX PX",
            reply: format!("{other:?}"),
        }),
    }
}

/// What one attempt in a fair queue came to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FairAttempt {
    /// Taken: it was free and this ticket's turn.
    Acquired(Box<Lock>),
    /// Busy, or another waiter's turn: the ticket waits in the queue.
    Queued {
        /// The ticket's place in the queue, 1 for the next to take the lock (0 when the locker
        /// keeps no queue).
        place: u64,
        /// The holder's remaining TTL, when the lock is held and has one.
        holder_ttl: Option<Duration>,
    },
}

/// Why a guarded lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// An extend found the key gone (it expired, or was deleted behind our back).
    Expired,
    /// An extend found another token in the key.
    Stolen,
    /// Renewals kept failing (server unreachable) until the lock's validity ran out.
    Unreachable,
    /// The watchdog stopped renewing at `max_hold` and the lock ran out its TTL.
    MaxHoldReached,
}

/// A fresh token: UUID v4 as 32 lowercase hex digits.
///
/// ```
/// let t = lockkit::new_token();
/// assert_eq!(t.len(), 32);
/// assert!(t.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
/// assert_ne!(t, lockkit::new_token());
/// ```
pub fn new_token() -> String {
    // Encoded straight into a buffer: `to_string` would go through the formatting machinery.
    let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
    let token: &str = uuid::Uuid::new_v4().simple().encode_lower(&mut buf);
    token.to_owned()
}

pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    ttl.as_millis().min(u128::from(u64::MAX)) as u64
}

/// The outcome of a compare-and-delete sent again after `first` failed.
///
/// If the first one may have run (its reply was lost: a dropped connection, a timeout) and the
/// second finds our token gone before the lock's validity ended, the key cannot have expired:
/// the validity ends before the server-side TTL by the drift allowance, and the second reply
/// came back before it. Our token is gone because the first compare-and-delete deleted it, so
/// the lock was released, not lost, whether the key is still free (`NotHeld`) or a waiter has
/// taken it since (`HeldByOther`: the release woke it). (A key deleted or overwritten by
/// someone else between the two attempts looks the same.) Past the validity, or when the first
/// attempt surely never ran, the second attempt's answer stands.
///
/// Why the validity and not a marker on the server: the client alone can tell, at no cost to
/// any release. A release that wrote "released by this token" beside the key for a while (as
/// in a cluster, where the cluster client re-sends on its own and `release.lua` keeps such a
/// marker) would pay one more write on every release to serve the rare re-send, and would
/// answer no better within the validity. Past it, neither can tell a release from an expiry
/// followed by a new holder without that write; the second answer then stands.
pub(crate) fn resent_outcome(first: &Error, lock: &Lock, again: ReleaseOutcome) -> ReleaseOutcome {
    if again != ReleaseOutcome::Released && first.is_unknown_outcome() && lock.is_valid() {
        ReleaseOutcome::Released
    } else {
        again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_written_in_place_is_the_set_redis_rs_packs() {
        for get in [false, true] {
            for (key, ttl) in [("k", 5u64), ("lock:orders:42", 30_000), ("", 1)] {
                let ttl = Duration::from_millis(ttl);
                use crate::command::Command;
                let mut out = b"before".to_vec();
                let set = SetNx {
                    key,
                    token: "tok",
                    ttl,
                    get,
                };
                set.write(&mut out);
                let mut want = b"before".to_vec();
                want.extend(set.cmd().get_packed_command());
                assert_eq!(out, want, "{key} {ttl:?} get={get}");
            }
        }
    }

    #[test]
    fn tokens_are_fresh_uuid_v4_hex() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        let parsed = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
    }

    #[test]
    fn set_nx_get_recognises_our_own_landed_set() {
        let t = "tok";
        assert!(set_nx_taken(&Value::Okay, t, false).unwrap());
        assert!(!set_nx_taken(&Value::Nil, t, false).unwrap());
        assert!(set_nx_taken(&Value::Nil, t, true).unwrap());
        // The cluster client re-sent our SET after the first one landed: still ours.
        assert!(set_nx_taken(&Value::BulkString(b"tok".to_vec()), t, true).unwrap());
        assert!(!set_nx_taken(&Value::BulkString(b"other".to_vec()), t, true).unwrap());
        assert!(set_nx_taken(&Value::Okay, t, true).is_err());
        let packed = set_nx_cmd("k", t, Duration::from_millis(5), true).get_packed_command();
        assert!(String::from_utf8(packed)
            .unwrap()
            .ends_with("$3\r\nGET\r\n"));
    }

    #[test]
    fn extend_keeps_the_drift_the_lock_was_taken_with() {
        let t0 = Instant::now();
        let opts = LockOptions::builder(Duration::from_secs(2))
            .drift_fixed(Duration::from_millis(500))
            .build()
            .unwrap();
        let mut lock = Lock::acquired("k", new_token(), &opts, t0, None);
        assert_eq!(lock.valid_until() - t0, Duration::from_millis(1480));
        assert!(lock.renew_if_valid(Duration::from_secs(4), t0));
        assert_eq!(lock.ttl(), Duration::from_secs(4));
        assert_eq!(lock.valid_until() - t0, Duration::from_millis(3460));
        // An answer read after the renewed validity ended renews nothing.
        let long_ago = t0 - Duration::from_secs(10);
        assert!(!lock.renew_if_valid(Duration::from_secs(5), long_ago));
        assert_eq!(lock.ttl(), Duration::from_secs(4));
        assert_eq!(lock.valid_until() - t0, Duration::from_millis(3460));
    }

    #[test]
    fn script_replies_map_to_distinct_outcomes() {
        assert_eq!(
            release_outcome(&Value::Int(1)).unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(
            release_outcome(&Value::Int(0)).unwrap(),
            ReleaseOutcome::NotHeld
        );
        assert_eq!(
            release_outcome(&Value::Int(-1)).unwrap(),
            ReleaseOutcome::HeldByOther
        );
        assert_eq!(
            extend_outcome(&Value::Int(-1)).unwrap(),
            ExtendOutcome::HeldByOther
        );
        assert!(release_outcome(&Value::Int(7)).is_err());
        assert!(release_outcome(&Value::Nil).is_err());
    }
}

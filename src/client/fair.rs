//! Fair mode ([`LockOptionsBuilder::fair`](crate::LockOptionsBuilder::fair)): acquires of a key take turns through a first-come,
//! first-served queue kept in Redis, beside the lock key.
//!
//! Each acquire draws a ticket (a fresh token, also the lock's token once taken). Its attempts
//! run `lua/acquire_fair.lua`: the lock is taken when it is free and the queue is empty or the
//! ticket is its head; otherwise the ticket joins the queue once and renews its lease. The
//! release (`lua/release_fair.lua`) publishes the head's ticket, so exactly one waiter, in
//! whichever client or process, wakes and tries. A waiter that gives up leaves
//! (`lua/leave_fair.lua`, which also releases a lock its ticket took unheard, as an acquire
//! dropped mid-attempt leaves one); one that crashed is dropped once its lease has run out.

use std::time::{Duration, Instant};

use redis::Value;

use super::Unheard;
use crate::connection::pool::with_channel;
use crate::error::{Error, Result};
use crate::keys::{check_key, fair_queue_keys};
use crate::lock::{ttl_ms, FairAttempt, Hold, Lock};
use crate::options::LockOptions;
use crate::{scripts, LockClient, Locker, Topology};

/// What acquire_fair.lua answered.
#[derive(Debug, PartialEq)]
enum FairReply {
    /// Taken (or found already held under the ticket), with the key's TTL left.
    Taken(Duration),
    /// Queued at this place; the holder's TTL, when held with one.
    Queued(u64, Option<Duration>),
}

/// `{0, ttl}` or `{place, pttl}` from acquire_fair.lua.
fn fair_reply(v: &Value) -> Result<FairReply> {
    let unexpected = || Error::UnexpectedReply {
        what: "acquire_fair.lua",
        reply: format!("{v:?}"),
    };
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(0), Value::Int(ttl)] if *ttl > 0 => {
                Ok(FairReply::Taken(Duration::from_millis(*ttl as u64)))
            }
            [Value::Int(place), Value::Int(pttl)] if *place > 0 => Ok(FairReply::Queued(
                *place as u64,
                (*pttl > 0).then(|| Duration::from_millis(*pttl as u64)),
            )),
            _ => Err(unexpected()),
        },
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        _ => Err(unexpected()),
    }
}

impl LockClient {
    /// The queue keys of `key`; in a cluster, refused when they can not share its slot.
    fn queue_keys(&self, key: &str) -> Result<[String; 2]> {
        let keys = fair_queue_keys(key);
        if self.topology() == Topology::Cluster
            && keys
                .iter()
                .any(|k| crate::key_slot(k.as_bytes()) != crate::key_slot(key.as_bytes()))
        {
            return Err(Error::InvalidKey {
                reason: format!(
                    "fair mode keeps a queue beside `{key}` in its hash slot, which this key's \
                     braces make impossible; give it a hash tag, e.g. `{{{}}}`",
                    key.replace(['{', '}'], "")
                ),
            });
        }
        Ok(keys)
    }

    /// The lock key and its queue keys, as the fair scripts take them.
    pub(crate) fn fair_script_keys(&self, key: &str) -> Result<[String; 3]> {
        let [queue, leases] = self.queue_keys(key)?;
        Ok([key.to_string(), queue, leases])
    }

    /// One fair attempt under `ticket`, counted in the metrics.
    pub(crate) async fn attempt_fair_counted(
        &self,
        key: &str,
        opts: &LockOptions,
        ticket: &str,
    ) -> Result<FairAttempt> {
        let mut queued = None;
        let attempt = async {
            let reply = self.attempt_fair_once(key, opts, ticket).await?;
            queued = reply.1;
            Ok(reply.0)
        };
        match crate::metrics::observe_attempt(self.mode(), key, attempt).await? {
            Some(lock) => Ok(FairAttempt::Acquired(Box::new(lock))),
            None => {
                let (place, holder_ttl) = queued.unwrap_or_default();
                Ok(FairAttempt::Queued { place, holder_ttl })
            }
        }
    }

    async fn attempt_fair_once(
        &self,
        key: &str,
        opts: &LockOptions,
        ticket: &str,
    ) -> Result<(Option<Lock>, Option<(u64, Option<Duration>)>)> {
        check_key(key)?;
        let keys = self.fair_script_keys(key)?;
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (ttl, lease) = (
            ttl_ms(opts.ttl).to_string(),
            ttl_ms(opts.fair.lease).to_string(),
        );
        let channel = self.conns.release_channel(key);
        let args = with_channel(
            vec![ticket.as_bytes(), ttl.as_bytes(), lease.as_bytes()],
            channel.as_deref(),
        );
        let conn = self.conns.conn_for(ticket);
        let start = Instant::now();
        let sent = [(key, ticket)];
        // Armed until the outcome is settled, clean-ups included (see `cleanup`).
        let unheard = Unheard::arm(self, &sent, start, Hold::Fair);
        let reply = self
            .conns
            .run_script(conn, &scripts::ACQUIRE_FAIR, &keys, &args)
            .await;
        let v = match reply {
            Ok(v) => v,
            Err(e) if e.is_unknown_outcome() => {
                unheard.clean_up(conn).await;
                return Err(e);
            }
            Err(e) => {
                unheard.disarm();
                return Err(e);
            }
        };
        match fair_reply(&v) {
            Ok(FairReply::Taken(left)) => {
                let mut lock = Lock::acquired(key, ticket.to_string(), opts, start, None);
                // Found already held under the ticket (an attempt sent again after its
                // reply was lost): the key expires `left` after the script ran, at the
                // latest, not a whole TTL after this attempt was sent.
                lock.valid_until = lock
                    .valid_until
                    .min(start + left.saturating_sub(opts.drift()));
                let kept = Box::pin(self.keep_if_valid(conn, lock, Hold::Fair)).await;
                unheard.disarm();
                Ok((Some(kept?), None))
            }
            Ok(FairReply::Queued(place, holder_ttl)) => {
                unheard.disarm();
                Ok((None, Some((place, holder_ttl))))
            }
            Err(e) => {
                unheard.disarm();
                Err(e)
            }
        }
    }

    /// Takes `ticket` out of `key`'s queue (waking the next waiter when it was the head), and
    /// releases a lock held under it (taken by an attempt whose reply never came back).
    pub(crate) async fn leave_queue_once(&self, key: &str, ticket: &str) -> Result<()> {
        let keys = self.fair_script_keys(key)?;
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let channel = self.conns.release_channel(key);
        let args = with_channel(vec![ticket.as_bytes()], channel.as_deref());
        let conn = self.conns.conn_for(ticket);
        self.conns
            .run_script(conn, &scripts::LEAVE_FAIR, &keys, &args)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_replies_are_read_strictly() {
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(
            fair_reply(&pair(0, 5000)).unwrap(),
            FairReply::Taken(Duration::from_millis(5000))
        );
        assert_eq!(
            fair_reply(&pair(2, 300)).unwrap(),
            FairReply::Queued(2, Some(Duration::from_millis(300)))
        );
        assert_eq!(
            fair_reply(&pair(1, -2)).unwrap(),
            FairReply::Queued(1, None)
        );
        assert!(fair_reply(&pair(-1, 0)).is_err());
        // Taken with no TTL left (or none at all) is not a lock.
        assert!(fair_reply(&pair(0, -1)).is_err());
        assert!(fair_reply(&Value::Int(1)).is_err());
    }
}

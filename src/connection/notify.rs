//! Waiting for a busy lock: woken by its release instead of polling it.
//!
//! A [`LockClient`](crate::LockClient) on one server opens one extra connection, subscribed to
//! `lockkit:released:<key>` for each key it has waiters on (Redisson's way). The release script
//! publishes on that channel after its compare-and-delete succeeded. Waiters of one client on
//! one key form a first-come-first-served queue: only its head watches the key; the others wait
//! for their turn and send nothing.
//!
//! The head wakes on the first of:
//! - the release message;
//! - the end of the holder's remaining TTL (read with `PTTL`), for a holder that never releases;
//! - the end of the caller's retry deadline.
//!
//! A subscription is confirmed before the head reads `PTTL`, so a release can not slip between
//! the two unseen. Where notification is unavailable (a proxy such as twemproxy, a cluster, an
//! ACL without `&lockkit:released:*` or `+subscribe`), the client polls as the retry options
//! say, and [`LockClient::wait_mode`](crate::LockClient::wait_mode) says why. A lost
//! subscription connection degrades to polling until it is back: waiting can be slower, never
//! less safe, since every wake-up only leads to one more ordinary acquire attempt.
//!
//! The hub itself (`src/connection/hub.rs`) keeps the subscribed connection alive and says
//! when it cannot hear anything: its waiters then poll (a hub whose runtime ended, whose socket
//! went silent, or that never came up).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::hub::{lock, Channel, Hub, Slot};
use super::Conn;
pub use crate::options::WaitMode;

/// The prefix of the channel a release publishes on: `lockkit:released:<key>`.
pub const RELEASE_CHANNEL_PREFIX: &str = "lockkit:released:";

/// The channel a release of `key` publishes on.
pub fn release_channel(key: &str) -> String {
    // Built once per release: concatenated, not formatted.
    let mut channel = String::with_capacity(RELEASE_CHANNEL_PREFIX.len() + key.len());
    channel.push_str(RELEASE_CHANNEL_PREFIX);
    channel.push_str(key);
    channel
}

/// How one acquire waits between its attempts: obtained from
/// [`Locker::waiter`](crate::Locker::waiter), used by the retry loop, dropped when the acquire
/// ends (which hands the turn to the next waiter of the same client).
pub struct Waiter(WaiterKind);

enum WaiterKind {
    Poll,
    Notify(NotifyWaiter),
    Fair(FairWaiter),
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            WaiterKind::Poll => f.write_str("Waiter(poll)"),
            WaiterKind::Notify(w) => write!(f, "Waiter(notify {})", w.key),
            WaiterKind::Fair(w) => write!(
                f,
                "Waiter(fair, {}, place {})",
                if w.woken.is_some() {
                    "notified"
                } else {
                    "polling"
                },
                w.place
            ),
        }
    }
}

impl Waiter {
    /// A waiter that sleeps the retry pause (delay plus jitter) between attempts.
    pub fn poll() -> Waiter {
        Waiter(WaiterKind::Poll)
    }

    pub(crate) fn notify(w: NotifyWaiter) -> Waiter {
        Waiter(WaiterKind::Notify(w))
    }

    /// Whether this waiter is woken by releases (`false`: it polls).
    pub fn is_notified(&self) -> bool {
        match &self.0 {
            WaiterKind::Poll => false,
            WaiterKind::Notify(_) => true,
            WaiterKind::Fair(w) => w.woken.is_some(),
        }
    }

    /// This waiter in fair mode: it draws a ticket and, when it was notified, listens for
    /// releases that name it (it does not queue behind this client's other waiters: the queue
    /// in Redis decides). `lease`: the lease of its place, renewed every third of it.
    pub(crate) fn into_fair(self, lease: Duration) -> Waiter {
        let ticket = crate::lock::new_token();
        let woken = match &self.0 {
            WaiterKind::Notify(w) => {
                let notify = Arc::new(Notify::new());
                lock(&w.channel.fair).insert(ticket.clone(), notify.clone());
                Some((w.hub.clone(), w.channel.clone(), notify))
            }
            _ => None,
        };
        Waiter(WaiterKind::Fair(FairWaiter {
            ticket,
            lease,
            woken,
            place: 0,
            holder_ttl: None,
        }))
    }

    /// The ticket of a waiter in fair mode (the token of the lock it takes), `None` otherwise.
    pub fn ticket(&self) -> Option<&str> {
        match &self.0 {
            WaiterKind::Fair(w) => Some(&w.ticket),
            _ => None,
        }
    }

    /// A fair waiter gives up its ticket and draws a fresh one (its place in the queue starts
    /// over). After an attempt whose outcome is unknown, a compare-and-delete of the old ticket
    /// may still run in the background: a lock taken later under the same ticket would be
    /// deleted behind its holder, so the acquire goes on under a new one.
    pub(crate) fn redraw_ticket(&mut self) {
        if let WaiterKind::Fair(w) = &mut self.0 {
            w.redraw();
        }
    }

    /// What the last fair attempt said: the place in the queue and the holder's TTL.
    pub(crate) fn queued(&mut self, place: u64, holder_ttl: Option<Duration>) {
        if let WaiterKind::Fair(w) = &mut self.0 {
            (w.place, w.holder_ttl) = (place, holder_ttl);
        }
    }

    /// Before the first attempt. Notified: when other acquires of the same client already wait
    /// for this key, queue behind them (first come, first served) instead of jumping the queue,
    /// at most `time_left`. Fair: subscribe before the first attempt, so a release naming this
    /// ticket right after it is heard.
    pub(crate) async fn before_first_attempt(&mut self, pause: Duration, time_left: Duration) {
        match &mut self.0 {
            WaiterKind::Notify(w) => {
                if w.others_waiting() {
                    w.wait(pause, time_left).await;
                }
            }
            WaiterKind::Fair(w) => w.subscribe(time_left).await,
            WaiterKind::Poll => {}
        }
    }

    /// Waits before the next attempt. Polling: `pause`. Notified: until the key is released,
    /// the holder's TTL runs out, or `time_left` is used up. Fair: until a release names this
    /// ticket, the holder's TTL runs out (for the head), the lease needs renewing, or
    /// `time_left` is used up; polling `pause` (at most a third of the lease) where it is not
    /// notified.
    pub(crate) async fn wait(&mut self, pause: Duration, time_left: Duration) {
        match &mut self.0 {
            WaiterKind::Poll => tokio::time::sleep(pause).await,
            WaiterKind::Notify(w) => w.wait(pause, time_left).await,
            WaiterKind::Fair(w) => w.wait(pause, time_left).await,
        }
    }
}

/// A waiter in fair mode.
pub(crate) struct FairWaiter {
    ticket: String,
    lease: Duration,
    /// Woken by releases naming the ticket; `None`: polls.
    woken: Option<(Hub, Arc<Channel>, Arc<Notify>)>,
    /// From the last attempt: the place in the queue (1: next) and the holder's TTL.
    place: u64,
    holder_ttl: Option<Duration>,
}

impl FairWaiter {
    async fn subscribe(&mut self, time_left: Duration) {
        let subscribed = match &self.woken {
            Some((hub, channel, _)) => {
                hub.alive() && hub.ensure_subscribed(channel, time_left).await
            }
            None => return,
        };
        if !subscribed {
            self.unregister();
        }
    }

    async fn wait(&mut self, pause: Duration, time_left: Duration) {
        let renew = self.lease / 3;
        match &self.woken {
            Some((hub, _, woken)) if hub.alive() => {
                hub.kick();
                // The head may find the lock expired (a holder that never releases); the others
                // only ever wait for their turn, renewing their place meanwhile. A ticket not in
                // the queue yet (drawn anew after an attempt whose outcome is unknown) is named
                // by no release: it joins at its next attempt, one pause away.
                let hint = match (self.place, self.holder_ttl) {
                    (0, _) | (1, None) => pause,
                    (1, Some(ttl)) => ttl + Duration::from_millis(1),
                    _ => renew,
                };
                let wait = hint.min(renew).min(time_left);
                let _ = tokio::time::timeout(wait, woken.notified()).await;
            }
            woken => {
                if let Some((hub, _, _)) = woken {
                    hub.revive();
                }
                tokio::time::sleep(pause.min(renew).min(time_left)).await
            }
        }
    }

    fn redraw(&mut self) {
        let ticket = crate::lock::new_token();
        if let Some((_, channel, woken)) = &mut self.woken {
            let mut fair = lock(&channel.fair);
            fair.remove(&self.ticket);
            *woken = Arc::new(Notify::new());
            fair.insert(ticket.clone(), woken.clone());
        }
        self.ticket = ticket;
        (self.place, self.holder_ttl) = (0, None);
    }

    fn unregister(&mut self) {
        if let Some((_, channel, _)) = self.woken.take() {
            lock(&channel.fair).remove(&self.ticket);
        }
    }
}

impl Drop for FairWaiter {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl Hub {
    /// A waiter for `key` (the hub's task started again first, should its runtime have ended).
    pub(crate) fn waiter(&self, key: &str, conn: Conn) -> NotifyWaiter {
        self.revive();
        NotifyWaiter {
            hub: self.clone(),
            channel: self.channel(key),
            key: key.to_string(),
            conn,
            slot: None,
            shared: false,
        }
    }

    /// A waiter for a key several holders share (a semaphore's permits, a read-write lock): it
    /// tries at once when it becomes the head of its client's queue (the release that woke the
    /// head before it may have freed more than one place), and waits at most the retry pause
    /// between releases (a lease that ends publishes nothing, and the key's TTL is its longest
    /// lease, not its first).
    pub(crate) fn shared_waiter(&self, key: &str, conn: Conn) -> NotifyWaiter {
        let mut waiter = self.waiter(key, conn);
        waiter.shared = true;
        waiter
    }
}

/// A waiter woken by releases.
pub(crate) struct NotifyWaiter {
    hub: Hub,
    channel: Arc<Channel>,
    key: String,
    conn: Conn,
    slot: Option<Arc<Slot>>,
    /// Several holders share the key ([`Hub::shared_waiter`]).
    shared: bool,
}

impl NotifyWaiter {
    fn others_waiting(&self) -> bool {
        !lock(&self.channel.queue).is_empty()
    }

    /// Joins the queue if not in it yet; whether this waiter is its head.
    fn join(&mut self) -> (Arc<Slot>, bool) {
        let mut queue = lock(&self.channel.queue);
        let slot = match &self.slot {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(Slot::default());
                queue.push_back(s.clone());
                self.slot = Some(s.clone());
                s
            }
        };
        let head = queue.front().is_some_and(|f| Arc::ptr_eq(f, &slot));
        (slot, head)
    }

    async fn wait(&mut self, pause: Duration, time_left: Duration) {
        if !self.hub.alive() {
            // Down: poll (and start its task again, should its runtime have ended).
            self.hub.revive();
            return tokio::time::sleep(pause.min(time_left)).await;
        }
        // A silent hub is found within a second or so while anyone waits.
        self.hub.kick();
        let until = tokio::time::Instant::now() + time_left;
        let (slot, mut head) = self.join();
        let waited_for_turn = !head;
        while !head {
            if tokio::time::timeout_at(until, slot.promoted.notified())
                .await
                .is_err()
            {
                return;
            }
            head = self.join().1;
        }
        if waited_for_turn && self.shared {
            return;
        }
        // Polls instead (the pause, within the deadline) where subscribing or reading the TTL
        // fails or does not answer before the deadline.
        let poll = || tokio::time::sleep_until(until.min(tokio::time::Instant::now() + pause));
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if !self.hub.ensure_subscribed(&self.channel, left).await {
            return poll().await;
        }
        // Subscribed before this read: a release after it is heard, one before it shows here.
        let pttl = tokio::time::timeout_at(
            until,
            redis::cmd("PTTL")
                .arg(&self.key)
                .query_async::<i64>(&mut self.conn),
        )
        .await;
        let wait = match pttl {
            Err(_) => return,     // the deadline: the loop gives up or tries once more
            Ok(Ok(-2)) => return, // gone: try now
            Ok(Ok(ms)) if ms > 0 && self.shared => Duration::from_millis(ms as u64 + 1).min(pause),
            Ok(Ok(ms)) if ms > 0 => Duration::from_millis(ms as u64 + 1), // the holder's TTL at most
            Ok(Ok(_)) => pause, // a key without TTL (not a lockkit lock): poll it
            Ok(Err(_)) => return poll().await,
        };
        let deadline = until.min(tokio::time::Instant::now() + wait);
        let _ = tokio::time::timeout_at(deadline, slot.released.notified()).await;
    }
}

impl Drop for NotifyWaiter {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else { return };
        let mut queue = lock(&self.channel.queue);
        let was_head = queue.front().is_some_and(|f| Arc::ptr_eq(f, &slot));
        queue.retain(|s| !Arc::ptr_eq(s, &slot));
        if was_head {
            if let Some(next) = queue.front() {
                next.promoted.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::connection::hub::IDLE_CHANNELS;
    use crate::options::ClientOptions;
    use crate::Locker;
    use std::sync::atomic::Ordering;

    #[test]
    fn release_channel_is_prefix_and_key() {
        assert_eq!(release_channel("order:42"), "lockkit:released:order:42");
    }

    #[test]
    fn poll_waiter_is_not_notified() {
        assert!(!Waiter::poll().is_notified());
    }

    /// How many clients the server has subscribed to `channel`.
    async fn subscribers(conn: &mut Conn, channel: &str) -> i64 {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(conn)
            .await
            .unwrap();
        n
    }

    /// A key whose channel was just evicted as idle (its UNSUBSCRIBE not sent yet) is waited on
    /// again at once: the waiter's SUBSCRIBE goes out first. The eviction's UNSUBSCRIBE must not
    /// undo it: the server keeps the channel subscribed and the waiter wakes on the release.
    /// (It used to be sent by a spawned task, after the SUBSCRIBE, and drop the subscription
    /// while the hub counted it as live: the waiter then slept until the holder's TTL.)
    #[tokio::test]
    async fn an_evicted_channel_waited_on_again_stays_subscribed() {
        let server = lockkit_test_support::RedisServer::start();
        let conns =
            crate::connection::pool::Connections::connect(&server.url(), ClientOptions::new())
                .await
                .unwrap();
        let hub = conns.hub().expect("notification on a plain server").clone();
        let mut conn = conns.conn();
        let wait = Duration::from_secs(60);
        // As many idle subscribed channels as are kept; the next new one evicts them all.
        for i in 0..IDLE_CHANNELS {
            let c = hub.channel(&format!("idle:{i}"));
            assert!(hub.ensure_subscribed(&c, wait).await);
        }
        let holder = crate::LockClient::connect(&server.url()).await.unwrap();
        let held = holder.try_acquire("idle:0", wait).await.unwrap().unwrap();
        let _evicting = hub.channel("other");
        // No await since the eviction: the waiter subscribes before anything spawned runs.
        let mut waiter = hub.waiter("idle:0", conns.conn());
        let channel = waiter.channel.clone();
        // The bound only ends a failing test early: the holder's TTL and the deadline are a
        // minute, a release wakes the waiter in a round trip.
        let waiting = tokio::time::timeout(
            Duration::from_secs(30),
            waiter.wait(Duration::from_millis(10), wait),
        );
        let check = async {
            // Until the hub counts the waiter's channel as subscribed and the server has
            // processed the eviction (another evicted channel is gone).
            let mut settled = false;
            for _ in 0..500 {
                let confirmed = channel
                    .subscribed
                    .try_lock()
                    .is_ok_and(|g| *g == hub.0.generation.load(Ordering::Acquire));
                if confirmed && subscribers(&mut conn, &release_channel("idle:1")).await == 0 {
                    settled = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(
                settled,
                "the waiter never subscribed, or the eviction never ran"
            );
            assert_eq!(
                subscribers(&mut conn, &release_channel("idle:0")).await,
                1,
                "the server dropped the channel of a key with a live waiter"
            );
            assert_eq!(
                holder.release(&held).await.unwrap(),
                crate::ReleaseOutcome::Released
            );
        };
        let (woken, ()) = tokio::join!(waiting, check);
        assert!(woken.is_ok(), "the waiter was not woken by the release");
    }
}

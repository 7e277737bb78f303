//! Cleaning up after acquires whose outcome is unknown: no lock is left held for a whole TTL by
//! a command whose caller never learnt it took the lock.
//!
//! An acquire command may land although its caller never sees the reply: the reply was lost (a
//! timeout, a dropped connection), or the caller's future was dropped while the command was on
//! the wire (a timeout or `select!` around the acquire, an HTTP client gone). Such a lock is
//! held for nobody, so lockkit deletes it: a compare-and-delete with the attempt's token, which
//! can only ever delete that attempt's own lock. Three rules make it work, and every new path
//! that acquires (a lock, a read-write lock, a semaphore's permits) follows them:
//!
//! 1. **Armed until settled.** An [`Unheard`] is armed before the command goes out and
//!    disarmed only once the attempt's outcome is settled: the reply read *and* any clean-up it
//!    called for done (the compare-and-delete after a lost reply, the give-back of a lock with
//!    too little validity, a batch's release of what it took). A future dropped anywhere in
//!    between drops the `Unheard` armed, and its `Drop` hands every `(key, token)` to the
//!    background clean-up. Disarming when the reply comes and *then* awaiting the clean-up loses
//!    it when the future is dropped during that await.
//! 2. **Behind the command.** A clean-up goes over the connection its command went over
//!    ([`Connections::conn_for`](crate::connection::pool::Connections::conn_for) by token, or the
//!    batch's), so it reaches the server after that command, never before it.
//! 3. **Armed until the command can no longer land.** Rule 2 holds on one connection. A
//!    connection that went silent is given up and replaced (`src/connection/link/driver.rs`); a
//!    clean-up sent over the new one can overtake a command still queued on the old one, find
//!    nothing, and the command then lands and holds the key for its TTL. The link aborts a
//!    connection it gives up (`SO_LINGER` 0: the kernel drops what it had queued instead of
//!    retransmitting it for up to `TCP_USER_TIMEOUT`), which ends our side of it; but bytes a
//!    middlebox has already acknowledged can still arrive. So when a connection of the link was
//!    given up with requests in flight after the command was sent
//!    ([`Conn::late_delivery_until`]), the background clean-up keeps checking, once every
//!    [`LATE_RECHECK`], until the window of [`LATE_DELIVERY`](crate::connection::link::LATE_DELIVERY)
//!    after that has passed; a command that lands in the window holds its key for at most one
//!    more check.
//!
//! The background clean-up first retries a compare-and-delete that failed (50 ms, 200 ms,
//! 800 ms, 2 s apart), then watches as rule 3 says. It stops at once when it deletes the key
//! (the command landed: it cannot land twice). A redis-rs cluster connection is not replaced
//! by lockkit and says nothing of late delivery: there rule 3 has nothing to watch.

use std::time::{Duration, Instant};

use super::LockClient;
use crate::connection::Conn;
use crate::lock::{Hold, ReleaseOutcome};

/// How often the background clean-up checks again while a late command could still land.
pub(crate) const LATE_RECHECK: Duration = Duration::from_secs(1);

/// Armed while acquire commands are on the wire and until their outcome is settled (see the
/// module docs, rule 1). Dropped armed, it hands each `(key, token)` to the background
/// clean-up: the commands may still land and take locks for nobody.
pub(crate) struct Unheard<'a> {
    client: &'a LockClient,
    sent: &'a [(&'a str, &'a str)],
    /// When the commands were sent (rule 3 watches for connections given up after that).
    at: Instant,
    hold: Hold,
    armed: bool,
    /// Already counted as an unknown-outcome clean-up.
    counted: bool,
    /// The connection the acquires went over, when not each token's own (a batch's).
    route: Option<Conn>,
}

impl<'a> Unheard<'a> {
    /// Armed for the acquires `sent` at `at`; `hold`: what they take (a fair lock's release
    /// wakes the queue's head; a permit or a read-write lock has scripts of its own).
    pub(crate) fn arm(
        client: &'a LockClient,
        sent: &'a [(&'a str, &'a str)],
        at: Instant,
        hold: Hold,
    ) -> Self {
        Unheard {
            client,
            sent,
            at,
            hold,
            armed: true,
            counted: false,
            route: None,
        }
    }

    /// The acquires went over `conn` (one pipeline for a batch): so do their clean-ups.
    pub(crate) fn on(mut self, conn: &Conn) -> Self {
        self.route = Some(conn.clone());
        self
    }

    /// Counts the acquires' clean-up once, in the stats ([`ClientStats::unknown_outcome_cleanups`](crate::ClientStats)).
    pub(crate) fn count(&mut self) {
        if !self.counted {
            self.counted = true;
            self.client.conns.count_unknown_outcome_cleanup();
        }
    }

    /// The outcome is settled: nothing is left to clean up.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// The reply was lost: the compare-and-delete of every acquire now, over `conn`, staying
    /// armed until it is done (then what is left goes on in the background).
    pub(crate) async fn clean_up(mut self, conn: &Conn) {
        self.count();
        for (key, token) in self.sent {
            self.client
                .clean_up_unknown(conn, key, token, self.hold, self.at)
                .await;
        }
        self.disarm();
    }
}

impl Drop for Unheard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.count();
        let client = self.client;
        for (key, token) in self.sent {
            let conn = self
                .route
                .as_ref()
                .unwrap_or_else(|| client.conns.conn_for(token));
            client.clean_up_in_background(conn, key, token, self.hold, Some(self.at), false);
        }
    }
}

impl LockClient {
    /// After an acquire sent at `sent` whose reply was lost: delete the key if (and only if) it
    /// holds our token, over `conn`, the connection the lost command went over (module docs,
    /// rule 2); what is left to do goes on in the background (rule 3, or a failed try).
    /// `hold`: what the attempt takes. Uncounted: the
    /// caller's [`Unheard`] counts it.
    pub(crate) async fn clean_up_unknown(
        &self,
        conn: &Conn,
        key: &str,
        token: &str,
        hold: Hold,
        sent: Instant,
    ) {
        match self.release_on(conn, key, token, hold).await {
            Ok(ReleaseOutcome::Released) => {}
            Ok(_) => self.clean_up_in_background(conn, key, token, hold, Some(sent), true),
            Err(e) => {
                tracing::warn!(key, error = %e, "acquire outcome unknown and clean-up failed; retrying in background");
                self.clean_up_in_background(conn, key, token, hold, Some(sent), false);
            }
        }
    }

    /// Compare-and-delete of a lock nobody will hold, over `conn`; retried in the background
    /// when it fails.
    pub(crate) async fn give_back(&self, conn: &Conn, key: &str, token: &str, hold: Hold) {
        if let Err(e) = self.release_on(conn, key, token, hold).await {
            tracing::debug!(key, error = %e, "giving back a lock failed; retrying in background");
            self.release_in_background_on(conn, key, token, hold);
        }
    }

    /// Keeps trying a compare-and-delete for a few seconds while the server is unreachable, so
    /// a lock whose release was lost is not left for its whole TTL. Safe at any time: it
    /// deletes the key only while it still holds this token.
    pub(crate) fn release_in_background(&self, key: &str, token: &str, hold: Hold) {
        self.release_in_background_on(self.conns.conn_for(token), key, token, hold);
    }

    /// [`release_in_background`](Self::release_in_background) over `conn`: the connection the
    /// command it undoes went over (a batch's), so it never overtakes that command.
    pub(crate) fn release_in_background_on(&self, conn: &Conn, key: &str, token: &str, hold: Hold) {
        self.clean_up_in_background(conn, key, token, hold, None, false);
    }

    /// The background clean-up of `key`/`token` over `conn` (module docs): unless `answered`
    /// (a compare-and-delete already answered, and found nothing), retries one for a few
    /// seconds; then, for an acquire `sent` at that time, checks again while a connection given
    /// up after it may still deliver its command late. Nothing is spawned when nothing is left.
    pub(crate) fn clean_up_in_background(
        &self,
        conn: &Conn,
        key: &str,
        token: &str,
        hold: Hold,
        sent: Option<Instant>,
        answered: bool,
    ) {
        let late = move |conn: &Conn| sent.and_then(|s| conn.late_delivery_until(s));
        if answered && late(conn).is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key,
                "no runtime to clean up on: the lock may stay held until its TTL"
            );
            return;
        };
        let this = self.clone();
        let conn = conn.clone();
        let (key, token) = (key.to_string(), token.to_string());
        runtime.spawn(async move {
            if !answered {
                for delay_ms in [50u64, 200, 800, 2000] {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    match this.release_on(&conn, &key, &token, hold).await {
                        Ok(ReleaseOutcome::Released) => return,
                        Ok(_) => break,
                        Err(e) if e.is_retryable() => continue,
                        Err(_) => break,
                    }
                }
            }
            // Rule 3: the window is read again each time (a later give-up widens it).
            while late(&conn).is_some_and(|until| Instant::now() < until) {
                tokio::time::sleep(LATE_RECHECK).await;
                if let Ok(ReleaseOutcome::Released) =
                    this.release_on(&conn, &key, &token, hold).await
                {
                    tracing::debug!(%key, "a late acquire command landed; its lock was deleted");
                    return;
                }
            }
        });
    }
}

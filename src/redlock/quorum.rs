//! Voting over Redlock nodes: send one request to every node, decide as soon as the replies so
//! far settle the question (a quorum granted, or a quorum became impossible), and let the
//! stragglers finish in the background, each bounded by the node timeout.
//!
//! A node that keeps timing out is skipped for a short back-off (a circuit breaker): its vote
//! counts as failed at once instead of being waited for.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, NodeError, Result};
use crate::LockClient;

/// One node's answer to one request.
#[derive(Debug)]
pub(crate) enum NodeReply<T> {
    Ok(T),
    Failed(NodeError),
    /// Not sent: the node's breaker was open. A failed vote whose request never left.
    Skipped(NodeError),
}

/// Consecutive timeouts that open a node's breaker.
const BREAKER_THRESHOLD: u32 = 3;

/// Per-node circuit breaker: after [`BREAKER_THRESHOLD`] timeouts in a row, spread over at least
/// two node timeouts without any answer (so one burst of concurrent timeouts on a briefly
/// overloaded machine does not open it), the node is skipped until `backoff` has passed. Then it
/// is half-open: one request goes to the node as a trial, the others are still skipped until the
/// trial's answer closes the breaker or its timeout reopens it (a trial that never reports, its
/// request dropped, gives way to the next one after two node timeouts).
#[derive(Debug)]
pub(crate) struct Breaker {
    timeouts: AtomicU32,
    /// Microseconds since `epoch` until which the node is skipped (0: closed). Once passed, the
    /// first request to see it moves it on by `trial` and goes to the node.
    open_until_us: AtomicU64,
    /// Microseconds since `epoch` of the last answer (or of the breaker's creation).
    last_answer_us: AtomicU64,
    epoch: Instant,
    backoff: Duration,
    quiet: Duration,
    /// How long a trial request has before the next one may go (two node timeouts).
    trial: Duration,
    /// How many votes were skipped because the breaker was open (for tests and reports).
    skipped: AtomicU64,
}

impl Breaker {
    /// A breaker for a node with this timeout, skipping it for `backoff` once open.
    pub(crate) fn new(node_timeout: Duration, backoff: Duration) -> Breaker {
        Breaker {
            timeouts: AtomicU32::new(0),
            open_until_us: AtomicU64::new(0),
            last_answer_us: AtomicU64::new(0),
            epoch: Instant::now(),
            backoff,
            quiet: node_timeout * 2,
            trial: node_timeout * 2,
            skipped: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether a request may go to the node now: always while closed; once open, only the one
    /// trial request after the back-off. Counts the skip when not.
    pub(super) fn admit(&self) -> bool {
        let until = self.open_until_us.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        let now = self.now_us();
        if now >= until {
            let trial_until = now.saturating_add(duration_us(self.trial)).max(1);
            // One caller wins the trial; the others see the breaker open until it reports.
            let won = self
                .open_until_us
                .compare_exchange(until, trial_until, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
            if won {
                return true;
            }
        }
        self.skipped.fetch_add(1, Ordering::Relaxed);
        false
    }

    fn record<T>(&self, reply: &NodeReply<T>) {
        match reply {
            NodeReply::Failed(e) if e.kind() == ErrorKind::Timeout => {
                let n = self.timeouts.fetch_add(1, Ordering::Relaxed) + 1;
                let now = self.now_us();
                let silent_us = now.saturating_sub(self.last_answer_us.load(Ordering::Relaxed));
                if n >= BREAKER_THRESHOLD
                    && u128::from(silent_us) >= self.quiet.as_micros()
                    && !self.backoff.is_zero()
                {
                    let until = now.saturating_add(duration_us(self.backoff)).max(1);
                    self.open_until_us.store(until, Ordering::Relaxed);
                }
            }
            NodeReply::Failed(_) | NodeReply::Skipped(_) => {}
            NodeReply::Ok(_) => {
                self.last_answer_us.store(self.now_us(), Ordering::Relaxed);
                self.timeouts.store(0, Ordering::Relaxed);
                self.open_until_us.store(0, Ordering::Relaxed);
            }
        }
    }

    /// An answer that came by `by` at the latest: [`record`](Self::record) of an answer
    /// without reading the clock. `by` may be later than the answer (a vote passes its
    /// deadline): the node then counts as silent for less time than it was, so the breaker
    /// opens no earlier than with the answer's own time.
    fn record_answer(&self, by: Instant) {
        let us = u64::try_from(by.saturating_duration_since(self.epoch).as_micros());
        self.last_answer_us
            .store(us.unwrap_or(u64::MAX / 2), Ordering::Relaxed);
        self.timeouts.store(0, Ordering::Relaxed);
        self.open_until_us.store(0, Ordering::Relaxed);
    }

    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2)
}

/// A node's client and what lockkit knows of when the node last started.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) client: LockClient,
    pub(super) breaker: Breaker,
    /// The failed vote of a request not sent (the breaker was open), made once: a skipped vote
    /// costs a clone (its error is shared), not a formatted message.
    pub(super) skipped: NodeError,
    /// When the node started (as of an `INFO server`), by the number of the connection that
    /// asked ([`crate::connection::link::Link::query_on`]): a start time holds for that connection only. A
    /// connection re-established (silently, at the next call) may reach a new process that has
    /// forgotten every lock, so its start is read again. Emptied after an error too.
    starts: Mutex<Vec<(u64, Instant)>>,
    /// Held while the node's start is read, so that the rounds that find it unknown at the
    /// same time (every round in flight, after an error made the node forget it) wait for one
    /// `INFO server` instead of each sending its own.
    reading: tokio::sync::Mutex<()>,
}

/// How many connections' start times a node remembers (more than a node has connections).
const STARTS_KEPT: usize = 64;

impl Node {
    /// A node with a breaker for this node timeout, skipping it for `backoff` once open.
    pub(crate) fn new(client: LockClient, node_timeout: Duration, backoff: Duration) -> Node {
        let skipped = NodeError {
            node: client.target().to_string(),
            error: Box::new(Error::timed_out(
                "Redlock node skipped (circuit open after repeated timeouts)",
                node_timeout,
            )),
        };
        Node {
            client,
            breaker: Breaker::new(node_timeout, backoff),
            skipped,
            starts: Mutex::new(Vec::new()),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    fn forget_start(&self) {
        self.starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// When the node started, as seen over `token`'s connection, and that connection's number:
    /// remembered for the live connection, or read now (`INFO server`, which connects).
    async fn start_for(&self, token: &str) -> Result<(Instant, u64)> {
        if let Some(known) = self.known_start(token) {
            return Ok(known);
        }
        // Boxed: once per connection; inline, it would enlarge every vote's future.
        Box::pin(async {
            // One reader at a time: those that waited find the start it read.
            let _reading = self.reading.lock().await;
            match self.known_start(token) {
                Some(known) => Ok(known),
                None => self.read_start(token).await,
            }
        })
        .await
    }

    /// The start remembered for `token`'s live connection, with the connection's number.
    fn known_start(&self, token: &str) -> Option<(Instant, u64)> {
        let epoch = self.client.conns.conn_for(token).epoch()?;
        self.start_on(epoch).map(|at| (at, epoch))
    }

    /// The start remembered for the connection numbered `epoch`.
    pub(super) fn start_on(&self, epoch: u64) -> Option<Instant> {
        let starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        starts.iter().find(|(e, _)| *e == epoch).map(|&(_, at)| at)
    }

    /// Reads the node's start over `token`'s connection (`INFO server`) and remembers it.
    async fn read_start(&self, token: &str) -> Result<(Instant, u64)> {
        let (uptime, epoch) = self.client.server_uptime(token).await?;
        // INFO counts whole seconds: assume the latest start it allows.
        let at = Instant::now()
            .checked_sub(uptime)
            .unwrap_or_else(Instant::now);
        let mut starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        if starts.len() >= STARTS_KEPT {
            starts.remove(0);
        }
        starts.push((epoch, at));
        Ok((at, epoch))
    }

    /// The restart rule: refuses the node's vote if, at `now`, it had started less than
    /// `longest` ago.
    pub(super) fn restart_rule(started: Instant, now: Instant, longest: Duration) -> Result<()> {
        let uptime = now.saturating_duration_since(started);
        if uptime < longest {
            return Err(Error::NodeRestarted {
                uptime,
                ttl: longest,
            });
        }
        Ok(())
    }

    /// [`restart_rule`](Self::restart_rule), giving the runtime its thread back on a refusal.
    async fn check_uptime(started: Instant, now: Instant, longest: Duration) -> Result<()> {
        let verdict = Self::restart_rule(started, now, longest);
        if verdict.is_err() {
            // Refused without a round trip: a round where every node refuses would otherwise
            // finish without ever giving the runtime its thread back, and a caller that tries
            // again at once would hold that thread for as long as the refusals last.
            tokio::task::yield_now().await;
        }
        verdict
    }

    /// The node's vote on `SET key token NX PX ttl`. With the restart rule (`longest`: the
    /// longest TTL in use on the nodes), refused by a node that started less than `longest` ago
    /// ([`Error::NodeRestarted`]), as seen over the very connection the `SET` goes out on: a
    /// `SET` that went out on a connection made after the check (the old one dropped in
    /// between) does not count, and is undone as an unknown outcome is. The uptime is taken at
    /// `sent`, when the round began (one clock read for every node, and never more uptime than
    /// the node had when its `SET` went out).
    pub(crate) async fn set_nx_checked(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        longest: Option<Duration>,
        sent: Instant,
    ) -> Result<bool> {
        let Some(longest) = longest else {
            return self.client.set_nx(key, token, ttl).await;
        };
        let (started, epoch) = self.start_for(token).await?;
        Self::check_uptime(started, sent, longest).await?;
        let (taken, sent_on) = self.client.set_nx_on(key, token, ttl).await?;
        if taken && sent_on != epoch {
            return Err(Error::Redis(
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "the node's connection was re-established during the vote: its start time \
                     is unknown, the vote does not count",
                )
                .into(),
            ));
        }
        Ok(taken)
    }

    /// How long until the node has been up for `longest` (zero: it votes now).
    pub(crate) async fn restart_wait(&self, longest: Duration) -> Result<Duration> {
        let (started, _) = self.start_for(&self.client.conns.task_token()).await?;
        Ok(longest.saturating_sub(started.elapsed()))
    }
}

/// The nodes of a Redlock with what a vote needs: the node timeout.
#[derive(Debug)]
pub(crate) struct Nodes {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) timeout: Duration,
}

/// The replies a vote had when it was decided; `None` where the node had not answered yet (its
/// request goes on in the background).
pub(crate) struct Tally<T> {
    pub(crate) replies: Vec<Option<NodeReply<T>>>,
}

impl<T> Tally<T> {
    pub(crate) fn pending(&self) -> usize {
        self.replies.iter().filter(|r| r.is_none()).count()
    }

    pub(crate) fn errors(&mut self) -> Vec<NodeError> {
        self.replies
            .iter_mut()
            .filter_map(|r| match r.take() {
                Some(NodeReply::Failed(e) | NodeReply::Skipped(e)) => Some(e),
                other => {
                    *r = other;
                    None
                }
            })
            .collect()
    }
}

impl Nodes {
    /// Sends `request` to every node (with `skip_open`: every node whose breaker admits it; a
    /// release goes everywhere its lock may be, since a skipped release would leave a key for
    /// its whole TTL), except where `known` already gives the node's answer (a node the lock's
    /// `SET` never went to), and returns as soon as `decide`
    /// gives a decision for the replies so far (at the latest when every node has answered or
    /// timed out). Replies that come after the decision go to `late` with it, in a background
    /// task that ends when the last straggler has answered or timed out.
    ///
    /// Every request has been polled at least once before this returns (in practice: handed to
    /// its connection), so a later command to the same node on the same connection is queued
    /// behind it; every command of one token goes over one connection per node
    /// (`Connections::conn_for`).
    pub(crate) async fn vote<T, D, F, Fut, Decide, Late>(
        self: &Arc<Self>,
        skip_open: bool,
        known: impl Fn(usize) -> Option<T>,
        request: F,
        decide: Decide,
        late: Late,
    ) -> (D, Tally<T>)
    where
        T: Send + 'static,
        D: Clone + Send + 'static,
        F: Fn(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        Decide: Fn(&[Option<NodeReply<T>>]) -> Option<D>,
        Late: Fn(usize, NodeReply<T>, &D) + Send + 'static,
    {
        let mut replies: Vec<Option<NodeReply<T>>> = (0..self.nodes.len()).map(|_| None).collect();
        let mut in_flight = InFlight(Vec::with_capacity(self.nodes.len()));
        // One deadline for every request of the round (they all go out now): one timer, not
        // one per node. A request still unanswered then has timed out, in the background too.
        let deadline = tokio::time::Instant::now() + self.timeout;
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(answer) = known(i) {
                replies[i] = Some(NodeReply::Ok(answer));
                continue;
            }
            if skip_open && !node.breaker.admit() {
                crate::metrics::redlock_vote_skipped(node.client.target());
                replies[i] = Some(NodeReply::Skipped(node.skipped.clone()));
                continue;
            }
            let fut = request(Arc::clone(node));
            in_flight.0.push((i, Box::pin(fut)));
        }
        // Boxed, so that a vote left with stragglers hands its timer, registered once, to
        // the task that waits for them.
        let mut timer = Box::pin(tokio::time::sleep_until(deadline));
        let decision = loop {
            if let Some(d) = decide(&replies) {
                break d;
            }
            let next = tokio::select! {
                biased;
                next = in_flight.next() => next,
                () = &mut timer => None,
            };
            match next {
                Some((i, result)) => {
                    replies[i] = Some(self.reply(i, result, deadline.into_std()));
                }
                None if in_flight.0.is_empty() => unreachable_decision(),
                None => {
                    // Timed out: every node still to answer failed its vote.
                    in_flight.0.clear();
                    for (i, r) in replies.iter_mut().enumerate() {
                        if r.is_none() {
                            *r = Some(self.timed_out(i));
                        }
                    }
                }
            }
        };
        if !in_flight.0.is_empty() {
            let d = decision.clone();
            let nodes = Arc::clone(self);
            tokio::spawn(in_flight.finish(timer, move |i, result| {
                let reply = match result {
                    Some(result) => nodes.reply(i, result, deadline.into_std()),
                    None => nodes.timed_out(i),
                };
                late(i, reply, &d);
            }));
        }
        (decision, Tally { replies })
    }

    /// Node `i`'s reply to a request that finished, recorded by its breaker (and, for an error,
    /// in the metrics; the node's start time is read again before its next vote).
    /// `by`: the round's deadline, by which any answer came (the clock is not read per answer).
    pub(super) fn reply<T>(&self, i: usize, result: Result<T>, by: Instant) -> NodeReply<T> {
        match result {
            Ok(v) => {
                self.nodes[i].breaker.record_answer(by);
                NodeReply::Ok(v)
            }
            Err(e) => self.failed(i, e),
        }
    }

    /// Node `i`'s vote when its request was still unanswered at the round's deadline.
    pub(super) fn timed_out<T>(&self, i: usize) -> NodeReply<T> {
        self.failed(i, Error::timed_out("Redlock node", self.timeout))
    }

    pub(super) fn failed<T>(&self, i: usize, error: Error) -> NodeReply<T> {
        let node = &self.nodes[i];
        crate::metrics::redlock_node_error(node.client.target(), &error);
        if !matches!(error, Error::NodeRestarted { .. }) {
            // The node may have restarted: read its uptime again before its next vote.
            node.forget_start();
        }
        let reply = NodeReply::Failed(NodeError {
            node: node.client.target().to_string(),
            error: Box::new(error),
        });
        node.breaker.record(&reply);
        reply
    }

    /// A [`vote`](Self::vote) on `yes` that ends once [`settled`]; replies after that are
    /// dropped (their requests still finish, bounded by the node timeout).
    pub(crate) async fn vote_until_settled<T, F, Fut>(
        self: &Arc<Self>,
        skip_open: bool,
        known: impl Fn(usize) -> Option<T>,
        request: F,
        yes: impl Fn(&T) -> bool,
    ) -> Tally<T>
    where
        T: Send + 'static,
        F: Fn(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let decide = |replies: &[Option<NodeReply<T>>]| settled(replies, &yes).map(drop);
        let (_, tally) = self
            .vote(skip_open, known, request, decide, |_, _, _| {})
            .await;
        tally
    }

    /// Votes skipped by open breakers, over all nodes.
    pub(crate) fn skipped(&self) -> u64 {
        self.nodes.iter().map(|n| n.breaker.skipped()).sum()
    }
}

/// The requests of a vote still to answer, by node. A vote has a handful of them: each wake-up
/// polls them all, which costs less than giving each its own waker and task (as
/// `FuturesUnordered` does) for three or five futures.
pub(super) struct InFlight<Fut: ?Sized>(pub(super) Vec<(usize, Pin<Box<Fut>>)>);

impl<Fut: ?Sized> InFlight<Fut> {
    /// The next request to finish, with its node; `None` once none is left.
    pub(super) async fn next<T>(&mut self) -> Option<(usize, Result<T>)>
    where
        Fut: Future<Output = Result<T>>,
    {
        poll_fn(|cx| {
            if self.0.is_empty() {
                return std::task::Poll::Ready(None);
            }
            for k in 0..self.0.len() {
                if let std::task::Poll::Ready(result) = self.0[k].1.as_mut().poll(cx) {
                    let (i, _) = self.0.swap_remove(k);
                    return std::task::Poll::Ready(Some((i, result)));
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

impl<T, Fut: ?Sized + Future<Output = Result<T>>> InFlight<Fut> {
    /// The requests of a decided vote, in the background: each one's result goes to `done` as
    /// it finishes, until none is left or `timer` (the vote's deadline) fires; the requests
    /// still out then are dropped and go to `done` with `None` (their nodes timed out).
    pub(super) async fn finish(
        mut self,
        mut timer: Pin<Box<tokio::time::Sleep>>,
        mut done: impl FnMut(usize, Option<Result<T>>),
    ) {
        loop {
            let next = tokio::select! {
                biased;
                next = self.next() => next,
                () = &mut timer => None,
            };
            match next {
                Some((i, result)) => done(i, Some(result)),
                None => break,
            }
        }
        for (i, _) in self.0.drain(..) {
            done(i, None);
        }
    }
}

/// Every `decide` used with [`Nodes::vote`] decides once all nodes have answered; reaching the
/// end of the replies without a decision is a bug in the caller.
#[cold]
fn unreachable_decision() -> ! {
    panic!("a Redlock vote ran out of replies without a decision (decide must accept a full set)")
}

/// Counts replies matching `yes` and those that cannot: answered otherwise (refused or failed).
pub(crate) fn count<T>(
    replies: &[Option<NodeReply<T>>],
    yes: impl Fn(&T) -> bool,
) -> (usize, usize) {
    let mut ayes = 0;
    let mut noes = 0;
    for r in replies.iter().flatten() {
        match r {
            NodeReply::Ok(v) if yes(v) => ayes += 1,
            _ => noes += 1,
        }
    }
    (ayes, noes)
}

/// Whether the replies so far settle a majority vote on `yes`: `Some(true)` once a quorum said
/// yes, `Some(false)` once a quorum can no longer say yes, `None` while it is still open. A
/// full set of replies always settles it.
pub(crate) fn settled<T>(
    replies: &[Option<NodeReply<T>>],
    yes: impl Fn(&T) -> bool,
) -> Option<bool> {
    let n = replies.len();
    let quorum = quorum_of(n);
    let (ayes, noes) = count(replies, yes);
    if ayes >= quorum {
        Some(true)
    } else if noes > n - quorum {
        Some(false)
    } else {
        None
    }
}

/// The majority of `n` nodes.
///
/// ```
/// assert_eq!(lockkit::quorum_of(3), 2);
/// assert_eq!(lockkit::quorum_of(5), 3);
/// ```
pub fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(v: bool) -> Option<NodeReply<bool>> {
        Some(NodeReply::Ok(v))
    }

    #[test]
    fn counts_ayes_and_everything_else_as_noes() {
        let replies = vec![ok(true), ok(false), None, ok(true)];
        assert_eq!(count(&replies, |v| *v), (2, 1));
    }

    #[test]
    fn a_vote_settles_on_a_quorum_or_once_a_quorum_is_out_of_reach() {
        // Five nodes: quorum 3, so three noes settle it as lost.
        let open = [ok(true), ok(true), ok(false), ok(false), None];
        assert_eq!(settled(&open, |v| *v), None);
        let won = [ok(true), None, ok(true), ok(false), ok(true)];
        assert_eq!(settled(&won, |v| *v), Some(true));
        let lost = [ok(false), ok(true), None, ok(false), ok(false)];
        assert_eq!(settled(&lost, |v| *v), Some(false));
        for full in [
            [ok(true), ok(false)],
            [ok(false), ok(false)],
            [ok(true), ok(true)],
        ] {
            assert!(settled(&full, |v| *v).is_some());
        }
    }

    #[test]
    fn breaker_opens_after_repeated_timeouts_and_closes_on_an_answer() {
        let b = Breaker::new(Duration::ZERO, Duration::from_secs(60));
        let timeout = || {
            NodeReply::<()>::Failed(NodeError {
                node: "n".into(),
                error: Box::new(Error::timed_out("x", Duration::from_millis(1))),
            })
        };
        for _ in 0..BREAKER_THRESHOLD - 1 {
            b.record(&timeout());
            assert!(b.admit());
        }
        b.record(&timeout());
        assert!(!b.admit());
        assert_eq!(b.skipped(), 1);
        b.record(&NodeReply::Ok(()));
        assert!(b.admit());
    }

    #[test]
    fn breaker_stays_closed_for_a_burst_of_timeouts_right_after_an_answer() {
        let b = Breaker::new(Duration::from_secs(60), Duration::from_secs(60));
        b.record(&NodeReply::Ok(()));
        for _ in 0..10 {
            b.record(&NodeReply::<()>::Failed(NodeError {
                node: "n".into(),
                error: Box::new(Error::timed_out("x", Duration::from_millis(1))),
            }));
        }
        assert!(b.admit());
    }

    #[test]
    fn once_the_back_off_has_passed_one_trial_request_goes_and_the_rest_wait_for_it() {
        // Silent long enough for a timeout to open it; a trial has a minute.
        let b = Breaker {
            quiet: Duration::ZERO,
            ..Breaker::new(Duration::from_secs(30), Duration::from_secs(60))
        };
        let timeout = || {
            NodeReply::<()>::Failed(NodeError {
                node: "n".into(),
                error: Box::new(Error::timed_out("x", Duration::from_millis(1))),
            })
        };
        // Opened, and its back-off already over (ended 1 µs after the breaker was made).
        std::thread::sleep(Duration::from_millis(1));
        b.timeouts.store(BREAKER_THRESHOLD, Ordering::Relaxed);
        b.open_until_us.store(1, Ordering::Relaxed);
        assert!(b.admit(), "the trial request");
        assert!(!b.admit() && !b.admit(), "others wait for the trial");
        assert_eq!(b.skipped(), 2);
        // The trial timed out: open again, for a whole back-off.
        b.open_until_us.store(1, Ordering::Relaxed);
        assert!(b.admit());
        b.record(&timeout());
        assert!(b.open_until_us.load(Ordering::Relaxed) > b.now_us());
        assert!(!b.admit());
        // The trial answered: closed, everything goes.
        b.open_until_us.store(1, Ordering::Relaxed);
        assert!(b.admit());
        b.record(&NodeReply::Ok(()));
        assert!(b.admit() && b.admit());
    }

    #[test]
    fn quorum_is_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            assert_eq!(quorum_of(n), q, "n = {n}");
            // Two disjoint quorums cannot exist.
            assert!(2 * quorum_of(n) > n);
        }
    }
}

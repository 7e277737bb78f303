//! Votes whose requests go straight onto each node's live connection. The connection's driver
//! hands each reply to the vote as it reads it, or, once the vote is decided, to its late
//! handler. No task waits on each request, none is spawned for the nodes that answer after the
//! decision, and the vote's task wakes only once enough replies are in to decide it.
//!
//! A node whose request cannot go that way (no live connection yet, its start unknown to the
//! restart rule, a connection that died just now) takes the future path of
//! [`Nodes::vote`](super::quorum::Nodes::vote) inside the same vote. Such a request is polled
//! before the vote returns, like every request of a vote.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use redis::{RedisResult, Value};

use super::quorum::{quorum_of, InFlight, Node, NodeReply, Nodes, Tally};
use crate::connection::link::{Link, ReplySink};
use crate::error::{Error, Result};

/// A node's request on the future path.
pub(super) type Fallback<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// How a node's request goes out.
pub(super) enum Via<'a, T> {
    /// On this live connection, which has this number.
    Direct(&'a Link, u64),
    /// Answered without a request (the restart rule refused the node's vote).
    Answered(Result<T>),
    /// On the future path ([`VoteRequest::fallback`]).
    Future,
}

/// What a node's reply means.
pub(super) enum Read<T> {
    Answer(Result<T>),
    /// To be sent again on the future path ([`VoteRequest::fallback`]), after this error when the
    /// request may have run (`None`: it did not, e.g. the script was not in the server's cache).
    Again(Option<Error>),
}

/// One vote's request, the same for every node.
pub(super) trait VoteRequest<T>: Send + Sync + 'static {
    /// How the request goes to `node`.
    fn route<'a>(&self, node: &'a Node) -> Via<'a, T>;
    /// Encodes the request.
    fn write(&self, out: &mut Vec<u8>);
    /// Reads a node's reply (or the connection's error).
    fn read(&self, reply: RedisResult<Value>) -> Read<T>;
    /// The request as a future, which connects when it must; `after`: the error of a first
    /// attempt that may have run ([`Read::Again`]).
    fn fallback(&self, node: Arc<Node>, after: Option<Error>) -> Fallback<T>;
}

enum Stage<D> {
    Open,
    Decided(D),
    /// The vote was dropped before it was decided: later replies are dropped too.
    Dropped,
}

struct VoteState<T, D> {
    replies: Vec<Option<NodeReply<T>>>,
    /// Nodes whose answer the vote has (taken out of `replies` at the decision).
    done: Vec<bool>,
    /// An answer came since the vote last looked.
    fresh: bool,
    waker: Option<Waker>,
    stage: Stage<D>,
}

struct Vote<T, D, R, L> {
    nodes: Arc<Nodes>,
    request: R,
    late: L,
    /// The vote's deadline, by which any answer came (the breaker's time of an answer).
    deadline: std::time::Instant,
    /// How many answers it takes before the vote can be decided: fewer wake nobody.
    decisive: usize,
    state: Mutex<VoteState<T, D>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T, D, R, L> Vote<T, D, R, L>
where
    T: Send + 'static,
    D: Clone + Send + Sync + 'static,
    R: VoteRequest<T>,
    L: Fn(usize, NodeReply<T>, &D) + Send + Sync + 'static,
{
    /// Node `i`'s answer: into the replies while the vote is open (waking it once the answers
    /// in could decide it, unless the vote itself is the caller), to the late handler once it
    /// is decided. A node the vote already has an answer for (it timed out) is not heard again.
    fn settle(&self, i: usize, reply: impl FnOnce() -> NodeReply<T>, wake: bool) {
        let mut st = lock(&self.state);
        if st.done[i] || matches!(st.stage, Stage::Dropped) {
            return;
        }
        st.done[i] = true;
        let reply = reply();
        match &st.stage {
            Stage::Open => {
                st.replies[i] = Some(reply);
                st.fresh = true;
                let answered = st.replies.iter().filter(|r| r.is_some()).count();
                if wake && answered >= self.decisive {
                    if let Some(w) = st.waker.take() {
                        w.wake();
                    }
                }
            }
            Stage::Decided(d) => (self.late)(i, reply, d),
            Stage::Dropped => {}
        }
    }

    fn settle_result(&self, i: usize, result: Result<T>, wake: bool) {
        self.settle(i, || self.nodes.reply(i, result, self.deadline), wake);
    }

    /// Ready once an answer came since the vote last looked.
    async fn changed(&self) {
        poll_fn(|cx| {
            let mut st = lock(&self.state);
            if std::mem::take(&mut st.fresh) {
                return Poll::Ready(());
            }
            match &st.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => st.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await;
    }
}

impl<T, D, R, L> ReplySink for Vote<T, D, R, L>
where
    T: Send + 'static,
    D: Clone + Send + Sync + 'static,
    R: VoteRequest<T>,
    L: Fn(usize, NodeReply<T>, &D) + Send + Sync + 'static,
{
    fn answer(self: Arc<Self>, idx: usize, reply: RedisResult<Value>) {
        match self.request.read(reply) {
            Read::Answer(result) => self.settle_result(idx, result, true),
            Read::Again(after) => {
                // In a task of its own: the connection's task that answered must not wait. With
                // no runtime left (that task dropped as its runtime shut down), it fails here.
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    let gone = std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "the runtime shut down before the request could be sent again",
                    );
                    self.settle_result(idx, Err(Error::Redis(gone.into())), true);
                    return;
                };
                let fallback = self
                    .request
                    .fallback(Arc::clone(&self.nodes.nodes[idx]), after);
                runtime.spawn(async move {
                    let result = fallback.await;
                    self.settle_result(idx, result, true);
                });
            }
        }
    }
}

/// Marks the vote dropped when its future is dropped before the decision.
struct Armed<'a, T, D>(&'a Mutex<VoteState<T, D>>);

impl<T, D> Drop for Armed<'_, T, D> {
    fn drop(&mut self) {
        let mut st = lock(self.0);
        if matches!(st.stage, Stage::Open) {
            st.stage = Stage::Dropped;
        }
    }
}

impl Nodes {
    /// [`vote`](Self::vote), its requests sent straight onto each node's connection where
    /// they can be (see the module's notes). `late` runs on the connection's task for those:
    /// it must be quick, and must not send on the node's connection itself (it may spawn).
    pub(crate) async fn vote_direct<T, D, R, Decide, Late>(
        self: &Arc<Self>,
        skip_open: bool,
        known: impl Fn(usize) -> Option<T>,
        request: R,
        decide: Decide,
        late: Late,
    ) -> (D, Tally<T>)
    where
        T: Send + 'static,
        D: Clone + Send + Sync + 'static,
        R: VoteRequest<T>,
        Decide: Fn(&[Option<NodeReply<T>>]) -> Option<D>,
        Late: Fn(usize, NodeReply<T>, &D) + Send + Sync + 'static,
    {
        let n = self.nodes.len();
        let quorum = quorum_of(n);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let vote = Arc::new(Vote {
            nodes: Arc::clone(self),
            request,
            late,
            deadline: deadline.into_std(),
            decisive: quorum.min(n + 1 - quorum),
            state: Mutex::new(VoteState {
                replies: (0..n).map(|_| None).collect(),
                done: vec![false; n],
                fresh: false,
                waker: None,
                stage: Stage::Open,
            }),
        });
        let armed = Armed(&vote.state);
        let mut in_flight = InFlight(Vec::new());
        if self.send_all(&vote, skip_open, known, &mut in_flight) {
            // A round every node refuses must still give the runtime its thread back (see
            // `Node::check_uptime`).
            tokio::task::yield_now().await;
        }
        let mut timer = Box::pin(tokio::time::sleep_until(deadline));
        let (decision, replies) = loop {
            {
                let mut st = lock(&vote.state);
                if let Some(d) = decide(&st.replies) {
                    st.stage = Stage::Decided(d.clone());
                    break (d, std::mem::take(&mut st.replies));
                }
            }
            tokio::select! {
                biased;
                next = in_flight.next(), if !in_flight.0.is_empty() => {
                    if let Some((i, result)) = next {
                        vote.settle_result(i, result, false);
                    }
                }
                () = vote.changed() => {}
                () = &mut timer => {
                    // Timed out: every node still to answer failed its vote.
                    in_flight.0.clear();
                    for i in 0..n {
                        vote.settle(i, || self.timed_out(i), false);
                    }
                }
            }
        };
        drop(armed);
        if !in_flight.0.is_empty() {
            // Stragglers on the future path: as in `vote`, in the background.
            tokio::spawn(in_flight.finish(timer, move |i, result| match result {
                Some(result) => vote.settle_result(i, result, false),
                None => vote.settle(i, || vote.nodes.timed_out(i), false),
            }));
        }
        (decision, Tally { replies })
    }

    /// Sends the vote's request to every node (see [`vote_direct`](Self::vote_direct)): on
    /// its connection, or into `in_flight` on the future path. `true` when the restart rule
    /// refused a node.
    fn send_all<T, D, R, L>(
        self: &Arc<Self>,
        vote: &Arc<Vote<T, D, R, L>>,
        skip_open: bool,
        known: impl Fn(usize) -> Option<T>,
        in_flight: &mut InFlight<dyn Future<Output = Result<T>> + Send>,
    ) -> bool
    where
        T: Send + 'static,
        D: Clone + Send + Sync + 'static,
        R: VoteRequest<T>,
        L: Fn(usize, NodeReply<T>, &D) + Send + Sync + 'static,
    {
        let sink: Arc<dyn ReplySink> = vote.clone();
        let mut refused = false;
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(answer) = known(i) {
                vote.settle(i, || NodeReply::Ok(answer), false);
                continue;
            }
            if skip_open && !node.breaker.admit() {
                crate::metrics::redlock_vote_skipped(node.client.target());
                vote.settle(i, || NodeReply::Skipped(node.skipped.clone()), false);
                continue;
            }
            match vote.request.route(node) {
                Via::Direct(link, epoch) => {
                    match link.send_to(epoch, |out| vote.request.write(out), &sink, i) {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => vote.settle(i, || self.failed(i, e.into()), false),
                        // The connection died since the route was chosen: the future path
                        // connects again.
                        None => in_flight
                            .0
                            .push((i, vote.request.fallback(Arc::clone(node), None))),
                    }
                }
                Via::Answered(result) => {
                    refused = true;
                    vote.settle_result(i, result, false);
                }
                Via::Future => in_flight
                    .0
                    .push((i, vote.request.fallback(Arc::clone(node), None))),
            }
        }
        refused
    }
}

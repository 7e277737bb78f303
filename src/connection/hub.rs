//! The release-notification hub: one subscribed connection per client, the waiting queues its
//! messages wake, and how it stays alive.
//!
//! A waiter trusts the hub to hear the release it waits for, so a hub that can no longer hear
//! anything must say so at once: its waiters then poll (waiting can be slower, never less safe,
//! since every wake-up only leads to one more ordinary acquire attempt). Three ways it could
//! go deaf without noticing, and what stops each:
//!
//! - **The runtime that runs it ends** (a `static` client first used by one `#[tokio::test]`,
//!   a runtime per request in a sync wrapper). The hub's task is dropped with it; a guard in the
//!   task marks the hub down and wakes every waiter, and the next waiter on a live runtime
//!   starts the task again there (as a connection's driver is started again,
//!   `src/connection/link/driver.rs`).
//! - **Its socket goes silent** (a NAT or load-balancer entry dropped: nothing passes, nothing
//!   is closed). The connection is lockkit's own (`Connector`: keepalive, `TCP_USER_TIMEOUT`,
//!   TLS, login), and the task sends a `PING` after [`PING_IDLE`] without a byte read
//!   ([`PING_BUSY`] while anyone waits): a `PING` that nothing answers for [`SILENCE`] ends the
//!   connection. With waiters, a silent hub is found within about a second.
//! - **It never comes up**: opening it (connect, log in, the `SUBSCRIBE` probe) is bounded by
//!   the connect timeout; a hub that did not come up in time starts down and keeps connecting in
//!   the background (a refusal, such as an ACL without the channels, is for good: waiters poll).
//!
//! The connection's protocol (what each command waits for, what each frame is) is
//! `src/connection/subscriber.rs`.
//!
//! Beyond 256 idle channels (no waiters), the idle ones leave the hub's map and are
//! unsubscribed. A key among them may be waited on again before that `UNSUBSCRIBE` is sent; its
//! new waiter subscribes anew, and an `UNSUBSCRIBE` arriving at the server after that
//! `SUBSCRIBE` would drop a subscription the hub counts as live (the waiter would then sleep
//! until the holder's TTL). So the two are ordered: every `SUBSCRIBE` holds a shared lock of the
//! hub while it is queued, the `UNSUBSCRIBE` holds it alone and, under it, leaves out every
//! channel back in the map by then. Either the `SUBSCRIBE` was queued first, and the channel is
//! left out of the `UNSUBSCRIBE`; or the `UNSUBSCRIBE` was, and the `SUBSCRIBE` comes after it
//! on the same connection. Commands on one connection reach the server in the order they were
//! queued, so queueing in this order is enough.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::connector::{Connector, ServerStream};
use super::notify::release_channel;
use super::subscriber::{reply, SubFrame, SubLink};
use super::{Conn, Topology};
use crate::options::ClientOptions;
use crate::resp::frame_len;

/// Idle channels (no waiters) kept subscribed, so a hot key does not subscribe again on every
/// contended acquire; beyond this many, idle ones are unsubscribed.
pub(crate) const IDLE_CHANNELS: usize = 256;

/// How long the hub's connection may go without a byte read before it sends a `PING`, while
/// nobody waits (TCP keepalive covers it too, after about 30 s).
pub(crate) const PING_IDLE: Duration = Duration::from_secs(5);

/// The same while some waiter waits for a release: a silent connection is then found within
/// this and [`SILENCE`].
pub(crate) const PING_BUSY: Duration = Duration::from_millis(200);

/// How long a `PING` may go unanswered (nothing read at all) before the connection counts as
/// dead and is replaced.
pub(crate) const SILENCE: Duration = Duration::from_millis(800);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One client's subscribed connection and its waiting queues.
#[derive(Clone)]
pub(crate) struct Hub(pub(crate) Arc<HubInner>);

pub(crate) struct HubInner {
    /// Opens the subscribed connection: the client's URL, TLS and login.
    connector: Connector,
    connect_timeout: Duration,
    /// The client's response timeout: the longest a waiter waits for a `SUBSCRIBE` to be
    /// confirmed (also bounded by the waiter's deadline) before it polls instead.
    response_timeout: Option<Duration>,
    /// The live subscribed connection (`None` while down: waiters poll meanwhile).
    link: Mutex<Option<Arc<SubLink>>>,
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// Orders an eviction's `UNSUBSCRIBE` against `SUBSCRIBE`s: these share it, the
    /// `UNSUBSCRIBE` holds it alone (see the module docs).
    order: tokio::sync::RwLock<()>,
    /// Bumped on every (re)connect: a channel subscribed in an older generation is not anymore.
    pub(crate) generation: AtomicU64,
    alive: AtomicBool,
    /// A task runs the hub (cleared when it ends or is dropped with its runtime).
    running: AtomicBool,
    /// Notified when the hub is dropped: stops its task.
    stop: Arc<Notify>,
}

impl Drop for HubInner {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

/// The waiters of one client on one key.
pub(crate) struct Channel {
    pub(crate) name: String,
    pub(crate) queue: Mutex<VecDeque<Arc<Slot>>>,
    /// The generation this channel was subscribed in (0: never).
    pub(crate) subscribed: tokio::sync::Mutex<u64>,
    /// This client's fair waiters on the key, by ticket.
    pub(crate) fair: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Channel {
    /// A release message came. Any message wakes the head of the local queue (notify mode); a
    /// fair release names the ticket whose turn it is; a plain release (`1`) wakes every fair
    /// waiter here, since it does not say whose turn it is.
    fn released(&self, message: &[u8]) {
        if let Some(head) = lock(&self.queue).front() {
            head.released.notify_one();
        }
        let fair = lock(&self.fair);
        if let Some(w) = std::str::from_utf8(message).ok().and_then(|t| fair.get(t)) {
            w.notify_one();
        } else if message == b"1" {
            fair.values().for_each(|w| w.notify_one());
        }
    }

    /// After the hub went down or came back: everyone tries once (a release may have gone
    /// unheard), and waits as the hub now allows.
    fn wake_all(&self) {
        self.released(b"1");
    }
}

/// One waiter's place in a channel's queue.
#[derive(Default)]
pub(crate) struct Slot {
    /// You are at the head of the queue now.
    pub(crate) promoted: Notify,
    /// The key was released (for the head).
    pub(crate) released: Notify,
}

/// Why opening the subscribed connection failed.
enum HubOpenError {
    /// The server refused what waiting needs (an ACL without the channels): waiters poll.
    Refused(String),
    /// It did not answer in time, or the connection failed: the hub keeps trying.
    Unavailable(String),
}

impl Hub {
    fn new(connector: Connector, options: &ClientOptions) -> Hub {
        Hub(Arc::new(HubInner {
            connector,
            connect_timeout: options.connect_timeout,
            response_timeout: options.response_timeout,
            link: Mutex::new(None),
            channels: Mutex::new(HashMap::new()),
            order: tokio::sync::RwLock::new(()),
            generation: AtomicU64::new(0),
            alive: AtomicBool::new(false),
            running: AtomicBool::new(false),
            stop: Arc::new(Notify::new()),
        }))
    }

    /// Starts the hub's task on the current runtime, serving `stream` (already subscribed to
    /// nothing), or connecting first.
    fn start(&self, stream: Option<ServerStream>) {
        self.0.running.store(true, Ordering::Release);
        let conn = stream.map(|s| (s, self.install()));
        // Up at once: nothing was waited on before to subscribe again.
        self.0.alive.store(conn.is_some(), Ordering::Release);
        let stop = Arc::clone(&self.0.stop);
        tokio::spawn(run(Arc::downgrade(&self.0), stop, conn));
    }

    /// A new generation's link, installed as the live one (not yet alive: the task subscribes
    /// the channels waited on before, then marks it alive).
    fn install(&self) -> Arc<SubLink> {
        let generation = self.0.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let link = Arc::new(SubLink::new(generation));
        *lock(&self.0.link) = Some(Arc::clone(&link));
        link
    }

    /// Starts the task again on the current runtime when the one that ran it is gone.
    pub(crate) fn revive(&self) {
        if self.0.running.load(Ordering::Acquire) || tokio::runtime::Handle::try_current().is_err()
        {
            return;
        }
        if self
            .0
            .running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::debug!("restarting the release-notification task on this runtime");
            let stop = Arc::clone(&self.0.stop);
            tokio::spawn(run(Arc::downgrade(&self.0), stop, None));
        }
    }

    /// A waiter is about to wait: the task looks again at how often to ping (waiters make it
    /// ping more often, to find a silent connection before they have waited long).
    pub(crate) fn kick(&self) {
        if let Some(link) = lock(&self.0.link).as_ref() {
            link.wake.notify_one();
        }
    }

    pub(crate) fn channel(&self, key: &str) -> Arc<Channel> {
        let name = release_channel(key);
        let mut channels = lock(&self.0.channels);
        if let Some(c) = channels.get(&name) {
            return c.clone();
        }
        if channels.len() >= IDLE_CHANNELS {
            let idle: Vec<String> = channels
                .iter()
                .filter(|(_, c)| {
                    Arc::strong_count(c) == 1
                        && lock(&c.queue).is_empty()
                        && lock(&c.fair).is_empty()
                })
                .map(|(n, _)| n.clone())
                .collect();
            for n in &idle {
                channels.remove(n);
            }
            if !idle.is_empty() {
                tokio::spawn(unsubscribe_evicted(Arc::downgrade(&self.0), idle));
            }
        }
        let c = Arc::new(Channel {
            name: name.clone(),
            queue: Mutex::new(VecDeque::new()),
            subscribed: tokio::sync::Mutex::new(0),
            fair: Mutex::new(HashMap::new()),
        });
        channels.insert(name, c.clone());
        c
    }

    /// Whether the hub hears releases now (`false`: its waiters poll).
    pub(crate) fn alive(&self) -> bool {
        self.0.alive.load(Ordering::Acquire)
    }

    /// Subscribes `channel` in the current generation, once, waiting at most `time_left` (and
    /// the response timeout). `false`: not possible now (a server that does not answer, e.g.
    /// frozen, or a hub that is down: the waiter then polls, within its deadline).
    pub(crate) async fn ensure_subscribed(&self, channel: &Channel, time_left: Duration) -> bool {
        let limit = self
            .0
            .response_timeout
            .map_or(time_left, |t| t.min(time_left));
        match tokio::time::timeout(limit, self.subscribe_once(channel)).await {
            Ok(subscribed) => subscribed,
            Err(_) => {
                tracing::debug!(channel = %channel.name, "no SUBSCRIBE confirmation in time; polling");
                false
            }
        }
    }

    async fn subscribe_once(&self, channel: &Channel) -> bool {
        let mut at = channel.subscribed.lock().await;
        let Some(link) = lock(&self.0.link).clone() else {
            return false;
        };
        if *at == link.generation {
            return self.alive();
        }
        let confirmed = {
            let _order = self.0.order.read().await;
            link.subscribe(&channel.name)
        };
        match confirmed {
            Some(rx) => match rx.await {
                Ok(Ok(())) => {
                    *at = link.generation;
                    self.alive()
                }
                Ok(Err(e)) => {
                    tracing::debug!(channel = %channel.name, error = %e, "subscribe refused; polling");
                    false
                }
                Err(_) => false,
            },
            None => false,
        }
    }
}

/// Unsubscribes channels evicted as idle, except those waited on again meanwhile (back in the
/// map: subscribed anew, or about to be). Holds the hub's order alone until the command is
/// queued, so no `SUBSCRIBE` of those channels can be overtaken by it.
async fn unsubscribe_evicted(hub: Weak<HubInner>, mut names: Vec<String>) {
    let Some(inner) = hub.upgrade() else { return };
    let _alone = inner.order.write().await;
    {
        let channels = lock(&inner.channels);
        names.retain(|n| !channels.contains_key(n));
    }
    let Some(link) = lock(&inner.link).clone() else {
        return;
    };
    if !names.is_empty() {
        link.unsubscribe(&names);
    }
}

/// Opens the release notifications of a client on `url`, a target of this `topology`;
/// `Ok(Err(why))` when its waiters must poll instead. `conn` is one of the client's own
/// connections (for the `PUBLISH` check). Bounded by the connect timeout: a hub that has not
/// come up by then starts down and keeps connecting in the background.
///
/// # Errors
/// A URL or TLS setting that cannot make a connector (already checked by the caller's connect).
pub(crate) async fn open_hub(
    url: &str,
    options: &ClientOptions,
    topology: Topology,
    conn: Conn,
) -> crate::Result<Result<Hub, String>> {
    if topology != Topology::Standalone {
        return Ok(Err(format!(
            "a {} target: pub/sub does not reach the lock's server",
            topology.name()
        )));
    }
    let info = super::connection_info(url, false)?;
    let connector = Connector::new(info, options.tls_root_ca.as_deref())?;
    let hub = Hub::new(connector.clone(), options);
    let opened = tokio::time::timeout(options.connect_timeout, async {
        let stream = subscribe_probe(&connector).await?;
        publish_probe(conn).await?;
        Ok(stream)
    })
    .await
    .unwrap_or_else(|_| {
        Err(HubOpenError::Unavailable(format!(
            "no answer within the connect timeout ({:?})",
            options.connect_timeout
        )))
    });
    match opened {
        Ok(stream) => hub.start(Some(stream)),
        Err(HubOpenError::Refused(why)) => return Ok(Err(why)),
        Err(HubOpenError::Unavailable(why)) => {
            tracing::warn!(
                target = %crate::url::redact_url(url),
                why,
                "the release-notification connection did not come up; waiters poll until it does"
            );
            hub.start(None);
        }
    }
    Ok(Ok(hub))
}

/// A new subscribed connection that may subscribe to the release channels: `SUBSCRIBE` and
/// `UNSUBSCRIBE` of a probe channel, answered. A user whose ACL lacks them is refused here, at
/// connect, rather than on every wait.
async fn subscribe_probe(connector: &Connector) -> Result<ServerStream, HubOpenError> {
    let unavailable = |e: &dyn std::fmt::Display| HubOpenError::Unavailable(e.to_string());
    let mut stream = connector
        .connect()
        .await
        .map_err(|e| unavailable(&format!("no subscribed connection: {e}")))?;
    let probe = release_channel("lockkit:probe");
    let mut out = Vec::new();
    for cmd in [&b"SUBSCRIBE"[..], b"UNSUBSCRIBE"] {
        crate::resp::write_array_len(&mut out, 2);
        crate::resp::write_bulk(&mut out, cmd);
        crate::resp::write_bulk(&mut out, probe.as_bytes());
    }
    stream.write_all(&out).await.map_err(|e| unavailable(&e))?;
    let mut buf = Vec::new();
    for cmd in ["SUBSCRIBE", "UNSUBSCRIBE"] {
        let frame = loop {
            if let Some(len) = frame_len(&buf).map_err(|e| unavailable(&e))? {
                break buf.drain(..len).collect::<Vec<u8>>();
            }
            if stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| unavailable(&e))?
                == 0
            {
                return Err(unavailable(&"the server closed the subscribed connection"));
            }
        };
        if let SubFrame::Refused(e) = reply(&frame).map_err(|e| unavailable(&e))? {
            return Err(HubOpenError::Refused(format!("{cmd} {probe} refused: {e}")));
        }
    }
    Ok(stream)
}

/// `PUBLISH` once on the probe channel over one of the client's own connections (a refused
/// `PTTL` later only makes that one wait poll).
async fn publish_probe(mut conn: Conn) -> Result<(), HubOpenError> {
    let probe = release_channel("lockkit:probe");
    match redis::cmd("PUBLISH")
        .arg(&probe)
        .arg("0")
        .query_async::<i64>(&mut conn)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code().is_some() => Err(HubOpenError::Refused(format!(
            "PUBLISH {probe} refused: {e}"
        ))),
        Err(e) => Err(HubOpenError::Unavailable(e.to_string())),
    }
}

/// How a connection's service ended.
enum HubEnd {
    /// The hub was dropped.
    Stopped,
    /// The connection closed, failed or went silent: why.
    Dead(String),
}

/// Marks the hub's task as gone when it ends, or is dropped with its runtime: the hub is down
/// (its waiters poll) until a waiter on a live runtime starts it again ([`Hub::revive`]).
struct HubTask(Weak<HubInner>);

impl Drop for HubTask {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            go_down(&inner);
            inner.running.store(false, Ordering::Release);
        }
    }
}

/// The hub hears nothing now: its link ends (confirmations awaited fail), and every waiter
/// tries once and then polls.
fn go_down(inner: &HubInner) {
    inner.alive.store(false, Ordering::Release);
    if let Some(link) = lock(&inner.link).take() {
        link.end();
    }
    wake_all_heads(inner);
}

/// The hub's task: serves the subscribed connection (messages wake waiters, replies answer
/// commands, `PING`s check it is alive); when it ends, the hub is down and the task connects
/// again with a back-off (100 ms, doubling to 5 s), subscribes again to the keys waited on, and
/// is up once more.
async fn run(
    hub: Weak<HubInner>,
    stop: Arc<Notify>,
    mut conn: Option<(ServerStream, Arc<SubLink>)>,
) {
    let _running = HubTask(hub.clone());
    let mut backoff = Duration::from_millis(100);
    loop {
        let (stream, link) = match conn.take() {
            Some(c) => c,
            None => {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.notified() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                let Some(inner) = hub.upgrade() else { return };
                let connect = inner.connector.connect();
                match tokio::time::timeout(inner.connect_timeout, connect).await {
                    Ok(Ok(stream)) => (stream, Hub(inner).install()),
                    _ => continue,
                }
            }
        };
        let serving = serve(&hub, &stop, stream, &link);
        let resubscribing = resubscribe(&hub, &link);
        tokio::pin!(serving, resubscribing);
        let mut resubscribed = false;
        let ended = loop {
            tokio::select! {
                ended = &mut serving => break ended,
                () = &mut resubscribing, if !resubscribed => {
                    resubscribed = true;
                    backoff = Duration::from_millis(100);
                }
            }
        };
        let Some(inner) = hub.upgrade() else { return };
        match ended {
            HubEnd::Stopped => return,
            HubEnd::Dead(why) => {
                tracing::warn!(
                    why,
                    "the release-notification connection ended; waiters poll until it is back"
                );
                if lock(&inner.link)
                    .as_ref()
                    .is_some_and(|l| Arc::ptr_eq(l, &link))
                {
                    go_down(&inner);
                } else {
                    link.end();
                }
            }
        }
    }
}

/// Subscribes the channels waited on before over a new `link`, then marks the hub alive and
/// wakes every waiter (a release may have gone unheard while it was down).
async fn resubscribe(hub: &Weak<HubInner>, link: &SubLink) {
    let Some(inner) = hub.upgrade() else { return };
    let channels: Vec<Arc<Channel>> = lock(&inner.channels).values().cloned().collect();
    for c in channels {
        // The locks in the order `subscribe_once` takes them.
        let mut at = c.subscribed.lock().await;
        let confirmed = {
            let _order = inner.order.read().await;
            link.subscribe(&c.name)
        };
        let Some(rx) = confirmed else { return };
        let limit = inner.response_timeout.unwrap_or(SILENCE * 5);
        if let Ok(Ok(Ok(()))) = tokio::time::timeout(limit, rx).await {
            *at = link.generation;
        }
    }
    inner.alive.store(true, Ordering::Release);
    wake_all_heads(&inner);
}

/// Reads and writes the subscribed connection until it ends or the hub is dropped.
async fn serve(
    hub: &Weak<HubInner>,
    stop: &Notify,
    mut stream: ServerStream,
    link: &SubLink,
) -> HubEnd {
    // Nothing of ours must reach the server after the hub gave the connection up.
    stream.abort();
    let mut buf = Vec::with_capacity(4096);
    let mut heard = Instant::now();
    let mut pinged: Option<Instant> = None;
    loop {
        let out = link.take_out();
        if !out.is_empty() {
            match tokio::time::timeout(SILENCE, stream.write_all(&out)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return HubEnd::Dead(format!("writing: {e}")),
                Err(_) => return HubEnd::Dead(format!("nothing written for {SILENCE:?}")),
            }
        }
        let next = match pinged {
            Some(at) => at + SILENCE,
            None => {
                let busy = hub.upgrade().is_some_and(|h| has_waiters(&h));
                heard + if busy { PING_BUSY } else { PING_IDLE }
            }
        };
        tokio::select! {
            read = stream.read_buf(&mut buf) => match read {
                Ok(0) => return HubEnd::Dead("closed by the server".into()),
                Err(e) => return HubEnd::Dead(format!("reading: {e}")),
                Ok(_) => {
                    (heard, pinged) = (Instant::now(), None);
                    if let Err(e) = dispatch(hub, link, &mut buf) {
                        return HubEnd::Dead(format!("a reply it could not read: {e}"));
                    }
                }
            },
            () = link.wake.notified() => {}
            () = tokio::time::sleep_until(next) => match pinged {
                Some(_) => return HubEnd::Dead(format!("silent: a PING had no answer for {SILENCE:?}")),
                None => {
                    link.ping();
                    pinged = Some(Instant::now());
                }
            },
            () = stop.notified() => return HubEnd::Stopped,
        }
    }
}

/// Whether any waiter waits on the hub (it holds a channel: the map's own reference aside).
fn has_waiters(inner: &HubInner) -> bool {
    lock(&inner.channels)
        .values()
        .any(|c| Arc::strong_count(c) > 1)
}

/// Handles every whole frame in `buf`: messages wake their channel's waiters, replies answer
/// the commands that wait for them.
fn dispatch(hub: &Weak<HubInner>, link: &SubLink, buf: &mut Vec<u8>) -> redis::RedisResult<()> {
    while let Some(len) = frame_len(buf)? {
        let frame: Vec<u8> = buf.drain(..len).collect();
        match reply(&frame)? {
            SubFrame::Message(channel, payload) => {
                let Some(inner) = hub.upgrade() else {
                    return Ok(());
                };
                let name = String::from_utf8_lossy(&channel);
                let channel = lock(&inner.channels).get(name.as_ref()).cloned();
                if let Some(c) = channel {
                    c.released(&payload);
                }
            }
            SubFrame::Answer => link.answered(Ok(())),
            SubFrame::Refused(e) => link.answered(Err(e)),
            SubFrame::Other => {}
        }
    }
    Ok(())
}

fn wake_all_heads(inner: &HubInner) {
    for c in lock(&inner.channels).values() {
        c.wake_all();
    }
}

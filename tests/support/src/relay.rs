//! A delaying TCP relay on loopback: a slow (or faulty) network between a client and a real
//! server.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::Duration;

/// Forwards connections from its own loopback port to `127.0.0.1:target`, holding every chunk
/// for a delay (one for each direction, [`set_delays`](Self::set_delays)) plus up to `jitter`
/// (uniform, from a fixed-seed generator). Stops accepting and closes its connections on drop.
///
/// Connections are numbered from 0 in the order they were accepted
/// ([`accepted`](Self::accepted)); a `LockClient` with one connection opens its connection
/// first (0), then its release-notification connection (1).
///
/// Network faults on demand:
/// - [`drop_after`](Self::drop_after) cuts a connection right after a given command reached
///   the server (its reply never comes back);
/// - [`lose_next`](Self::lose_next) loses the next chunk a client sends that holds a given
///   command (it never reaches the server, and the connection stays open);
/// - [`swallow`](Self::swallow) loses everything clients send until [`restore`](Self::restore)
///   closes those connections;
/// - [`stall`](Self::stall), [`stall_connection`](Self::stall_connection) and
///   [`stall_from`](Self::stall_from) make connections silent for good (nothing passes either
///   way, nothing is closed) while the others are served;
/// - [`hold`](Self::hold) keeps what clients send on the connections open now and
///   [`flush`](Self::flush) delivers it later, as a network that buffered it would.
#[derive(Debug)]
pub struct DelayRelay {
    port: u16,
    delays: Arc<Delays>,
    stop: Arc<AtomicBool>,
    faults: Arc<RelayFaults>,
}

/// The one-way delays, in microseconds.
#[derive(Debug, Default)]
struct Delays {
    /// Client to server.
    up_us: AtomicU64,
    /// Server to client.
    down_us: AtomicU64,
}

/// What the pumps of every connection check before forwarding.
#[derive(Debug, Default)]
struct RelayFaults {
    /// One-shot: the next client chunk containing these bytes is forwarded, then its connection
    /// is closed before anything more passes either way.
    drop_after: Mutex<Option<Vec<u8>>>,
    /// One-shot: the next client chunk containing these bytes is thrown away.
    lose_next: Mutex<Option<Vec<u8>>>,
    /// How many chunks `lose_next` threw away.
    lost: AtomicU64,
    /// Client bytes are read and thrown away (neither forwarded nor answered).
    swallow: AtomicBool,
    /// Bumped by [`DelayRelay::restore`]: connections accepted before are closed.
    generation: AtomicU64,
    /// Connections numbered in one of these ranges (`from..to`) are stalled.
    stalled: Mutex<Vec<(u64, u64)>>,
    /// The number the next accepted connection gets.
    next_link: AtomicU64,
    /// Every connection accepted (for [`DelayRelay::hold`] and [`DelayRelay::flush`]).
    links: Mutex<Vec<Weak<RelayLink>>>,
}

impl RelayFaults {
    fn stalled(&self, number: u64) -> bool {
        lock(&self.stalled)
            .iter()
            .any(|&(from, to)| (from..to).contains(&number))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One relayed connection: both directions stop once it is cut.
#[derive(Debug)]
struct RelayLink {
    cut: AtomicBool,
    /// Replies are thrown away: the link is about to be cut after a command it still forwards.
    cutting: AtomicBool,
    generation: u64,
    /// Its number, in the order connections were accepted.
    number: u64,
    /// The server side, for a flush of held bytes after the client side has gone.
    server: TcpStream,
    /// Bytes held by [`DelayRelay::hold`], while it holds.
    held: Mutex<HeldBytes>,
}

#[derive(Debug, Default)]
struct HeldBytes {
    holding: bool,
    bytes: Vec<u8>,
    /// The client closed or reset its side while bytes were held: the server side is closed
    /// once they are delivered.
    client_gone: bool,
}

impl DelayRelay {
    /// Starts a relay to `target` with the given one-way delay (both directions) and jitter.
    pub fn start(target: u16, delay: Duration, jitter: Duration) -> std::io::Result<DelayRelay> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let delays = Arc::new(Delays::default());
        let stop = Arc::new(AtomicBool::new(false));
        let jitter_us = jitter.as_micros() as u64;
        let (d, s) = (Arc::clone(&delays), Arc::clone(&stop));
        let faults = Arc::new(RelayFaults::default());
        let f = Arc::clone(&faults);
        thread::spawn(move || {
            let mut seed = 0x9E37_79B9_7F4A_7C15u64;
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                            continue;
                        };
                        let Ok(server_side) = server.try_clone() else {
                            continue;
                        };
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        let link = Arc::new(RelayLink {
                            cut: AtomicBool::new(false),
                            cutting: AtomicBool::new(false),
                            generation: f.generation.load(Ordering::SeqCst),
                            number: f.next_link.fetch_add(1, Ordering::SeqCst),
                            server: server_side,
                            held: Mutex::new(HeldBytes::default()),
                        });
                        lock(&f.links).push(Arc::downgrade(&link));
                        for (from, to, upstream) in [
                            (client.try_clone(), server.try_clone(), true),
                            (server.try_clone(), client.try_clone(), false),
                        ] {
                            if let (Ok(from), Ok(to)) = (from, to) {
                                let pump = Pump {
                                    delays: Arc::clone(&d),
                                    jitter_us,
                                    seed,
                                    stop: Arc::clone(&s),
                                    faults: Arc::clone(&f),
                                    link: Arc::clone(&link),
                                    upstream,
                                };
                                thread::spawn(move || pump.run(from, to));
                            }
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let relay = DelayRelay {
            port,
            delays,
            stop,
            faults,
        };
        relay.set_delay(delay);
        Ok(relay)
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` through the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Changes the one-way delay of both directions for chunks forwarded from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.set_delays(delay, delay);
    }

    /// Changes the one-way delays for chunks forwarded from now on: `up` for what clients send,
    /// `down` for what the server answers (a reply held up on its way back).
    pub fn set_delays(&self, up: Duration, down: Duration) {
        self.delays
            .up_us
            .store(up.as_micros() as u64, Ordering::Relaxed);
        self.delays
            .down_us
            .store(down.as_micros() as u64, Ordering::Relaxed);
    }

    /// How many connections the relay has accepted so far (the next one gets this number).
    pub fn accepted(&self) -> u64 {
        self.faults.next_link.load(Ordering::SeqCst)
    }

    /// The next chunk a client sends that contains `pattern` (e.g. a RESP-encoded command and
    /// its key) reaches the server, and then its connection is closed: the client never gets the
    /// reply, as when a connection drops after a command was sent. Once; arm it again for more.
    pub fn drop_after(&self, pattern: &[u8]) {
        *lock(&self.faults.drop_after) = Some(pattern.to_vec());
    }

    /// The next chunk a client sends that contains `pattern` is lost: it never reaches the
    /// server, and its connection stays open (the request waits for a reply that never comes).
    /// Once; [`lost`](Self::lost) counts the chunks lost so far.
    pub fn lose_next(&self, pattern: &[u8]) {
        *lock(&self.faults.lose_next) = Some(pattern.to_vec());
    }

    /// How many chunks [`lose_next`](Self::lose_next) has lost.
    pub fn lost(&self) -> u64 {
        self.faults.lost.load(Ordering::SeqCst)
    }

    /// From now on what clients send is lost: read and thrown away, never answered.
    pub fn swallow(&self) {
        self.faults.swallow.store(true, Ordering::SeqCst);
    }

    /// The connections open now go silent: what either side sends is read and thrown away,
    /// and none is closed, as when a peer vanishes without a reset (a host that died, a NAT or
    /// load-balancer entry dropped). Connections made afterwards are served as usual.
    pub fn stall(&self) {
        let next = self.faults.next_link.load(Ordering::SeqCst);
        lock(&self.faults.stalled).push((0, next));
    }

    /// Connection number `n` ([`accepted`](Self::accepted)) goes silent, as [`stall`](Self::stall)
    /// makes every open one; the others are served.
    pub fn stall_connection(&self, n: u64) {
        lock(&self.faults.stalled).push((n, n + 1));
    }

    /// Connections numbered `n` and later, including those accepted from now on, are silent:
    /// accepted by the kernel, never answered (a server that hangs after accepting).
    pub fn stall_from(&self, n: u64) {
        lock(&self.faults.stalled).push((n, u64::MAX));
    }

    /// What clients send on the connections open now is held, not forwarded, until
    /// [`flush`](Self::flush): a network that buffers it (a black-holed route that comes back,
    /// a middlebox that acknowledged it). Held bytes are delivered at the flush whatever the
    /// client did meanwhile, closed or reset its side included: the worst case, a peer that
    /// acknowledged them. Replies still pass (the server sends none for what it never got).
    pub fn hold(&self) {
        for link in self.links() {
            lock(&link.held).holding = true;
        }
    }

    /// Delivers what [`hold`](Self::hold) held, in order, and forwards again; a connection
    /// whose client has gone meanwhile is closed on the server side once its bytes are out.
    pub fn flush(&self) {
        for link in self.links() {
            let mut held = lock(&link.held);
            if !held.holding {
                continue;
            }
            held.holding = false;
            let bytes = std::mem::take(&mut held.bytes);
            let mut server = &link.server;
            let _ = server.write_all(&bytes);
            if held.client_gone {
                let _ = link.server.shutdown(Shutdown::Both);
            }
        }
    }

    fn links(&self) -> Vec<Arc<RelayLink>> {
        lock(&self.faults.links)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Ends [`swallow`](Self::swallow): closes every connection open now (their lost commands
    /// fail as on a dropped connection) and forwards new ones again.
    pub fn restore(&self) {
        self.faults.generation.fetch_add(1, Ordering::SeqCst);
        self.faults.swallow.store(false, Ordering::SeqCst);
    }
}

/// One direction of one connection.
struct Pump {
    delays: Arc<Delays>,
    jitter_us: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    faults: Arc<RelayFaults>,
    link: Arc<RelayLink>,
    /// Client to server (where the faults apply) rather than back.
    upstream: bool,
}

/// What becomes of one chunk a client sent.
enum Fate {
    Forward,
    /// Forwarded, then the connection is cut.
    Last,
    Lost,
}

impl Pump {
    fn closed(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.link.cut.load(Ordering::SeqCst)
            || self.faults.generation.load(Ordering::SeqCst) != self.link.generation
    }

    /// Whether this client chunk is the armed one of `armed`; disarms it.
    fn matches(armed: &Mutex<Option<Vec<u8>>>, chunk: &[u8]) -> bool {
        let mut armed = lock(armed);
        let hit = armed
            .as_deref()
            .is_some_and(|p| chunk.windows(p.len()).any(|w| w == p));
        if hit {
            *armed = None;
        }
        hit
    }

    /// What happens to this client chunk. Replies stop passing before the last one is
    /// forwarded, so the reply (which may come back at once) is never passed on; the link is
    /// cut once it is out.
    fn fate(&self, chunk: &[u8]) -> Fate {
        if Self::matches(&self.faults.lose_next, chunk) {
            self.faults.lost.fetch_add(1, Ordering::SeqCst);
            return Fate::Lost;
        }
        if Self::matches(&self.faults.drop_after, chunk) {
            self.link.cutting.store(true, Ordering::SeqCst);
            return Fate::Last;
        }
        Fate::Forward
    }

    fn run(mut self, mut from: TcpStream, mut to: TcpStream) {
        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buf = vec![0u8; 64 * 1024];
        while !self.closed() {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let chunk = &buf[..n];
                    if self.upstream && self.faults.swallow.load(Ordering::SeqCst) {
                        continue;
                    }
                    if self.faults.stalled(self.link.number)
                        || (!self.upstream && self.link.cutting.load(Ordering::SeqCst))
                    {
                        continue;
                    }
                    let last = if self.upstream {
                        match self.fate(chunk) {
                            Fate::Lost => continue,
                            Fate::Last => true,
                            Fate::Forward => false,
                        }
                    } else {
                        false
                    };
                    if !last && self.closed() {
                        break;
                    }
                    self.seed = self
                        .seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let extra = if self.jitter_us == 0 {
                        0
                    } else {
                        (self.seed >> 33) % (self.jitter_us + 1)
                    };
                    let delay = if self.upstream {
                        &self.delays.up_us
                    } else {
                        &self.delays.down_us
                    };
                    thread::sleep(Duration::from_micros(delay.load(Ordering::Relaxed) + extra));
                    if self.upstream {
                        // Held under the lock a flush takes, so nothing overtakes held bytes.
                        let mut held = lock(&self.link.held);
                        if held.holding {
                            held.bytes.extend_from_slice(chunk);
                            continue;
                        }
                        let failed = to.write_all(chunk).is_err();
                        if last {
                            self.link.cut.store(true, Ordering::SeqCst);
                        }
                        if failed || last {
                            break;
                        }
                    } else if to.write_all(chunk).is_err() || last {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let mut held = lock(&self.link.held);
        if held.holding {
            // The server side stays open for the flush, which closes it.
            held.client_gone = true;
            let client = if self.upstream { &from } else { &to };
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        drop(held);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

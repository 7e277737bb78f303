//! A delaying TCP relay on loopback: a slow (or faulty) network between a client and a real
//! server.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// Forwards connections from its own loopback port to `127.0.0.1:target`, holding every chunk
/// for `delay` plus up to `jitter` (uniform, from a fixed-seed generator) in each direction.
/// Stops accepting and closes its connections on drop.
///
/// Network faults on demand: [`drop_after`](Self::drop_after) cuts a connection right after a
/// given command reached the server (its reply never comes back); [`swallow`](Self::swallow)
/// loses everything clients send until [`restore`](Self::restore) closes those connections;
/// [`stall`](Self::stall) makes the connections open now silent for good (nothing passes either
/// way, nothing is closed) while new ones are served.
#[derive(Debug)]
pub struct DelayRelay {
    port: u16,
    delay_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    faults: Arc<RelayFaults>,
}

/// What the pumps of every connection check before forwarding.
#[derive(Debug, Default)]
struct RelayFaults {
    /// One-shot: the next client chunk containing these bytes is forwarded, then its connection
    /// is closed before anything more passes either way.
    drop_after: Mutex<Option<Vec<u8>>>,
    /// Client bytes are read and thrown away (neither forwarded nor answered).
    swallow: AtomicBool,
    /// Bumped by [`DelayRelay::restore`]: connections accepted before are closed.
    generation: AtomicU64,
    /// Connections numbered below this are stalled ([`DelayRelay::stall`]).
    stalled_below: AtomicU64,
    /// The number the next accepted connection gets.
    next_link: AtomicU64,
}

/// One relayed connection: both directions stop once it is cut.
struct RelayLink {
    cut: AtomicBool,
    generation: u64,
    /// Its number, in the order connections were accepted.
    number: u64,
}

impl DelayRelay {
    /// Starts a relay to `target` with the given one-way delay and jitter.
    pub fn start(target: u16, delay: Duration, jitter: Duration) -> std::io::Result<DelayRelay> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let delay_us = Arc::new(AtomicU64::new(delay.as_micros() as u64));
        let stop = Arc::new(AtomicBool::new(false));
        let jitter_us = jitter.as_micros() as u64;
        let (d, s) = (Arc::clone(&delay_us), Arc::clone(&stop));
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
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        let link = Arc::new(RelayLink {
                            cut: AtomicBool::new(false),
                            generation: f.generation.load(Ordering::SeqCst),
                            number: f.next_link.fetch_add(1, Ordering::SeqCst),
                        });
                        for (from, to, upstream) in [
                            (client.try_clone(), server.try_clone(), true),
                            (server.try_clone(), client.try_clone(), false),
                        ] {
                            if let (Ok(from), Ok(to)) = (from, to) {
                                let pump = Pump {
                                    delay_us: Arc::clone(&d),
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
        Ok(DelayRelay {
            port,
            delay_us,
            stop,
            faults,
        })
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` through the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Changes the one-way delay for chunks forwarded from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }

    /// The next chunk a client sends that contains `pattern` (e.g. a RESP-encoded command and
    /// its key) reaches the server, and then its connection is closed: the client never gets the
    /// reply, as when a connection drops after a command was sent. Once; arm it again for more.
    pub fn drop_after(&self, pattern: &[u8]) {
        *self
            .faults
            .drop_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(pattern.to_vec());
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
        self.faults.stalled_below.store(next, Ordering::SeqCst);
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
    delay_us: Arc<AtomicU64>,
    jitter_us: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    faults: Arc<RelayFaults>,
    link: Arc<RelayLink>,
    /// Client to server (where the faults apply) rather than back.
    upstream: bool,
}

impl Pump {
    fn closed(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.link.cut.load(Ordering::SeqCst)
            || self.faults.generation.load(Ordering::SeqCst) != self.link.generation
    }

    /// Whether this client chunk is the armed one: the link is cut before it is forwarded, so
    /// the reply (which may come back at once) is never passed on.
    fn cuts_after(&self, chunk: &[u8]) -> bool {
        let mut armed = self
            .faults
            .drop_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let hit = armed
            .as_deref()
            .is_some_and(|p| chunk.windows(p.len()).any(|w| w == p));
        if hit {
            *armed = None;
            self.link.cut.store(true, Ordering::SeqCst);
        }
        hit
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
                    if self.link.number < self.faults.stalled_below.load(Ordering::SeqCst) {
                        continue;
                    }
                    let last = self.upstream && self.cuts_after(chunk);
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
                    thread::sleep(Duration::from_micros(
                        self.delay_us.load(Ordering::Relaxed) + extra,
                    ));
                    if to.write_all(chunk).is_err() || last {
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
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

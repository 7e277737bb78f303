//! A delaying TCP relay on loopback: a slow network between a client and a real server.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Forwards connections from its own loopback port to `127.0.0.1:target`, holding every chunk
/// for `delay` plus up to `jitter` (uniform, from a fixed-seed generator) in each direction.
/// Stops accepting and closes its connections on drop.
#[derive(Debug)]
pub struct DelayRelay {
    port: u16,
    delay_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
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
        thread::spawn(move || {
            let mut seed = 0x9E37_79B9_7F4A_7C15u64;
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                            continue;
                        };
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        for (from, to) in [
                            (client.try_clone(), server.try_clone()),
                            (server.try_clone(), client.try_clone()),
                        ] {
                            if let (Ok(from), Ok(to)) = (from, to) {
                                let (d, s) = (Arc::clone(&d), Arc::clone(&s));
                                let seed = seed;
                                thread::spawn(move || pump(from, to, d, jitter_us, seed, s));
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
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    delay_us: Arc<AtomicU64>,
    jitter_us: u64,
    mut seed: u64,
    stop: Arc<AtomicBool>,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let extra = if jitter_us == 0 {
                    0
                } else {
                    (seed >> 33) % (jitter_us + 1)
                };
                thread::sleep(Duration::from_micros(
                    delay_us.load(Ordering::Relaxed) + extra,
                ));
                if to.write_all(&buf[..n]).is_err() {
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

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

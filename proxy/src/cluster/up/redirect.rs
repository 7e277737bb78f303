//! A part's replies all in: the replies to its prefix dropped, then its reply kept or its
//! redirection followed (`-MOVED`, `-ASK`, `-NOSCRIPT`, `-TRYAGAIN`/`-CLUSTERDOWN`), so that
//! none reaches the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ClusterUp, Part};
use crate::cluster::Router;
use crate::resp::frame_len;

/// Redirections and retries of one command before its last reply is passed on as it is.
const MAX_REDIRECTS: u32 = 40;
/// The wait before a command answered `-TRYAGAIN` or `-CLUSTERDOWN` goes again.
const RETRY_AFTER: Duration = Duration::from_millis(100);
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// What a redirection asks for.
enum Redirect {
    Moved(u16, String),
    Ask(String),
    Retry,
    /// `-NOSCRIPT`: the node does not have the script an `EVALSHA` names.
    NoScript,
}

fn redirect(reply: &[u8]) -> Option<Redirect> {
    if reply.first() != Some(&b'-') {
        return None;
    }
    let line = &reply[1..reply.len().saturating_sub(2)];
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split(' ');
    match words.next()? {
        "MOVED" => {
            let slot = words.next()?.parse().ok()?;
            Some(Redirect::Moved(slot, words.next()?.to_string()))
        }
        "ASK" => {
            words.next()?;
            Some(Redirect::Ask(words.next()?.to_string()))
        }
        "TRYAGAIN" | "CLUSTERDOWN" => Some(Redirect::Retry),
        "NOSCRIPT" => Some(Redirect::NoScript),
        _ => None,
    }
}

impl ClusterUp {
    /// Part `i` of the oldest request has all the replies it waits for (`lost`: its pinned
    /// connection failed): its reply is kept, or its redirection followed.
    pub(super) fn settle(&mut self, i: usize, lost: bool) {
        let router = self.router.clone();
        let p = self.part(i);
        let mut reply = std::mem::take(&mut p.got);
        // A redirection of a command queued in a transaction is the transaction's.
        let queued_redirect = p.drop_prefix_replies(&mut reply);
        if p.queued {
            p.done = Some(reply);
            return;
        }
        if p.pinned {
            // A WATCH not held where it was sent (moved, lost): its EXEC is to fail.
            let moved = redirect(&reply).is_some_and(|r| !matches!(r, Redirect::NoScript));
            let watch_lost = p.tx.is_none() && (lost || moved);
            if moved {
                router.refresh_soon();
            }
            p.done = Some(if moved && watch_lost {
                b"+OK\r\n".to_vec()
            } else {
                reply
            });
            if watch_lost {
                self.watch_lost();
            }
            return;
        }
        match queued_redirect.or_else(|| redirect(&reply)) {
            Some(r) if p.redirects < MAX_REDIRECTS => {
                p.redirects += 1;
                if p.follow(r, &router, reply) {
                    self.resend(i);
                }
            }
            _ => p.done = Some(reply),
        }
    }
}

impl Part {
    /// Cuts the replies to its prefix (`ASKING`, `SCRIPT LOAD`, or `MULTI` and the queued
    /// commands) off the front of `reply`; the first redirection among a transaction's.
    fn drop_prefix_replies(&self, reply: &mut Vec<u8>) -> Option<Redirect> {
        self.prefix.as_ref()?;
        let mut queued_redirect = None;
        let mut cut = 0;
        for _ in 0..self.prefix_n {
            let l = frame_len(&reply[cut..]).ok().flatten().unwrap_or(0);
            if self.tx.is_some() && queued_redirect.is_none() {
                queued_redirect =
                    redirect(&reply[cut..cut + l]).filter(|r| !matches!(r, Redirect::NoScript));
            }
            cut += l;
        }
        reply.drain(..cut);
        queued_redirect
    }

    /// Readies it for where `r` (the redirection in `reply`) sends it. True: to be sent again
    /// now; false: done with `reply` (a script nobody loaded) or to be retried later.
    fn follow(&mut self, r: Redirect, router: &Arc<Router>, reply: Vec<u8>) -> bool {
        match r {
            Redirect::Moved(slot, addr) => {
                router.moved(slot, &addr);
                router.refresh_soon();
                self.set_prefix(None);
                // A server-wide part stays on its node unless that node moved it.
                self.to = Some(addr);
            }
            Redirect::Ask(addr) => {
                self.set_prefix(Some(ASKING));
                self.to = Some(addr);
            }
            Redirect::NoScript => {
                let body = self.sha.as_deref().and_then(|s| router.script(s));
                let Some(body) = body else {
                    self.done = Some(reply);
                    return false;
                };
                let mut load = Vec::new();
                lockkit_resp::write_multibulk(&mut load, [&b"SCRIPT"[..], b"LOAD", &body]);
                self.prefix = Some(load);
                self.prefix_n = 1;
            }
            Redirect::Retry => {
                router.refresh_soon();
                self.set_prefix(None);
                if self.slot.is_some() {
                    self.to = None;
                }
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_read() {
        assert!(matches!(
            redirect(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Redirect::Moved(3999, a)) if a == "127.0.0.1:6381"
        ));
        assert!(matches!(
            redirect(b"-ASK 3999 127.0.0.1:6381\r\n"),
            Some(Redirect::Ask(a)) if a == "127.0.0.1:6381"
        ));
        assert!(matches!(
            redirect(b"-TRYAGAIN x\r\n"),
            Some(Redirect::Retry)
        ));
        assert!(redirect(b"-ERR x\r\n").is_none());
        assert!(redirect(b"+OK\r\n").is_none());
    }
}

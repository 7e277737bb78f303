//! One client connection: its requests in order, what belongs to the connection (protocol,
//! name, authentication, transaction) answered here, everything else sent to the harness.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use lockkit_resp::RequestParser;

use super::pubsub::{mailbox, reply_size, Closing, Inbox, Subscriptions};
use super::resp;
use super::Ctx;
use crate::commands::{is, resolve};
use crate::reply::Reply;
use crate::server::Caller;

mod client;
mod config;
mod login;
mod transaction;

/// Bytes a client may have sent and not yet had answered (Redis's
/// `client-query-buffer-limit`, 1 GiB).
const MAX_QUERY: usize = 1 << 30;
/// The most a connection's read or reply buffer keeps between requests (Redis shrinks an
/// idle client's query buffer too).
const IDLE_BUFFER: usize = 16 * 1024;
/// Commands Redis runs while a script is busy (flagged `allow_busy`).
const ALLOW_BUSY: [&str; 13] = [
    "auth",
    "discard",
    "function|kill",
    "function|stats",
    "hello",
    "multi",
    "quit",
    "replconf",
    "reset",
    "script|kill",
    "shutdown",
    "unwatch",
    "watch",
];

/// Commands a RESP2 connection with subscriptions may send (Redis's subscribed context).
const SUBSCRIBED: [&str; 9] = [
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "ping",
    "quit",
    "reset",
];

/// Writes a message or a subscription reply: an array in RESP2, a push in RESP3.
fn push(r: &Reply, resp3: bool, out: &mut Vec<u8>) {
    match r {
        Reply::Array(items) if resp3 => {
            out.extend_from_slice(format!(">{}\r\n", items.len()).as_bytes());
            items.iter().for_each(|i| resp::encode(i, true, out));
        }
        other => resp::encode(other, resp3, out),
    }
}

fn err(m: impl Into<String>) -> Reply {
    Reply::Error(m.into())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What Redis calls the command for its flags: `parent|sub` for a container.
fn full_name(argv: &[Vec<u8>]) -> String {
    let top = lossy(&argv[0]).to_ascii_lowercase();
    match (top.as_str(), argv.get(1)) {
        ("script" | "function" | "client" | "config" | "debug" | "acl", Some(sub)) => {
            format!("{top}|{}", lossy(sub).to_ascii_lowercase())
        }
        _ => top,
    }
}

struct ServeConn {
    ctx: Arc<Ctx>,
    id: u64,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    created: Instant,
    /// When its last command came, and that command's full name (CLIENT LIST's `idle`, `cmd`).
    last: (Instant, Option<String>),
    name: Option<Vec<u8>>,
    lib: (Option<Vec<u8>>, Option<Vec<u8>>),
    resp3: bool,
    authed: bool,
    /// The user it is logged in as (`default` until AUTH or HELLO names another).
    user: Vec<u8>,
    /// Inside MULTI: the queued commands, and whether one was refused.
    multi: Option<(Vec<Vec<Vec<u8>>>, bool)>,
    /// During EXEC: how many commands it runs (CLIENT LIST's `multi` then).
    executing: Option<usize>,
    /// The reply is EXEC's null array (`*-1` in RESP2), not a null bulk string.
    nil_array: bool,
    /// The reply is EXEC's, and these of its nulls are null arrays (see `nulls`).
    exec_nulls: Vec<bool>,
    /// Its channels and patterns.
    subs: Subscriptions,
    /// The reply is several replies (SUBSCRIBE's, one per channel), sent one after another.
    several: bool,
    /// Its blocking command found nothing: the reply is what it waits for.
    blocked: Option<super::blocking::Wait>,
    quit: bool,
    /// CLIENT REPLY: replies are dropped (OFF), and how many next ones are (SKIP).
    silent: (bool, u8),
    /// Who counts the command being handled for INFO commandstats.
    tally: CountedBy,
}

/// How the command being handled is counted for INFO commandstats.
#[derive(Debug, Clone, Copy)]
enum CountedBy {
    /// Refused before it ran (NOAUTH, MOVED, the subscribed context, BUSY).
    Rejected,
    /// Queued in a transaction: counted when EXEC runs it.
    Queued,
    /// Answered by the connection itself.
    Ran,
    /// Run by the harness, which counted it.
    ByHarness,
}

/// Serves one client until it quits, breaks the protocol or the server stops. `id`: its
/// client id, given in the order the connections were accepted (Redis's), `None` when the
/// server is full (the client is told so and closed, as Redis does).
pub(super) async fn serve(
    mut socket: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    id: Option<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(id) = id else {
        let _ = socket
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    };
    let _ = socket.set_nodelay(true);
    let (outbox, mut inbox) = mailbox(ctx.pubsub_limit);
    let mut c = ServeConn {
        id,
        subs: Subscriptions::new(id, outbox.clone()),
        several: false,
        blocked: None,
        authed: ctx.requirepass.is_none(),
        user: b"default".to_vec(),
        ctx,
        peer,
        local: socket.local_addr().ok(),
        created: Instant::now(),
        last: (Instant::now(), None),
        name: None,
        lib: (None, None),
        resp3: false,
        multi: None,
        executing: None,
        nil_array: false,
        exec_nulls: Vec::new(),
        quit: false,
        silent: (false, 0),
        tally: CountedBy::Rejected,
    };
    c.ctx.shared.connected(true);
    c.ctx.clients().join(id, outbox);
    c.show();
    serve_requests(&mut c, &mut socket, &mut stop, &mut inbox).await;
    c.ctx.clients().gone(c.id);
    c.subs.clear(&mut c.ctx.shared.hub());
    c.ctx.shared.unwatch(c.id);
    c.ctx.shared.connected(false);
}

async fn serve_requests(
    c: &mut ServeConn,
    socket: &mut TcpStream,
    stop: &mut watch::Receiver<bool>,
    inbox: &mut Inbox,
) {
    let closing = inbox.closing();
    let mut parser = RequestParser::default();
    let mut buf: Vec<u8> = Vec::with_capacity(IDLE_BUFFER);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        let n = tokio::select! {
            _ = stop.changed() => return,
            // Past its pubsub output limit the connection is closed, as Redis closes it.
            () = closing.overflowed() => return,
            Some(message) = inbox.recv() => {
                let mut bytes = reply_size(&message);
                push(&message, c.resp3, &mut out);
                while let Some(m) = inbox.try_recv() {
                    bytes += reply_size(&m);
                    push(&m, c.resp3, &mut out);
                }
                if !write(socket, &out, &closing).await {
                    return;
                }
                inbox.written(bytes);
                out.clear();
                continue;
            }
            r = socket.read(&mut chunk) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        buf.extend_from_slice(&chunk[..n]);
        // Requests are read from `start` on; their bytes are dropped once per read.
        let mut start = 0;
        loop {
            // Before login, Redis's limits (a count of at most 10, bulks of at most 16 KiB)
            // refuse a big request at its first header, before any of it is kept.
            match parser.parse(&buf[start..], c.authed) {
                Ok(Some(request)) => {
                    let len = request.len();
                    let argv = request.into_args(&buf[start..]);
                    start += len;
                    if argv.is_empty() {
                        continue;
                    }
                    let mut reply = c.handle(argv).await;
                    c.show();
                    if let Some(wait) = c.blocked.take() {
                        c.nil_array = wait.null_array;
                        if !write(socket, &out, &closing).await {
                            return;
                        }
                        out.clear();
                        let shared = c.ctx.shared.clone();
                        let woken =
                            super::blocking::wait(wait, &shared, socket, &mut buf, stop, &closing);
                        match woken.await {
                            Some(r) => reply = r,
                            None => return,
                        }
                        c.nil_array &= matches!(reply, Reply::Nil);
                        c.show();
                    }
                    c.ctx.shared.count_errors(&reply);
                    let mark = out.len();
                    let several = c.several;
                    if std::mem::take(&mut c.several) {
                        if let Reply::Array(items) = &reply {
                            items.iter().for_each(|r| push(r, c.resp3, &mut out));
                        }
                    } else if std::mem::take(&mut c.nil_array) && !c.resp3 {
                        out.extend_from_slice(b"*-1\r\n");
                    } else if !c.exec_nulls.is_empty() {
                        let arrays = std::mem::take(&mut c.exec_nulls);
                        super::nulls::encode_exec(&reply, &arrays, c.resp3, &mut out);
                    } else {
                        resp::encode(&reply, c.resp3, &mut out);
                    }
                    // Pub/sub's replies are pushes, which CLIENT REPLY leaves, as Redis 7.0.
                    if c.silenced() && !several {
                        out.truncate(mark);
                    }
                    if c.quit {
                        let _ = socket.write_all(&out).await;
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let reply = Reply::Error(format!("ERR {}", e.message()));
                    c.ctx.shared.count_errors(&reply);
                    let _ = socket.write_all(&out).await;
                    let _ = socket.write_all(&e.reply()).await;
                    return;
                }
            }
        }
        buf.drain(..start);
        if buf.len() > MAX_QUERY {
            return;
        }
        if !out.is_empty() {
            // Redis writes its replies once it has read and run every request ready: the
            // first reply wakes the client, who would otherwise take the CPU from the server
            // at each one. Yielding lets the other connections' ready requests run first
            // (alone, a connection has nobody to let go first, and the yield would cost it a
            // poll of the sockets per reply).
            if c.ctx.shared.connections() > 1 {
                tokio::task::yield_now().await;
            }
            if !write(socket, &out, &closing).await {
                return;
            }
            out.clear();
        }
        // An idle connection keeps no big buffer: a client that once read a 64 MB value (or
        // sent one) must not hold that memory for as long as it stays connected.
        if out.capacity() > IDLE_BUFFER {
            out = Vec::new();
        }
        if buf.capacity() > IDLE_BUFFER && buf.len() <= IDLE_BUFFER {
            buf.shrink_to(IDLE_BUFFER);
        }
    }
}

/// Writes `out`; false when the socket failed or, meanwhile, the connection went past its
/// pubsub output limit (a client that reads nothing must not hold its writer forever).
async fn write(socket: &mut TcpStream, out: &[u8], closing: &Closing) -> bool {
    tokio::select! {
        r = socket.write_all(out) => r.is_ok(),
        () = closing.overflowed() => false,
    }
}

impl ServeConn {
    /// Handles `argv` and counts it for INFO commandstats where the harness did not.
    async fn handle(&mut self, argv: Vec<Vec<u8>>) -> Reply {
        let started = Instant::now();
        let known = crate::commands::known_name(&argv);
        let arity_ok = resolve(&argv, Caller::Client).is_ok();
        self.tally = CountedBy::Rejected;
        let reply = self.handle_uncounted(argv).await;
        let rejected = match self.tally {
            CountedBy::ByHarness => return reply,
            CountedBy::Queued if matches!(&reply, Reply::Status(s) if s == "QUEUED") => {
                return reply
            }
            CountedBy::Ran => !arity_ok,
            CountedBy::Queued | CountedBy::Rejected => true,
        };
        if let Some(name) = known {
            (self.ctx.shared).count_command(name, started.elapsed(), &reply, rejected);
        }
        reply
    }

    async fn handle_uncounted(&mut self, argv: Vec<Vec<u8>>) -> Reply {
        let name = full_name(&argv);
        let top = name.split('|').next().unwrap_or_default().to_string();
        self.last = (Instant::now(), Some(name.clone()));
        if !self.authed && !matches!(top.as_str(), "auth" | "hello" | "quit" | "reset") {
            return err("NOAUTH Authentication required.");
        }
        if let Some(node) = &self.ctx.cluster {
            if let Err(e) = node.redirect(&mut self.multi, &top, &argv) {
                if top == "exec" {
                    self.ctx.shared.unwatch(self.id);
                }
                return e;
            }
        }
        if !self.resp3 && self.subs.count() > 0 && !SUBSCRIBED.contains(&top.as_str()) {
            return err(format!("ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"));
        }
        if !ALLOW_BUSY.contains(&name.as_str()) {
            if let Some(busy) = self.ctx.shared.busy_reply() {
                if top == "exec" && self.multi.take().is_some() {
                    self.ctx.shared.unwatch(self.id);
                    return super::refusals::exec_abort(&busy);
                }
                if let Some((_, refused)) = self.multi.as_mut() {
                    *refused = true;
                }
                return busy;
            }
        }
        if self.multi.is_some()
            && !matches!(
                top.as_str(),
                "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
            )
        {
            self.tally = CountedBy::Queued;
            let local = transaction::is_local(&argv);
            if let Some(oom) = super::refusals::refuse_queued(&self.ctx.shared, &argv, local).await
            {
                if let Some((_, refused)) = self.multi.as_mut() {
                    *refused = true;
                }
                return oom;
            }
            return self.queue(argv);
        }
        self.tally = CountedBy::Ran;
        self.run(&top, &name, argv).await
    }

    async fn run(&mut self, top: &str, name: &str, argv: Vec<Vec<u8>>) -> Reply {
        match name {
            "script|kill" if argv.len() == 2 => return self.ctx.shared.kill(true),
            "function|kill" if argv.len() == 2 => return self.ctx.shared.kill(false),
            "function|stats" if argv.len() == 2 && self.ctx.shared.busy_reply().is_some() => {
                return self.ctx.shared.function_stats_busy()
            }
            _ => {}
        }
        match top {
            "hello" => self.hello(&argv),
            "auth" => self.auth(&argv),
            "quit" => {
                self.quit = true;
                Reply::ok()
            }
            "reset" => {
                self.subs.clear(&mut self.ctx.shared.hub());
                self.multi = None;
                self.ctx.shared.unwatch(self.id);
                self.name = None;
                self.resp3 = false;
                self.authed = self.ctx.requirepass.is_none();
                self.user = b"default".to_vec();
                Reply::Status("RESET".into())
            }
            "subscribe" | "psubscribe" | "ssubscribe" if argv.len() < 2 => {
                err(format!("ERR wrong number of arguments for '{top}' command"))
            }
            "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" | "ssubscribe"
            | "sunsubscribe" => {
                let mut hub = self.ctx.shared.hub();
                let replies = self.subs.command(&mut hub, top, &argv[1..]);
                self.several = true;
                Reply::Array(replies)
            }
            "ping" if !self.resp3 && self.subs.count() > 0 && argv.len() <= 2 => {
                let arg = argv.get(1).cloned().unwrap_or_default();
                Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(arg)])
            }
            "pubsub" if argv.len() >= 2 && is(&argv[1], "numpat") && argv.len() == 2 => {
                self.ctx.shared.hub().numpat()
            }
            "pubsub" if argv.len() >= 2 && is(&argv[1], "numsub") => {
                self.ctx.shared.hub().numsub(&argv[2..])
            }
            "pubsub" if argv.len() >= 2 && is(&argv[1], "shardnumsub") => {
                let mine = |c: &[u8]| self.ctx.cluster.as_ref().is_none_or(|n| n.owns(c));
                self.ctx.shared.hub().shard_numsub(&argv[2..], mine)
            }
            "pubsub" if (2..=3).contains(&argv.len()) && is(&argv[1], "shardchannels") => {
                let mine = |c: &[u8]| self.ctx.cluster.as_ref().is_none_or(|n| n.owns(c));
                let pattern = argv.get(2).map(Vec::as_slice);
                self.ctx.shared.hub().shard_channels(pattern, mine)
            }
            "pubsub" if (2..=3).contains(&argv.len()) && is(&argv[1], "channels") => self
                .ctx
                .shared
                .hub()
                .channels(argv.get(2).map(Vec::as_slice)),
            "multi" if self.multi.is_some() => err("ERR MULTI calls can not be nested"),
            "multi" => {
                self.multi = Some((Vec::new(), false));
                Reply::ok()
            }
            "discard" => match self.multi.take() {
                Some(_) => {
                    self.ctx.shared.unwatch(self.id);
                    Reply::ok()
                }
                None => err("ERR DISCARD without MULTI"),
            },
            "exec" => {
                let reply = self.exec().await;
                // EXEC is the connection's to count, whatever its commands were.
                self.tally = CountedBy::Ran;
                reply
            }
            "watch" if self.multi.is_some() => err("ERR WATCH inside MULTI is not allowed"),
            "watch" if argv.len() < 2 => err("ERR wrong number of arguments for 'watch' command"),
            "watch" => match self.ctx.shared.watch(self.id, argv[1..].to_vec()).await {
                Ok(()) => Reply::ok(),
                Err(busy) => busy,
            },
            "unwatch" if argv.len() > 1 => {
                err("ERR wrong number of arguments for 'unwatch' command")
            }
            "unwatch" => {
                self.ctx.shared.unwatch(self.id);
                Reply::ok()
            }
            "select" if argv.len() == 2 => match crate::number::parse_i64(&argv[1]) {
                Some(0) => Reply::ok(),
                Some(_) => err("ERR DB index is out of range"),
                None => err("ERR value is not an integer or out of range"),
            },
            "client" => match self.client(&argv) {
                Some(r) => r,
                None => self.harness(argv).await,
            },
            "config" => match self.config(&argv).await {
                Some(r) => r,
                None => self.harness(argv).await,
            },
            "debug"
                if argv.len() >= 2
                    && (is(&argv[1], "log") || is(&argv[1], "set-active-expire")) =>
            {
                Reply::ok()
            }
            "debug" if argv.len() == 3 && is(&argv[1], "quicklist-packed-threshold") => {
                match super::tuning::packed_threshold(&argv[2]) {
                    Ok(()) => Reply::ok(),
                    Err(e) => err(e),
                }
            }
            "lockkit.clock" => self.clock(&argv).await,
            "cluster" | "asking" | "readonly" | "readwrite" if self.ctx.cluster.is_some() => self
                .ctx
                .cluster
                .as_ref()
                .map_or(Reply::Nil, |n| n.command(&argv)),
            "acl" if argv.len() >= 3 && is(&argv[1], "setuser") => {
                self.users().setuser(&argv[2], &argv[3..])
            }
            "acl" if argv.len() >= 3 && is(&argv[1], "deluser") => self.users().deluser(&argv[2..]),
            "acl" if argv.len() == 2 && is(&argv[1], "users") => self.users().names(),
            "debug" if argv.len() >= 2 && is(&argv[1], "reload") => {
                self.ctx.shared.debug_reload(&argv).await
            }
            "info" => {
                let sections = argv[1..]
                    .iter()
                    .map(|s| lossy(s).to_ascii_lowercase())
                    .collect();
                let maxmemory = match self.ctx.shared.maxmemory().await {
                    Ok(m) => m,
                    Err(busy) => return busy,
                };
                self.ctx
                    .shared
                    .info(
                        sections,
                        self.ctx.port,
                        maxmemory,
                        self.ctx.cluster.is_some(),
                    )
                    .await
            }
            _ => self.harness(argv).await,
        }
    }

    async fn harness(&mut self, argv: Vec<Vec<u8>>) -> Reply {
        self.tally = CountedBy::ByHarness;
        if crate::commands::bpop::block_ms(&argv).is_some() {
            let shared = &self.ctx.shared;
            return match shared.execute_blocking(argv, self.resp3, self.id).await {
                Ok((reply, wait)) => {
                    self.blocked = wait;
                    reply
                }
                Err(busy) => busy,
            };
        }
        let null_array = super::nulls::null_is_array(&argv);
        match self.ctx.shared.execute(vec![argv], self.resp3).await {
            Ok(mut replies) => {
                let reply = replies.pop().unwrap_or(Reply::Nil);
                self.nil_array = null_array && matches!(reply, Reply::Nil);
                reply
            }
            Err(busy) => busy,
        }
    }
}

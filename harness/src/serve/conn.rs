//! One client connection: its requests in order, what belongs to the connection (protocol,
//! name, authentication, transaction) answered here, everything else sent to the harness.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use lockkit_resp::RequestParser;

use super::clients::ClientView;
use super::pubsub::{mailbox, reply_size, Closing, Inbox, Subscriptions};
use super::resp;
use super::Ctx;
use crate::commands::{glob_match, is, resolve};
use crate::reply::Reply;
use crate::server::Caller;

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
            let local = is_local(&argv);
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

    fn queue(&mut self, argv: Vec<Vec<u8>>) -> Reply {
        let known = is_local(&argv) || resolve(&argv, Caller::Client).is_ok();
        let Some((queued, refused)) = self.multi.as_mut() else {
            return err("ERR harness: not in a transaction");
        };
        if !known {
            *refused = true;
            return resolve(&argv, Caller::Client)
                .err()
                .unwrap_or_else(|| err("ERR syntax error"));
        }
        queued.push(argv);
        Reply::Status("QUEUED".into())
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

    async fn exec(&mut self) -> Reply {
        let Some((queued, refused)) = self.multi.take() else {
            return err("ERR EXEC without MULTI");
        };
        if refused {
            self.ctx.shared.unwatch(self.id);
            return err("EXECABORT Transaction discarded because of previous errors.");
        }
        if let Some(abort) = super::refusals::refuse_exec(&self.ctx.shared, &queued).await {
            self.ctx.shared.unwatch(self.id);
            return abort;
        }
        // The watched keys are checked with the harness held for the first run of harness
        // commands (or on their own when the transaction starts with the connection's own).
        let mut watcher = self.ctx.shared.watching(self.id).then_some(self.id);
        if watcher.is_some() && queued.first().is_none_or(|a| is_local(a)) {
            match self
                .ctx
                .shared
                .execute_watched(Vec::new(), self.resp3, watcher.take())
                .await
            {
                Ok(Some(_)) => {}
                Ok(None) => return self.aborted(),
                Err(busy) => return busy,
            }
        }
        // Runs of harness commands go to the harness at once (atomically); the connection's
        // own commands (CLIENT SETNAME...) are answered in between.
        let arrays: Vec<bool> = queued
            .iter()
            .map(|a| super::nulls::null_is_array(a))
            .collect();
        let mut replies = Vec::with_capacity(queued.len());
        let mut run: Vec<Vec<Vec<u8>>> = Vec::new();
        self.executing = Some(queued.len());
        for argv in queued {
            if is_local(&argv) {
                if !run.is_empty() {
                    match self.batch(std::mem::take(&mut run), watcher.take()).await {
                        Some(r) => replies.extend(r),
                        None => return self.aborted(),
                    }
                }
                let name = full_name(&argv);
                let top = name.split('|').next().unwrap_or_default().to_string();
                replies.push(Box::pin(self.run(&top, &name, argv)).await);
            } else {
                run.push(argv);
            }
        }
        if !run.is_empty() {
            match self.batch(run, watcher.take()).await {
                Some(r) => replies.extend(r),
                None => return self.aborted(),
            }
        }
        self.executing = None;
        self.exec_nulls = super::nulls::exec_null_arrays(&arrays, &replies);
        Reply::Array(replies)
    }

    /// EXEC's answer when a watched key was written: a null array.
    fn aborted(&mut self) -> Reply {
        self.executing = None;
        self.nil_array = true;
        Reply::Nil
    }

    /// Runs a transaction's commands on the harness; `None` when `watcher`'s watched keys
    /// were written (the EXEC answers a nil array).
    async fn batch(&mut self, run: Vec<Vec<Vec<u8>>>, watcher: Option<u64>) -> Option<Vec<Reply>> {
        let n = run.len();
        match self
            .ctx
            .shared
            .execute_watched(run, self.resp3, watcher)
            .await
        {
            Ok(r) => r,
            Err(busy) => Some(vec![busy; n]),
        }
    }

    fn hello(&mut self, argv: &[Vec<u8>]) -> Reply {
        let mut proto = if self.resp3 { 3 } else { 2 };
        let mut i = 1;
        if let Some(v) = argv.get(1) {
            match crate::number::parse_i64(v) {
                Some(2) => proto = 2,
                Some(3) => proto = 3,
                Some(_) => return err("NOPROTO unsupported protocol version"),
                None => return err("ERR Protocol version is not an integer or out of range"),
            }
            i = 2;
        }
        let mut setname = None;
        while i < argv.len() {
            let left = argv.len() - i - 1;
            if is(&argv[i], "auth") && left >= 2 {
                if let Err(e) = self.check_password(Some(&argv[i + 1]), &argv[i + 2]) {
                    return e;
                }
                i += 3;
            } else if is(&argv[i], "setname") && left >= 1 {
                setname = Some(argv[i + 1].clone());
                i += 2;
            } else {
                return err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    lossy(&argv[i])
                ));
            }
        }
        if !self.authed {
            return err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if let Some(n) = setname {
            if let Err(e) = self.set_name(n) {
                return e;
            }
        }
        self.resp3 = proto == 3;
        let mode = if self.ctx.cluster.is_some() {
            "cluster"
        } else {
            "standalone"
        };
        let pairs = vec![
            (Reply::bulk("server"), Reply::bulk("redis")),
            (Reply::bulk("version"), Reply::bulk(crate::REDIS_VERSION)),
            (Reply::bulk("proto"), Reply::Int(proto)),
            (Reply::bulk("id"), Reply::Int(self.id as i64)),
            (Reply::bulk("mode"), Reply::bulk(mode)),
            (Reply::bulk("role"), Reply::bulk("master")),
            (Reply::bulk("modules"), Reply::Array(Vec::new())),
        ];
        Reply::Map(pairs)
    }

    fn users(&self) -> std::sync::MutexGuard<'_, super::acl::Users> {
        self.ctx.users.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_password(&mut self, user: Option<&[u8]>, pass: &[u8]) -> Result<(), Reply> {
        let wrong = || err("WRONGPASS invalid username-password pair or user is disabled.");
        if let Some(name) = user.filter(|u| *u != b"default") {
            let users = self.ctx.users.lock().unwrap_or_else(|p| p.into_inner());
            if !users.check(name, pass) {
                return Err(wrong());
            }
            self.authed = true;
            self.user = name.to_vec();
            return Ok(());
        }
        match &self.ctx.requirepass {
            Some(pw) if pw.as_bytes() == pass => {
                self.authed = true;
                self.user = b"default".to_vec();
                Ok(())
            }
            Some(_) => Err(wrong()),
            // The default user has no password: any password opens it (Redis's `nopass`).
            None => {
                self.user = b"default".to_vec();
                Ok(())
            }
        }
    }

    fn auth(&mut self, argv: &[Vec<u8>]) -> Reply {
        match argv.len() {
            2 if self.ctx.requirepass.is_none() => err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
            2 => self.check_password(None, &argv[1]).map_or_else(|e| e, |()| Reply::ok()),
            3 => self
                .check_password(Some(&argv[1]), &argv[2])
                .map_or_else(|e| e, |()| Reply::ok()),
            _ => err("ERR syntax error"),
        }
    }

    fn set_name(&mut self, name: Vec<u8>) -> Result<(), Reply> {
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(err(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = (!name.is_empty()).then_some(name);
        Ok(())
    }

    /// The CLIENT subcommands of one connection; `None`: the harness answers.
    fn client(&mut self, argv: &[Vec<u8>]) -> Option<Reply> {
        let sub = lossy(argv.get(1)?).to_ascii_lowercase();
        Some(match (sub.as_str(), argv.len()) {
            ("id", 2) => Reply::Int(self.id as i64),
            ("reply", 3) => {
                let mode = lossy(&argv[2]).to_ascii_lowercase();
                match mode.as_str() {
                    "on" => self.silent = (false, 0),
                    "off" => self.silent.0 = true,
                    // This reply and the next command's.
                    "skip" => self.silent.1 = 2,
                    _ => return Some(err("ERR syntax error")),
                }
                Reply::ok()
            }
            ("getname", 2) => self.name.clone().map_or(Reply::Nil, Reply::Bulk),
            ("setname", 3) => match self.set_name(argv[2].clone()) {
                Ok(()) => Reply::ok(),
                Err(e) => e,
            },
            // CLIENT SETINFO is Redis 7.2's; clients send it on connect and 7.2 answers OK.
            ("setinfo", 4) => {
                let value = argv[3].clone();
                if value.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                    return Some(err(format!(
                        "ERR {} cannot contain spaces, newlines or special characters.",
                        lossy(&argv[2])
                    )));
                }
                if is(&argv[2], "lib-name") {
                    self.lib.0 = Some(value);
                } else if is(&argv[2], "lib-ver") {
                    self.lib.1 = Some(value);
                } else {
                    return Some(err(format!(
                        "ERR Unrecognized option '{}'",
                        lossy(&argv[2])
                    )));
                }
                Reply::ok()
            }
            ("info", 2) => Reply::Verbatim("txt".into(), self.view().line(self.id).into_bytes()),
            ("list", _) => {
                self.show();
                self.ctx.clients().list(argv)
            }
            ("kill", 2) => err("ERR wrong number of arguments for 'client|kill' command"),
            ("kill", _) => {
                self.show();
                let exists = |name: &[u8]| self.users().exists(name);
                let (reply, me) = self.ctx.clients().kill(argv, self.id, &exists);
                self.quit |= me;
                reply
            }
            ("unblock", 3 | 4) => self.ctx.shared.blocked().unblock(argv),
            ("no-evict", 3) if is(&argv[2], "on") || is(&argv[2], "off") => Reply::ok(),
            _ => return None,
        })
    }

    /// Whether the reply to the command just handled is dropped (CLIENT REPLY OFF / SKIP).
    fn silenced(&mut self) -> bool {
        if self.silent.1 > 0 {
            self.silent.1 -= 1;
            return true;
        }
        self.silent.0
    }

    /// What CLIENT LIST shows of this connection now.
    fn view(&self) -> ClientView {
        ClientView {
            peer: self.peer,
            local: self.local,
            created: self.created,
            last: self.last.0,
            name: self.name.clone(),
            cmd: self.last.1.clone(),
            subs: self.subs.counts(),
            multi: (self.multi.as_ref().map(|(q, _)| q.len())).or(self.executing),
            blocked: self.blocked.is_some(),
            resp3: self.resp3,
            user: self.user.clone(),
        }
    }

    /// Puts this connection's view where CLIENT LIST of the others finds it.
    fn show(&self) {
        self.ctx.clients().show(self.id, self.view());
    }

    /// CONFIG GET / SET / RESETSTAT for the settings the server has; `None`: the harness
    /// answers (HELP, and `not emulated` for the rest).
    async fn config(&mut self, argv: &[Vec<u8>]) -> Option<Reply> {
        let sub = lossy(argv.get(1)?).to_ascii_lowercase();
        let maxmemory = match self.ctx.shared.maxmemory().await {
            Ok(m) => m,
            Err(busy) => return Some(busy),
        };
        match sub.as_str() {
            "get" if argv.len() >= 3 => Some(self.config_get(&argv[2..], maxmemory)),
            "set" if argv.len() >= 4 && argv.len().is_multiple_of(2) => {
                Some(self.config_set(&argv[2..], maxmemory).await)
            }
            "resetstat" if argv.len() == 2 => {
                self.ctx.shared.reset_stats();
                Some(Reply::ok())
            }
            _ => None,
        }
    }

    fn settings(&self, maxmemory: usize) -> Vec<(&'static str, String)> {
        let ms = self.ctx.shared.busy_threshold().as_millis().to_string();
        let mut all = self.ctx.shared.tuning().pairs();
        all.extend([
            ("busy-reply-threshold", ms.clone()),
            ("lua-time-limit", ms),
            ("databases", "1".into()),
            ("maxmemory", maxmemory.to_string()),
            (
                "maxmemory-policy",
                self.ctx.shared.maxmemory_policy().into(),
            ),
            ("port", self.ctx.port.to_string()),
            ("save", String::new()),
            ("appendonly", "no".into()),
            ("notify-keyspace-events", self.ctx.shared.notify_events()),
        ]);
        all
    }

    fn config_get(&self, patterns: &[Vec<u8>], maxmemory: usize) -> Reply {
        let pairs: Vec<(Reply, Reply)> = self
            .settings(maxmemory)
            .into_iter()
            .filter(|(k, _)| patterns.iter().any(|p| glob_match(p, k.as_bytes(), true)))
            .map(|(k, v)| (Reply::bulk(k), Reply::bulk(v)))
            .collect();
        Reply::Map(pairs)
    }

    async fn config_set(&mut self, pairs: &[Vec<u8>], maxmemory: usize) -> Reply {
        let mut threshold = None;
        let mut memory = None;
        let mut replicas = None;
        let mut policy = None;
        let mut tuned = Vec::new();
        for kv in pairs.chunks(2) {
            let key = lossy(&kv[0]).to_ascii_lowercase();
            match super::tuning::check(&key, &kv[1]) {
                Some(Ok(set)) => {
                    tuned.push(set);
                    continue;
                }
                Some(Err(e)) => return err(e),
                None => {}
            }
            match key.as_str() {
                "min-replicas-to-write" => {
                    match crate::number::parse_i64(&kv[1]).filter(|v| (0..=i64::from(i32::MAX)).contains(v)) {
                        Some(v) => replicas = Some(v),
                        None => {
                            return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument couldn't be parsed into an integer"))
                        }
                    }
                }
                "maxmemory" => match super::memory_bytes(&kv[1]) {
                    Some(v) => memory = Some(v),
                    None => {
                        return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument must be a memory value"))
                    }
                },
                "busy-reply-threshold" | "lua-time-limit" => {
                    match crate::number::parse_i64(&kv[1]).filter(|v| *v >= 0) {
                        Some(v) => threshold = Some(Duration::from_millis(v as u64)),
                        None => {
                            return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument couldn't be parsed into an integer"))
                        }
                    }
                }
                "maxmemory-policy" => policy = Some(kv[1].clone()),
                "notify-keyspace-events" => {
                    if !self.ctx.shared.set_notify(&kv[1]) {
                        return err("ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
                    }
                }
                _ => {
                    // Setting what the server already is changes nothing.
                    let same = self
                        .settings(maxmemory)
                        .iter()
                        .any(|(k, v)| *k == key && v.as_bytes() == kv[1].as_slice());
                    if !same {
                        return err(format!(
                            "ERR harness: CONFIG SET '{key}' is not emulated (only busy-reply-threshold, lua-time-limit, maxmemory, maxmemory-policy, min-replicas-to-write, notify-keyspace-events and the encoding thresholds)"
                        ));
                    }
                }
            }
        }
        for set in tuned {
            self.ctx.shared.tuning().set(set);
        }
        if let Some(t) = threshold {
            self.ctx.shared.set_busy_threshold(t);
        }
        if let Some(n) = replicas {
            if let Err(busy) = self.ctx.shared.set_min_replicas(n).await {
                return busy;
            }
        }
        if let Some(p) = policy {
            if let Err(e) = self.ctx.shared.set_maxmemory_policy(p).await {
                return e;
            }
        }
        if let Some(m) = memory {
            if let Err(busy) = self.ctx.shared.set_maxmemory(m).await {
                return busy;
            }
        }
        Reply::ok()
    }

    /// `LOCKKIT.CLOCK GET | ADVANCE ms | SET unix-ms`: the virtual clock without sleeping.
    async fn clock(&mut self, argv: &[Vec<u8>]) -> Reply {
        let usage = || {
            err("ERR usage: LOCKKIT.CLOCK GET | LOCKKIT.CLOCK ADVANCE <milliseconds> | LOCKKIT.CLOCK SET <unix-milliseconds>")
        };
        let ms = |b: &[u8]| {
            crate::number::parse_i64(b)
                .filter(|v| *v >= 0)
                .map(|v| v as u64)
        };
        let (advance, set) = match argv {
            [_, sub] if is(sub, "get") => (None, None),
            [_, sub, v] if is(sub, "advance") => match ms(v) {
                Some(v) => (Some(v), None),
                None => return usage(),
            },
            [_, sub, v] if is(sub, "set") => match ms(v) {
                Some(v) => (None, Some(v)),
                None => return usage(),
            },
            _ => return usage(),
        };
        match self.ctx.shared.clock(advance, set).await {
            Ok(now) => Reply::Int(now),
            Err(busy) => busy,
        }
    }
}

/// Whether the connection answers `argv` itself (not the harness).
fn is_local(argv: &[Vec<u8>]) -> bool {
    let name = full_name(argv);
    let top = name.split('|').next().unwrap_or_default();
    matches!(
        top,
        "hello" | "auth" | "quit" | "reset" | "select" | "lockkit.clock" | "unwatch" | "info"
    ) || matches!(name.as_str(), "acl|setuser" | "acl|deluser" | "acl|users")
        || matches!(
            name.as_str(),
            "client|id"
                | "client|getname"
                | "client|setname"
                | "client|setinfo"
                | "client|info"
                | "client|list"
                | "client|kill"
                | "config|get"
                | "config|set"
                | "config|resetstat"
                | "debug|log"
                | "debug|set-active-expire"
                | "debug|reload"
        )
}

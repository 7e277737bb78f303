//! The built-in `observe` plugin: it recognises lock traffic and measures how long the
//! application really holds its locks, per key pattern.
//!
//! - Acquires: `SET key token NX PX|EX ttl` (redis-py, redsync, rslock, lockkit) and the lock
//!   scripts [`classify_script`] knows (node-redlock, Redisson, lockkit's fenced and fair
//!   acquires).
//! - Releases: compare-and-delete scripts, Redisson's unlock, and `DEL`/`UNLINK` of a key it
//!   saw acquired. A release that finds the lock gone (expired while held, or taken by another
//!   holder since) counts as `released_not_held`.
//! - Scripts are known by the bodies seen in `EVAL` or `SCRIPT LOAD`; an `EVALSHA` of a body it
//!   has never seen passes to the server untouched and is not counted (observe never answers
//!   in the server's place: a client library sends the body after the server's own
//!   `NOSCRIPT`, and observe learns it then).
//!
//! Hold time runs from the acquire's reply passing the proxy to the release command passing
//! it: the application's critical section plus one network hop each way to the proxy.

mod locks;
mod pattern;
mod scripts;
mod table;
mod top;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::plugin::{Action, ConnInfo, Plugin, PluginCommand, ReportCtx};
use crate::resp::{self, ReplyKind};
use locks::ObserveState;

pub use locks::OTHER_PATTERN;
pub use pattern::fold_key;
pub use scripts::{classify_script, ScriptKind};
pub use top::{BigValue, HotKey, TopWindow};

/// The schema name of the report.
pub use lockkit_report::observe::SCHEMA;
/// The report's JSON types live beside the code that reads them (`lockkit ttl --observed`,
/// `lockkit report`).
pub use lockkit_report::observe::{LockPatternReport, ObserveReport, TtlRange};

/// Options of `--plugin observe[:ARGS]`.
#[derive(Debug, Clone, Default)]
pub struct ObserveOptions {
    /// Show the live table (only ever on a terminal).
    pub live: bool,
    /// `top=N`: the N hottest keys and biggest values per window (0: off). `observe` then
    /// sees every command and its reply (it costs the copy of each command until its reply).
    pub top: usize,
    /// `window=D`: the window of `top` (default 10 s).
    pub window: Option<Duration>,
}

/// The window of `observe:top=N` unless `window=D` says.
pub const DEFAULT_TOP_WINDOW: Duration = Duration::from_secs(10);

impl ObserveOptions {
    /// Reads `observe`'s ARGS: `top=N[,window=D]` (empty: the defaults).
    ///
    /// # Errors
    /// An unknown option or a value that does not parse.
    pub fn parse(args: &str, live: bool) -> Result<ObserveOptions, String> {
        let mut o = ObserveOptions {
            live,
            ..ObserveOptions::default()
        };
        for part in args.split(',').filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("top", n)) => {
                    o.top = n
                        .parse()
                        .ok()
                        .filter(|&n| (1..=1000).contains(&n))
                        .ok_or_else(|| format!("top={n}: give a number from 1 to 1000"))?;
                }
                Some(("window", d)) => {
                    let d = lockkit_report::units::parse_duration(d)
                        .map_err(|e| format!("window={d}: {e}"))?;
                    if d < Duration::from_millis(100) {
                        return Err("window must be at least 100ms".into());
                    }
                    o.window = Some(d);
                }
                _ => {
                    return Err(format!(
                        "unknown option `{part}`: observe takes top=N and window=D (e.g. observe:top=10,window=10s)"
                    ))
                }
            }
        }
        if o.window.is_some() && o.top == 0 {
            return Err("window=D goes with top=N".into());
        }
        Ok(o)
    }
}

/// The `observe` plugin.
#[derive(Debug)]
pub struct Observe {
    state: Mutex<ObserveState>,
    options: ObserveOptions,
    started: Instant,
    /// `top=N`: hot keys and big values.
    top: Option<Mutex<top::Top>>,
}

impl Observe {
    /// A fresh `observe`.
    pub fn new(options: ObserveOptions) -> Self {
        let started = Instant::now();
        let window = options.window.unwrap_or(DEFAULT_TOP_WINDOW);
        let top =
            (options.top > 0).then(|| Mutex::new(top::Top::new(options.top, window, started)));
        Observe {
            state: Mutex::new(ObserveState::new(crate::metrics::lock_held)),
            options,
            started,
            top,
        }
    }

    fn state(&self) -> MutexGuard<'_, ObserveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// With `top=N`: every window's hot keys and big values so far (the current one last).
    pub fn top_windows(&self) -> Option<Vec<TopWindow>> {
        let top = self.top.as_ref()?;
        Some(top.lock().unwrap_or_else(PoisonError::into_inner).windows())
    }

    fn with_top(&self, f: impl FnOnce(&mut top::Top)) {
        if let Some(top) = &self.top {
            f(&mut top.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Every pattern seen so far, in first-seen order.
    pub fn patterns(&self) -> Vec<LockPatternReport> {
        self.state().report()
    }

    fn learn(&self, body: &[u8]) -> ScriptKind {
        let kind = classify_script(body);
        self.state().scripts.insert(resp_sha(body), kind);
        kind
    }

    fn script_of(&self, cmd: &PluginCommand<'_>) -> Option<ScriptKind> {
        let first = cmd.args.first()?;
        match cmd.name {
            "EVAL" => Some(
                self.state()
                    .scripts
                    .get(&resp_sha(first))
                    .copied()
                    .unwrap_or_else(|| classify_script(first)),
            ),
            "EVALSHA" => self
                .state()
                .scripts
                .get(&String::from_utf8_lossy(first).to_ascii_lowercase())
                .copied(),
            _ => None,
        }
    }

    fn on_set(&self, args: &[&[u8]], reply: ReplyKind<'_>, latency: Duration) {
        let [key, token, opts @ ..] = args else {
            return;
        };
        let mut nx = false;
        let mut ttl = None;
        let mut i = 0;
        while i < opts.len() {
            let o = opts[i].to_ascii_uppercase();
            let n = || {
                opts.get(i + 1)
                    .and_then(|v| resp::parse_int(v))
                    .map(|v| v.max(0) as u64)
            };
            match o.as_slice() {
                b"NX" => nx = true,
                b"GET" => return,
                b"PX" => {
                    ttl = n().map(Duration::from_millis);
                    i += 1;
                }
                b"EX" => {
                    ttl = n().map(Duration::from_secs);
                    i += 1;
                }
                b"PXAT" | b"EXAT" => i += 1,
                _ => {}
            }
            i += 1;
        }
        if !nx {
            return;
        }
        match reply {
            ReplyKind::Status(b"OK") => self.state().acquired(key, token, ttl, latency),
            ReplyKind::Nil => self.state().contended(key, latency),
            _ => {}
        }
    }

    fn on_script(&self, kind: ScriptKind, args: &[&[u8]], reply: ReplyKind<'_>, latency: Duration) {
        // EVAL body|sha numkeys key... arg...
        let Some(numkeys) = args.get(1).and_then(|n| resp::parse_int(n)) else {
            return;
        };
        let numkeys = numkeys.max(0) as usize;
        let Some(keys) = args.get(2..2 + numkeys) else {
            return;
        };
        let argv = &args[2 + numkeys..];
        let arg = |i: usize| argv.get(i).copied();
        let ms = |i: usize| {
            arg(i)
                .and_then(resp::parse_int)
                .map(|v| Duration::from_millis(v.max(0) as u64))
        };
        let mut st = self.state();
        match (kind, reply) {
            (_, ReplyKind::Error(_)) | (_, ReplyKind::Status(b"QUEUED")) => {}
            (ScriptKind::SetNx, r) => {
                let (Some(key), Some(token)) = (keys.first(), arg(0)) else {
                    return;
                };
                match r {
                    ReplyKind::Int(0) | ReplyKind::Nil => st.contended(key, latency),
                    ReplyKind::Int(_) | ReplyKind::Status(_) | ReplyKind::Bulk(_) => {
                        st.acquired(key, token, ms(1), latency)
                    }
                    _ => {}
                }
            }
            (ScriptKind::MultiAcquire, ReplyKind::Int(n)) => {
                let Some(token) = arg(0) else { return };
                for key in keys {
                    if n > 0 {
                        st.acquired(key, token, ms(1), latency);
                    } else {
                        st.contended(key, latency);
                    }
                }
            }
            (ScriptKind::HashAcquire, r) => {
                let (Some(key), Some(holder)) = (keys.first(), arg(1)) else {
                    return;
                };
                match r {
                    // Re-entry by the same holder keeps the first acquire's start.
                    ReplyKind::Nil => {
                        let again = st
                            .held
                            .get(*key)
                            .is_some_and(|h| h.token.as_slice() == holder);
                        if !again {
                            st.acquired(key, holder, ms(0), latency);
                        }
                    }
                    ReplyKind::Int(_) => st.contended(key, latency),
                    _ => {}
                }
            }
            (ScriptKind::HashRelease, r) => {
                let (Some(key), Some(holder)) = (keys.first(), arg(2)) else {
                    return;
                };
                match r {
                    ReplyKind::Int(1) => st.released(key, Some(holder), true, latency),
                    ReplyKind::Nil => st.released(key, Some(holder), false, latency),
                    _ => {}
                }
            }
            (ScriptKind::FairRelease, ReplyKind::Int(n)) => {
                if let Some(key) = keys.first() {
                    st.released(key, arg(0), n == 1, latency);
                }
            }
            (ScriptKind::FairLeave, ReplyKind::Int(2)) => {
                if let Some(key) = keys.first() {
                    st.released(key, arg(0), true, latency);
                }
            }
            (ScriptKind::CompareDelete, ReplyKind::Int(n)) => {
                let token = arg(0);
                if keys.len() == 1 {
                    st.released(keys[0], token, n == 1, latency);
                    return;
                }
                // Several keys, one count: the ones it held are released first.
                let mut left = n.max(0) as usize;
                for key in keys {
                    let found = left > 0;
                    left = left.saturating_sub(1);
                    st.released(key, token, found, latency);
                }
            }
            _ => {}
        }
    }

    /// lockkit's fair acquire (`EVAL body|sha 3 key queue leases ticket ttl lease [channel]`):
    /// its reply `*2 :place :ttl` is taken (place 0) or queued (contended).
    fn on_fair_acquire(&self, args: &[&[u8]], frame: &[u8], latency: Duration) {
        let (Some(&b"3"), Some(key), Some(ticket)) = (args.get(1), args.get(2), args.get(5)) else {
            return;
        };
        let Some(place) = frame
            .strip_prefix(b"*2\r\n:")
            .and_then(|rest| rest.split(|&b| b == b'\r').next())
            .and_then(resp::parse_int)
        else {
            return;
        };
        let ttl = args
            .get(6)
            .and_then(|v| resp::parse_int(v))
            .map(|ms| Duration::from_millis(ms.max(0) as u64));
        let mut st = self.state();
        match place {
            0 => {
                // An attempt sent again under the ticket that holds the lock keeps the first
                // acquire's start.
                let again = st
                    .held
                    .get(*key)
                    .is_some_and(|h| h.token.as_slice() == *ticket);
                if !again {
                    st.acquired(key, ticket, ttl, latency);
                }
            }
            n if n > 0 => st.contended(key, latency),
            _ => {}
        }
    }

    fn on_del(&self, keys: &[&[u8]], reply: ReplyKind<'_>, latency: Duration) {
        let ReplyKind::Int(n) = reply else { return };
        let mut st = self.state();
        let held: Vec<&[u8]> = keys
            .iter()
            .copied()
            .filter(|k| st.held.contains_key(*k))
            .collect();
        // DEL of keys it never saw acquired is not lock traffic.
        let mut left = (n.max(0) as usize).saturating_sub(keys.len() - held.len());
        for key in held {
            let found = left > 0;
            left = left.saturating_sub(1);
            st.released(key, None, found, latency);
        }
    }
}

/// The SHA-1 a server gives `body` (lower-case hex).
fn resp_sha(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

impl Plugin for Observe {
    fn name(&self) -> &str {
        "observe"
    }

    fn commands(&self) -> Vec<String> {
        if self.top.is_some() {
            return vec!["*".to_string()];
        }
        ["SET", "DEL", "UNLINK", "EVAL", "EVALSHA", "SCRIPT"]
            .map(String::from)
            .to_vec()
    }

    fn on_command(&self, _conn: &ConnInfo, cmd: &PluginCommand<'_>) -> Action {
        if let Some(key) = top::key_of(cmd) {
            self.with_top(|t| t.command(key, Instant::now()));
        }
        match cmd.name {
            "EVAL" => {
                if let Some(body) = cmd.args.first() {
                    let sha = resp_sha(body);
                    if !self.state().scripts.contains_key(&sha) {
                        self.learn(body);
                    }
                }
            }
            "SCRIPT" => {
                if let [sub, body, ..] = cmd.args {
                    if sub.eq_ignore_ascii_case(b"LOAD") {
                        self.learn(body);
                    }
                }
            }
            _ => {}
        }
        Action::Pass
    }

    /// A `SET` is a lock's acquire only with `NX`: plain `SET`s (most of an application's
    /// writes) are forwarded without waiting for their reply.
    fn wants_reply(&self, cmd: &PluginCommand<'_>) -> bool {
        if self.top.is_some() && top::key_of(cmd).is_some() {
            return true;
        }
        match cmd.name {
            "SET" => cmd
                .args
                .get(2..)
                .is_some_and(|opts| opts.iter().any(|o| o.eq_ignore_ascii_case(b"NX"))),
            _ => true,
        }
    }

    fn on_reply(&self, _conn: &ConnInfo, cmd: &PluginCommand<'_>, reply: &[u8], latency: Duration) {
        if let Some(key) = top::key_of(cmd) {
            let bytes = reply.len() as u64;
            self.with_top(|t| t.reply(key, cmd.name, bytes, Instant::now()));
        }
        let raw = reply;
        let reply = resp::reply_kind(reply);
        match cmd.name {
            "SET" => self.on_set(cmd.args, reply, latency),
            "DEL" | "UNLINK" => self.on_del(cmd.args, reply, latency),
            "EVAL" | "EVALSHA" => match self.script_of(cmd) {
                Some(ScriptKind::FairAcquire) => self.on_fair_acquire(cmd.args, raw, latency),
                Some(ScriptKind::Other) | None => {}
                Some(kind) => self.on_script(kind, cmd.args, reply, latency),
            },
            _ => {}
        }
    }

    fn on_tick(&self) {
        self.state().forget_expired(Instant::now());
        self.with_top(|t| {
            t.roll(Instant::now());
            crate::metrics::top_window(&t.current());
        });
        if self.options.live || crate::metrics::on() {
            let patterns = self.patterns();
            for p in &patterns {
                let ttl = p.recommended_ttl_ms.map(Duration::from_millis);
                crate::metrics::lock_pattern(&p.pattern, p.acquired, p.contended, ttl);
            }
            if self.options.live {
                table::draw(&patterns, self.started.elapsed());
            }
        }
    }

    fn report(&self, ctx: &ReportCtx) -> Option<serde_json::Value> {
        let report = ObserveReport {
            schema: SCHEMA.to_string(),
            target: ctx.target.clone(),
            duration_s: (ctx.duration.as_secs_f64() * 1000.0).round() / 1000.0,
            commands: ctx.commands.clone(),
            locks: self.patterns(),
        };
        let mut value = serde_json::to_value(report).ok()?;
        // Only added to lockkit.observe/1, and only with top=N.
        if let (Some(windows), Some(obj)) = (self.top_windows(), value.as_object_mut()) {
            obj.insert("top".into(), serde_json::to_value(windows).ok()?);
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd<'a>(name: &'a str, args: &'a [&'a [u8]]) -> PluginCommand<'a> {
        PluginCommand {
            name,
            args,
            key: args.first().copied(),
            index: 1,
            arrived: Instant::now(),
        }
    }

    #[test]
    fn only_set_nx_among_sets_waits_for_its_reply() {
        let o = Observe::new(ObserveOptions::default());
        assert!(!o.wants_reply(&cmd("SET", &[b"k", b"v"])));
        assert!(!o.wants_reply(&cmd("SET", &[b"k", b"v", b"PX", b"100"])));
        // The value NX is not the option NX.
        assert!(!o.wants_reply(&cmd("SET", &[b"k", b"NX"])));
        assert!(o.wants_reply(&cmd("SET", &[b"k", b"t", b"NX", b"PX", b"100"])));
        assert!(o.wants_reply(&cmd("SET", &[b"k", b"t", b"px", b"100", b"nx"])));
        assert!(o.wants_reply(&cmd("DEL", &[b"k"])));
        assert!(o.wants_reply(&cmd("EVALSHA", &[b"abc", b"1", b"k"])));
    }

    const CONN: ConnInfo = ConnInfo { id: 1, peer: None };

    #[test]
    fn set_nx_then_compare_delete_counts_one_hold() {
        let o = Observe::new(ObserveOptions::default());
        let set: [&[u8]; 5] = [b"order:42:lock", b"tok", b"NX", b"PX", b"5000"];
        o.on_reply(
            &CONN,
            &cmd("SET", &set),
            b"+OK\r\n",
            Duration::from_micros(100),
        );
        o.on_reply(
            &CONN,
            &cmd("SET", &set),
            b"$-1\r\n",
            Duration::from_micros(100),
        );
        let body = b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
        let eval: [&[u8]; 4] = [body, b"1", b"order:42:lock", b"tok"];
        assert_eq!(o.on_command(&CONN, &cmd("EVAL", &eval)), Action::Pass);
        o.on_reply(
            &CONN,
            &cmd("EVAL", &eval),
            b":1\r\n",
            Duration::from_micros(100),
        );
        o.on_reply(
            &CONN,
            &cmd("EVAL", &eval),
            b":0\r\n",
            Duration::from_micros(100),
        );
        let p = o.patterns();
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(p.pattern, "order:{id}:lock");
        assert_eq!(
            (p.acquired, p.contended, p.released, p.released_not_held),
            (1, 1, 1, 1)
        );
        assert_eq!(p.hold_us.count, 1);
        assert_eq!((p.ttl_ms.min, p.ttl_ms.max), (Some(5000), Some(5000)));
        assert!(p.recommended_ttl_ms.is_some());
    }

    #[test]
    fn fair_acquire_release_and_leave_count_on_the_lock_key_only() {
        let o = Observe::new(ObserveOptions::default());
        let lua = |name: &str| {
            std::fs::read(format!("{}/../lua/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        let (acquire, release, leave) = (
            lua("acquire_fair.lua"),
            lua("release_fair.lua"),
            lua("leave_fair.lua"),
        );
        let keys: [&[u8]; 4] = [b"3", b"job:7", b"{job:7}:q", b"{job:7}:l"];
        let call = |body: &[u8], args: &[&[u8]], reply: &[u8]| {
            let mut all: Vec<&[u8]> = vec![body];
            all.extend_from_slice(&keys);
            all.extend_from_slice(args);
            o.on_command(&CONN, &cmd("EVAL", &all));
            o.on_reply(&CONN, &cmd("EVAL", &all), reply, Duration::from_micros(50));
        };
        // a takes it, b queues (contended) and leaves; a's attempt sent again is not a second
        // acquire; a releases.
        call(
            &acquire,
            &[b"a", b"3000", b"5000"],
            b"*2\r\n:0\r\n:3000\r\n",
        );
        call(
            &acquire,
            &[b"b", b"3000", b"5000"],
            b"*2\r\n:1\r\n:2999\r\n",
        );
        call(&leave, &[b"b"], b":1\r\n");
        call(
            &acquire,
            &[b"a", b"3000", b"5000"],
            b"*2\r\n:0\r\n:2998\r\n",
        );
        call(&release, &[b"a"], b":1\r\n");
        // c's attempt took the lock unheard; leaving released it.
        call(
            &acquire,
            &[b"c", b"3000", b"5000"],
            b"*2\r\n:0\r\n:3000\r\n",
        );
        call(&leave, &[b"c"], b":2\r\n");
        let p = o.patterns();
        assert_eq!(p.len(), 1, "{p:#?}");
        let p = &p[0];
        assert_eq!(p.pattern, "job:{id}");
        assert_eq!(
            (p.acquired, p.contended, p.released, p.released_not_held),
            (2, 1, 2, 0)
        );
        assert_eq!((p.ttl_ms.min, p.ttl_ms.max), (Some(3000), Some(3000)));
    }

    #[test]
    fn an_unknown_evalsha_passes_to_the_server() {
        let o = Observe::new(ObserveOptions::default());
        let args: [&[u8]; 2] = [b"ABCDEF0123456789abcdef0123456789abcdef01", b"0"];
        assert_eq!(o.on_command(&CONN, &cmd("EVALSHA", &args)), Action::Pass);
    }

    #[test]
    fn del_of_a_key_never_acquired_is_not_lock_traffic() {
        let o = Observe::new(ObserveOptions::default());
        let args: [&[u8]; 1] = [b"cache:1"];
        o.on_reply(
            &CONN,
            &cmd("DEL", &args),
            b":1\r\n",
            Duration::from_micros(5),
        );
        assert!(o.patterns().is_empty());
    }
}

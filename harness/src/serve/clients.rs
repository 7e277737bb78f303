//! The connections of one port as CLIENT LIST and CLIENT INFO show them, in Redis 7.0's
//! format: each connection puts its own view here after every command it runs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

use super::pubsub::Outbox;
use crate::number::parse_i64;
use crate::reply::Reply;

/// What CLIENT LIST shows of one connection.
#[derive(Debug, Clone)]
pub(super) struct ClientView {
    pub(super) peer: SocketAddr,
    pub(super) local: Option<SocketAddr>,
    pub(super) created: Instant,
    /// When its last command came.
    pub(super) last: Instant,
    pub(super) name: Option<Vec<u8>>,
    /// Its last command's full name (`client|list`); `None` before the first.
    pub(super) cmd: Option<String>,
    /// Channels and patterns it is subscribed to.
    pub(super) subs: (usize, usize),
    /// Commands queued since MULTI; `None` outside a transaction.
    pub(super) multi: Option<usize>,
    /// Waiting in a blocking command.
    pub(super) blocked: bool,
    pub(super) resp3: bool,
    /// The user it is logged in as.
    pub(super) user: Vec<u8>,
}

impl ClientView {
    fn pubsub(&self) -> bool {
        self.subs.0 + self.subs.1 > 0
    }

    /// Its line of CLIENT LIST (CLIENT INFO's reply), newline included, as Redis 7.0's
    /// `catClientInfoString` writes it; what the harness does not track (buffers, memory) is 0.
    pub(super) fn line(&self, id: u64) -> String {
        let mut flags = String::new();
        if self.pubsub() {
            flags.push('P');
        }
        if self.multi.is_some() {
            flags.push('x');
        }
        if self.blocked {
            flags.push('b');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let name = self.name.as_deref().map(String::from_utf8_lossy);
        let laddr = self.local.map(|a| a.to_string()).unwrap_or_default();
        format!(
            "id={id} addr={} laddr={laddr} fd=8 name={} age={} idle={} flags={flags} db=0 sub={} psub={} ssub=0 multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={}\n",
            self.peer,
            name.unwrap_or_default(),
            self.created.elapsed().as_secs(),
            self.last.elapsed().as_secs(),
            self.subs.0,
            self.subs.1,
            self.multi.map_or(-1, |n| n as i64),
            self.cmd.as_deref().unwrap_or("NULL"),
            String::from_utf8_lossy(&self.user),
            if self.resp3 { 3 } else { 2 },
        )
    }
}

/// The connections of one port, by id (the order CLIENT LIST lists them in).
#[derive(Debug, Default)]
pub(super) struct Clients {
    views: BTreeMap<u64, ClientView>,
    /// Each connection's outbox, which CLIENT KILL closes.
    outboxes: BTreeMap<u64, Outbox>,
}

/// What CLIENT KILL's filters select.
#[derive(Default)]
struct Filter {
    id: Option<u64>,
    /// `Some(pubsub)`; `Some(None)`: a type no connection of the harness has.
    pubsub: Option<Option<bool>>,
    addr: Option<Vec<u8>>,
    laddr: Option<Vec<u8>>,
    user: Option<Vec<u8>>,
    skipme: bool,
}

impl Clients {
    /// Connection `id` came: `out` closes it.
    pub(super) fn join(&mut self, id: u64, out: Outbox) {
        self.outboxes.insert(id, out);
    }

    /// Puts (or replaces) connection `id`'s view.
    pub(super) fn show(&mut self, id: u64, view: ClientView) {
        self.views.insert(id, view);
    }

    /// The connection closed.
    pub(super) fn gone(&mut self, id: u64) {
        self.views.remove(&id);
        self.outboxes.remove(&id);
    }

    /// `CLIENT KILL addr:port` (`+OK`) or `CLIENT KILL <filter value> ...` (how many) as Redis
    /// 7.0 answers them, `me` asking (`user_exists`: whether an ACL user has that name): the
    /// others chosen are closed at once; the reply, and whether `me` is to be closed after it.
    pub(super) fn kill(
        &self,
        argv: &[Vec<u8>],
        me: u64,
        user_exists: &dyn Fn(&[u8]) -> bool,
    ) -> (Reply, bool) {
        let err = |m: String| (Reply::Error(m), false);
        if let [_, _, addr] = argv {
            let found = (self.views.iter()).find(|(_, v)| v.peer.to_string().as_bytes() == addr);
            return match found {
                Some((&id, _)) => (Reply::ok(), self.close(id, me)),
                None => err("ERR No such client".into()),
            };
        }
        let mut f = Filter {
            skipme: true,
            ..Filter::default()
        };
        for pair in argv[2..].chunks(2) {
            let [opt, value] = pair else {
                return err("ERR syntax error".into());
            };
            match opt.to_ascii_lowercase().as_slice() {
                b"id" => match parse_i64(value).filter(|v| *v > 0) {
                    Some(v) => f.id = Some(v as u64),
                    None => return err("ERR client-id should be greater than 0".into()),
                },
                b"type" => match client_type(value) {
                    Ok(t) => f.pubsub = Some(t),
                    Err(e) => return (e, false),
                },
                b"addr" => f.addr = Some(value.clone()),
                b"laddr" => f.laddr = Some(value.clone()),
                b"skipme" if value.eq_ignore_ascii_case(b"yes") => f.skipme = true,
                b"skipme" if value.eq_ignore_ascii_case(b"no") => f.skipme = false,
                b"user" if user_exists(value) => f.user = Some(value.clone()),
                b"user" => {
                    return err(format!(
                        "ERR No such user '{}'",
                        String::from_utf8_lossy(value)
                    ))
                }
                _ => return err("ERR syntax error".into()),
            }
        }
        let chosen: Vec<u64> = (self.views.iter())
            .filter(|(&id, v)| {
                f.id.is_none_or(|want| want == id)
                    && f.pubsub.is_none_or(|t| t == Some(v.pubsub()))
                    && (f.addr.as_ref()).is_none_or(|a| v.peer.to_string().as_bytes() == a)
                    && (f.laddr.as_ref())
                        .is_none_or(|a| v.local.is_some_and(|l| l.to_string().as_bytes() == a))
                    && (f.user.as_ref()).is_none_or(|u| *u == v.user)
                    && !(f.skipme && id == me)
            })
            .map(|(&id, _)| id)
            .collect();
        let mut closes_me = false;
        for &id in &chosen {
            closes_me |= self.close(id, me);
        }
        (Reply::Int(chosen.len() as i64), closes_me)
    }

    /// Closes connection `id` unless it is `me` (closed after its reply): whether it is.
    fn close(&self, id: u64, me: u64) -> bool {
        if id == me {
            return true;
        }
        if let Some(out) = self.outboxes.get(&id) {
            out.close();
        }
        false
    }

    /// `CLIENT LIST [TYPE normal|master|replica|pubsub] | [ID id ...]` (`argv` whole).
    pub(super) fn list(&self, argv: &[Vec<u8>]) -> Reply {
        let text: String = match argv {
            [_, _] => self.views.iter().map(|(id, v)| v.line(*id)).collect(),
            [_, _, opt, kind] if opt.eq_ignore_ascii_case(b"type") => {
                let pubsub = match client_type(kind) {
                    Ok(t) => t,
                    Err(e) => return e,
                };
                self.views
                    .iter()
                    .filter(|(_, v)| pubsub == Some(v.pubsub()))
                    .map(|(id, v)| v.line(*id))
                    .collect()
            }
            [_, _, opt, ids @ ..] if opt.eq_ignore_ascii_case(b"id") && !ids.is_empty() => {
                let mut text = String::new();
                for raw in ids {
                    let Some(id) = parse_i64(raw) else {
                        return Reply::Error("ERR Invalid client ID".into());
                    };
                    if let Some(v) = u64::try_from(id).ok().and_then(|id| self.views.get(&id)) {
                        text.push_str(&v.line(id as u64));
                    }
                }
                text
            }
            _ => return Reply::Error("ERR syntax error".into()),
        };
        Reply::Verbatim("txt".into(), text.into_bytes())
    }
}

/// A client type as Redis names it: `Some(pubsub)` for `normal` and `pubsub`, `None` for
/// `master` and `replica` (`slave`), which never connect to the harness.
fn client_type(name: &[u8]) -> Result<Option<bool>, Reply> {
    match name.to_ascii_lowercase().as_slice() {
        b"normal" => Ok(Some(false)),
        b"pubsub" => Ok(Some(true)),
        b"master" | b"replica" | b"slave" => Ok(None),
        _ => Err(Reply::Error(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(name)
        ))),
    }
}

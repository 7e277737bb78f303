//! The connections of one port as CLIENT LIST and CLIENT INFO show them, in Redis 7.0's
//! format: each connection puts its own view here after every command it runs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

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
            "id={id} addr={} laddr={laddr} fd=8 name={} age={} idle={} flags={flags} db=0 sub={} psub={} ssub=0 multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={}\n",
            self.peer,
            name.unwrap_or_default(),
            self.created.elapsed().as_secs(),
            self.last.elapsed().as_secs(),
            self.subs.0,
            self.subs.1,
            self.multi.map_or(-1, |n| n as i64),
            self.cmd.as_deref().unwrap_or("NULL"),
            if self.resp3 { 3 } else { 2 },
        )
    }
}

/// The connections of one port, by id (the order CLIENT LIST lists them in).
#[derive(Debug, Default)]
pub(super) struct Clients {
    views: BTreeMap<u64, ClientView>,
}

impl Clients {
    /// Puts (or replaces) connection `id`'s view.
    pub(super) fn show(&mut self, id: u64, view: ClientView) {
        self.views.insert(id, view);
    }

    /// The connection closed.
    pub(super) fn gone(&mut self, id: u64) {
        self.views.remove(&id);
    }

    /// `CLIENT LIST [TYPE normal|master|replica|pubsub] | [ID id ...]` (`argv` whole).
    pub(super) fn list(&self, argv: &[Vec<u8>]) -> Reply {
        let text: String = match argv {
            [_, _] => self.views.iter().map(|(id, v)| v.line(*id)).collect(),
            [_, _, opt, kind] if opt.eq_ignore_ascii_case(b"type") => {
                let pubsub = match kind.to_ascii_lowercase().as_slice() {
                    b"normal" => Some(false),
                    b"pubsub" => Some(true),
                    // No replica nor master connects to the harness.
                    b"master" | b"replica" | b"slave" => None,
                    _ => {
                        return Reply::Error(format!(
                            "ERR Unknown client type '{}'",
                            String::from_utf8_lossy(kind)
                        ))
                    }
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

//! The cluster face (`lockkit lua serve --cluster N`): N masters on N loopback ports over the
//! one shared engine. Each port owns an equal range of the 16,384 hash slots (as
//! `redis-cli --cluster create` splits them), answers the CLUSTER commands cluster clients
//! read the topology with (in Redis 7.0.15's formats), and refuses what a real cluster
//! refuses: `-MOVED` for a key whose slot another port owns, `-CROSSSLOT` for a command (or a
//! script's declared KEYS, or a transaction) over several slots.
//!
//! The keyspace stays one: keyless commands (`DBSIZE`, `KEYS`, `SCAN`, `FLUSHALL`, `SCRIPT
//! LOAD`, `FUNCTION LOAD`) see or change every key from any port.

use std::sync::Arc;

use lockkit_resp::slot::key_slot;

use crate::reply::Reply;

/// Redis Cluster's hash slots.
const SLOTS: u32 = lockkit_resp::slot::SLOTS as u32;

/// One master of the face.
#[derive(Debug)]
pub(super) struct Member {
    port: u16,
    id: String,
    /// Its slots, first and last.
    slots: (u16, u16),
}

/// The masters on `ports`, each with an equal range of the slots in port order.
pub(super) fn members(ports: &[u16]) -> Arc<Vec<Member>> {
    let n = ports.len().max(1) as f64;
    let mut first = 0u32;
    let members = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            // redis-cli's split: the last slot of master i rounds (i + 1) * 16384 / n - 1.
            let last = if i + 1 == ports.len() {
                SLOTS - 1
            } else {
                ((i as f64 + 1.0) * f64::from(SLOTS) / n - 1.0).round() as u32
            };
            let m = Member {
                port,
                id: crate::sha1hex(format!("lockkit lua serve cluster node {port}").as_bytes()),
                slots: (first as u16, last as u16),
            };
            first = last + 1;
            m
        })
        .collect();
    Arc::new(members)
}

/// One port of the face: every master, and which one it is.
#[derive(Debug, Clone)]
pub(super) struct ClusterPort {
    members: Arc<Vec<Member>>,
    me: usize,
}

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// Every CLUSTER subcommand of Redis 7.0, and its arity (negative: at least).
const SUBCOMMANDS: [(&str, i64); 27] = [
    ("addslots", -3),
    ("addslotsrange", -4),
    ("bumpepoch", 2),
    ("count-failure-reports", 3),
    ("countkeysinslot", 3),
    ("delslots", -3),
    ("delslotsrange", -4),
    ("failover", -2),
    ("flushslots", 2),
    ("forget", 3),
    ("getkeysinslot", 4),
    ("help", 2),
    ("info", 2),
    ("keyslot", 3),
    ("links", 2),
    ("meet", -4),
    ("myid", 2),
    ("nodes", 2),
    ("replicas", 3),
    ("replicate", 3),
    ("reset", -2),
    ("saveconfig", 2),
    ("set-config-epoch", 3),
    ("setslot", -4),
    ("shards", 2),
    ("slaves", 3),
    ("slots", 2),
];

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

impl ClusterPort {
    pub(super) fn new(members: Arc<Vec<Member>>, me: usize) -> ClusterPort {
        ClusterPort { members, me }
    }

    fn owner(&self, slot: u16) -> &Member {
        self.members
            .iter()
            .find(|m| (m.slots.0..=m.slots.1).contains(&slot))
            .unwrap_or(&self.members[self.me])
    }

    /// Whether this port owns the slot of `key` (or of a shard channel).
    pub(super) fn owns(&self, key: &[u8]) -> bool {
        self.owner(key_slot(key)).port == self.members[self.me].port
    }

    /// Whether this port serves `commands` (one command, or a transaction's at EXEC): the
    /// `-CROSSSLOT` or `-MOVED` error a real cluster node answers otherwise. Keys are found as
    /// COMMAND GETKEYS finds them (a script's are its declared KEYS).
    fn route<'a>(&self, commands: impl IntoIterator<Item = &'a [Vec<u8>]>) -> Result<(), Reply> {
        let mut slot = None;
        for argv in commands {
            for key in crate::commands::command_keys(argv) {
                let s = key_slot(&key);
                match slot {
                    None => slot = Some(s),
                    Some(first) if first != s => return Err(Reply::err(CROSSSLOT)),
                    Some(_) => {}
                }
            }
        }
        match slot {
            Some(s) if self.owner(s).port != self.members[self.me].port => Err(Reply::err(
                format!("MOVED {s} 127.0.0.1:{}", self.owner(s).port),
            )),
            _ => Ok(()),
        }
    }

    /// Whether this port serves `argv` of a connection with transaction `multi` (its queued
    /// commands, whether one was refused): else the error, the transaction flagged (a
    /// command being queued) or discarded (EXEC, checked over every queued command).
    pub(super) fn redirect(
        &self,
        multi: &mut Option<(Vec<Vec<Vec<u8>>>, bool)>,
        top: &str,
        argv: &[Vec<u8>],
    ) -> Result<(), Reply> {
        let routed = match (multi.as_ref(), top) {
            (Some((queued, _)), "exec") => self.route(queued.iter().map(Vec::as_slice)),
            _ => self.route([argv]),
        };
        if routed.is_err() {
            match multi.as_mut() {
                Some(_) if top == "exec" => *multi = None,
                Some((_, refused)) => *refused = true,
                None => {}
            }
        }
        routed
    }

    /// `CLUSTER ...`, `ASKING`, `READONLY`, `READWRITE`.
    pub(super) fn command(&self, argv: &[Vec<u8>]) -> Reply {
        let top = lower(&argv[0]);
        if top != "cluster" {
            return if argv.len() == 1 {
                Reply::ok()
            } else {
                Reply::err(format!("ERR wrong number of arguments for '{top}' command"))
            };
        }
        let Some(sub) = argv.get(1) else {
            return Reply::err("ERR wrong number of arguments for 'cluster' command");
        };
        let name = lower(sub);
        let Some(&(_, arity)) = SUBCOMMANDS.iter().find(|(s, _)| *s == name) else {
            return Reply::err(format!(
                "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(sub)
            ));
        };
        let n = argv.len() as i64;
        if (arity >= 0 && n != arity) || (arity < 0 && n < -arity) {
            return Reply::err(format!(
                "ERR wrong number of arguments for 'cluster|{name}' command"
            ));
        }
        let me = &self.members[self.me];
        match name.as_str() {
            "slots" => self.slots(),
            "shards" => self.shards(),
            "nodes" => Reply::Verbatim("txt".into(), self.nodes().into_bytes()),
            "info" => Reply::Verbatim("txt".into(), self.info().into_bytes()),
            "myid" => Reply::bulk(&me.id),
            "keyslot" => Reply::Int(i64::from(key_slot(&argv[2]))),
            "replicas" | "slaves" => {
                if self.members.iter().any(|m| m.id.as_bytes() == argv[2]) {
                    Reply::Array(Vec::new())
                } else {
                    Reply::err(format!("ERR Unknown node {}", String::from_utf8_lossy(&argv[2])))
                }
            }
            _ => Reply::err(format!(
                "ERR harness: CLUSTER {} is not emulated (lockkit lua serve --cluster answers SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT and REPLICAS; its topology is fixed)",
                name.to_ascii_uppercase()
            )),
        }
    }

    /// `CLUSTER SLOTS`: per master, its range and `[ip, port, id, {}]`.
    fn slots(&self) -> Reply {
        Reply::Array(
            self.members
                .iter()
                .map(|m| {
                    Reply::Array(vec![
                        Reply::Int(i64::from(m.slots.0)),
                        Reply::Int(i64::from(m.slots.1)),
                        Reply::Array(vec![
                            Reply::bulk("127.0.0.1"),
                            Reply::Int(i64::from(m.port)),
                            Reply::bulk(&m.id),
                            Reply::Map(Vec::new()),
                        ]),
                    ])
                })
                .collect(),
        )
    }

    /// `CLUSTER SHARDS`: per master, `slots` (first, last) and its one node.
    fn shards(&self) -> Reply {
        let field = |k: &str, v: Reply| (Reply::bulk(k), v);
        Reply::Array(
            self.members
                .iter()
                .map(|m| {
                    let node = Reply::Map(vec![
                        field("id", Reply::bulk(&m.id)),
                        field("port", Reply::Int(i64::from(m.port))),
                        field("ip", Reply::bulk("127.0.0.1")),
                        field("endpoint", Reply::bulk("127.0.0.1")),
                        field("role", Reply::bulk("master")),
                        field("replication-offset", Reply::Int(0)),
                        field("health", Reply::bulk("online")),
                    ]);
                    Reply::Map(vec![
                        field(
                            "slots",
                            Reply::Array(vec![
                                Reply::Int(i64::from(m.slots.0)),
                                Reply::Int(i64::from(m.slots.1)),
                            ]),
                        ),
                        field("nodes", Reply::Array(vec![node])),
                    ])
                })
                .collect(),
        )
    }

    /// `CLUSTER NODES`: one line per master, `\n`-terminated.
    fn nodes(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let flags = if i == self.me {
                "myself,master"
            } else {
                "master"
            };
            let bus = u32::from(m.port) + 10000;
            out.push_str(&format!(
                "{} 127.0.0.1:{}@{bus} {flags} - 0 0 {} connected {}-{}\n",
                m.id,
                m.port,
                i + 1,
                m.slots.0,
                m.slots.1
            ));
        }
        out
    }

    /// `CLUSTER INFO`: a healthy cluster of these masters, every slot served.
    fn info(&self) -> String {
        let n = self.members.len();
        format!(
            "cluster_state:ok\r\ncluster_slots_assigned:{SLOTS}\r\ncluster_slots_ok:{SLOTS}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\ncluster_size:{n}\r\ncluster_current_epoch:{n}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
            self.me + 1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_masters_split_as_redis_cli_does() {
        let m = members(&[1, 2, 3]);
        let ranges: Vec<_> = m.iter().map(|m| m.slots).collect();
        assert_eq!(ranges, [(0, 5460), (5461, 10922), (10923, 16383)]);
        assert_eq!(members(&[9])[0].slots, (0, 16383));
    }
}

//! ACL users as far as `lockkit lua serve` emulates them: `ACL SETUSER` / `DELUSER` / `USERS`
//! and `AUTH user password`. Users are created, switched on and off, and given passwords; their
//! command, key and channel rules are checked for syntax and kept, but not enforced (every user
//! may run every command, and `redis.acl_check_cmd` answers for the default user).

use std::collections::BTreeMap;

use crate::commands::is_redis_command;
use crate::reply::Reply;

/// One user.
#[derive(Debug, Default, Clone)]
struct User {
    on: bool,
    nopass: bool,
    /// SHA-256 would be Redis's; the harness keeps the passwords (loopback, test data).
    passwords: Vec<Vec<u8>>,
    /// The command, key and channel rules, as given (not enforced).
    rules: Vec<Vec<u8>>,
}

/// The users other than `default` (whose password is the server's `requirepass`).
#[derive(Debug, Default)]
pub(super) struct Users {
    users: BTreeMap<Vec<u8>, User>,
}

/// Redis 7.0's ACL categories.
const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

fn modifier_error(rule: &[u8], why: &str) -> Reply {
    Reply::err(format!(
        "ERR Error in ACL SETUSER modifier '{}': {why}",
        String::from_utf8_lossy(rule)
    ))
}

/// Whether `rule` is a command, key or channel rule Redis accepts (kept, not enforced).
fn check_rule(rule: &[u8]) -> Result<(), Reply> {
    let text = String::from_utf8_lossy(rule).to_ascii_lowercase();
    let plain = [
        "allkeys",
        "resetkeys",
        "allchannels",
        "resetchannels",
        "allcommands",
        "nocommands",
    ];
    if plain.contains(&text.as_str())
        || text.starts_with('~')
        || text.starts_with('%')
        || text.starts_with('&')
    {
        return Ok(());
    }
    let Some(body) = text.strip_prefix('+').or_else(|| text.strip_prefix('-')) else {
        return Err(modifier_error(rule, "Syntax error"));
    };
    let known = match body.strip_prefix('@') {
        Some("all") => true,
        Some(cat) => CATEGORIES.contains(&cat),
        None => is_redis_command(body.split('|').next().unwrap_or_default()),
    };
    if known {
        Ok(())
    } else {
        Err(modifier_error(
            rule,
            "Unknown command or category name in ACL",
        ))
    }
}

impl Users {
    /// `ACL SETUSER name rule...`: every rule is checked before any is applied.
    pub(super) fn setuser(&mut self, name: &[u8], rules: &[Vec<u8>]) -> Reply {
        let mut user = self.users.get(name).cloned().unwrap_or_default();
        for rule in rules {
            match rule.to_ascii_lowercase().as_slice() {
                b"on" => user.on = true,
                b"off" => user.on = false,
                b"nopass" => {
                    user.nopass = true;
                    user.passwords.clear();
                }
                b"resetpass" => {
                    user.nopass = false;
                    user.passwords.clear();
                }
                b"reset" => user = User::default(),
                _ if rule.first() == Some(&b'>') => {
                    user.nopass = false;
                    user.passwords.push(rule[1..].to_vec());
                }
                _ if rule.first() == Some(&b'<') => user.passwords.retain(|p| *p != rule[1..]),
                _ => {
                    if let Err(e) = check_rule(rule) {
                        return e;
                    }
                    user.rules.push(rule.clone());
                }
            }
        }
        self.users.insert(name.to_vec(), user);
        Reply::ok()
    }

    /// `ACL DELUSER name...`: how many were removed.
    pub(super) fn deluser(&mut self, names: &[Vec<u8>]) -> Reply {
        if names.iter().any(|n| n.as_slice() == b"default") {
            return Reply::err("ERR The 'default' user cannot be removed");
        }
        Reply::Int(
            names
                .iter()
                .filter(|n| self.users.remove(n.as_slice()).is_some())
                .count() as i64,
        )
    }

    /// `ACL USERS`: every user's name, sorted, `default` included.
    pub(super) fn names(&self) -> Reply {
        let mut names: Vec<&[u8]> = self.users.keys().map(Vec::as_slice).collect();
        names.push(b"default");
        names.sort_unstable();
        Reply::Array(names.into_iter().map(Reply::bulk).collect())
    }

    /// Whether user `name` exists (`default` always does).
    pub(super) fn exists(&self, name: &[u8]) -> bool {
        name == b"default" || self.users.contains_key(name)
    }

    /// Whether `name` (not `default`) may log in with `pass`.
    pub(super) fn check(&self, name: &[u8], pass: &[u8]) -> bool {
        self.users
            .get(name)
            .is_some_and(|u| u.on && (u.nopass || u.passwords.iter().any(|p| p == pass)))
    }
}

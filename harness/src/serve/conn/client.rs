//! The CLIENT subcommands one connection answers itself, CLIENT REPLY's dropping of replies,
//! and what CLIENT LIST shows of it.

use super::super::clients::ClientView;
use super::{err, lossy, ServeConn};
use crate::commands::is;
use crate::reply::Reply;

impl ServeConn {
    /// The CLIENT subcommands of one connection; `None`: the harness answers.
    pub(super) fn client(&mut self, argv: &[Vec<u8>]) -> Option<Reply> {
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
    pub(super) fn silenced(&mut self) -> bool {
        if self.silent.1 > 0 {
            self.silent.1 -= 1;
            return true;
        }
        self.silent.0
    }

    /// What CLIENT LIST shows of this connection now.
    pub(super) fn view(&self) -> ClientView {
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
    pub(super) fn show(&self) {
        self.ctx.clients().show(self.id, self.view());
    }
}

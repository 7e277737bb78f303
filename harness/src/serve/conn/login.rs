//! HELLO, AUTH and the name of one connection: its protocol, its user, its password check.

use super::{err, lossy, ServeConn};
use crate::commands::is;
use crate::reply::Reply;

impl ServeConn {
    pub(super) fn hello(&mut self, argv: &[Vec<u8>]) -> Reply {
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

    pub(super) fn users(&self) -> std::sync::MutexGuard<'_, super::super::acl::Users> {
        self.ctx.users.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn check_password(&mut self, user: Option<&[u8]>, pass: &[u8]) -> Result<(), Reply> {
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

    pub(super) fn auth(&mut self, argv: &[Vec<u8>]) -> Reply {
        match argv.len() {
            2 if self.ctx.requirepass.is_none() => err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
            2 => self.check_password(None, &argv[1]).map_or_else(|e| e, |()| Reply::ok()),
            3 => self
                .check_password(Some(&argv[1]), &argv[2])
                .map_or_else(|e| e, |()| Reply::ok()),
            _ => err("ERR syntax error"),
        }
    }

    pub(super) fn set_name(&mut self, name: Vec<u8>) -> Result<(), Reply> {
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(err(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = (!name.is_empty()).then_some(name);
        Ok(())
    }
}

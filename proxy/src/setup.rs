//! Connection-setup commands that client libraries send as they connect, answered so that the
//! client keeps sharing the upstream connections (a library that names itself would otherwise
//! get a connection of its own for good):
//!
//! - `CLIENT SETINFO LIB-NAME|LIB-VER value`: `+OK`, checked as Redis 7.2 checks it, kept by
//!   the proxy (the upstream never sees it);
//! - `CLIENT SETNAME name` and `CLIENT GETNAME`: the name is kept by the proxy, and set upstream
//!   (`CLIENT SETNAME`, its reply swallowed) on the client's own connection if it moves to one;
//! - `HELLO 2 [SETNAME name]`: `HELLO 2` goes on the shared connection (already RESP2), which
//!   answers with the server's details;
//! - `SELECT db` of the upstream URL's own database: `+OK`.
//!
//! Anything else of the kind (`CLIENT ID`, `HELLO 3`, `SELECT` of another database, ...) still
//! moves the client to a connection of its own, where it keeps its meaning.

use crate::resp;

/// What a client set up while on the shared connections.
#[derive(Debug, Default)]
pub(crate) struct Setup {
    name: Option<Vec<u8>>,
}

/// What the proxy does with a setup command of a client on the shared connections.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SetupAction {
    /// Answer with this reply; nothing is forwarded.
    Answer(Vec<u8>),
    /// Send this command on the shared connection instead (one reply).
    Send(Vec<u8>),
}

/// Redis's check for names and library attributes: printable ASCII without spaces.
fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn wrong_args(cmd: &str) -> Vec<u8> {
    resp::error_reply(&format!(
        "ERR wrong number of arguments for '{cmd}' command"
    ))
}

impl Setup {
    /// The proxy's answer to command `name` (upper case) with `args` (name first) from a
    /// client on the shared connections, or `None`: it goes as before.
    pub(crate) fn on_shared(
        &mut self,
        name: &[u8],
        args: &[&[u8]],
        url_db: i64,
    ) -> Option<SetupAction> {
        match name {
            b"CLIENT" => self.client(args),
            b"SELECT" => match args {
                [_, db] if resp::parse_int(db) == Some(url_db) => {
                    Some(SetupAction::Answer(b"+OK\r\n".to_vec()))
                }
                _ => None,
            },
            b"HELLO" => self.hello(args),
            _ => None,
        }
    }

    fn client(&mut self, args: &[&[u8]]) -> Option<SetupAction> {
        let sub = args.get(1)?.to_ascii_uppercase();
        let answer = match (sub.as_slice(), args) {
            (b"SETINFO", [_, _, attr, value]) => {
                let attr_name = if attr.eq_ignore_ascii_case(b"LIB-NAME") {
                    "lib-name"
                } else if attr.eq_ignore_ascii_case(b"LIB-VER") {
                    "lib-ver"
                } else {
                    return Some(SetupAction::Answer(resp::error_reply(&format!(
                        "ERR Unrecognized option '{}'",
                        String::from_utf8_lossy(attr)
                    ))));
                };
                if printable(value) {
                    b"+OK\r\n".to_vec()
                } else {
                    resp::error_reply(&format!(
                        "ERR {attr_name} cannot contain spaces, newlines or special characters."
                    ))
                }
            }
            (b"SETINFO", _) => wrong_args("client|setinfo"),
            (b"SETNAME", [_, _, name]) => {
                if !printable(name) {
                    return Some(SetupAction::Answer(
                        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n".to_vec(),
                    ));
                }
                self.name = (!name.is_empty()).then(|| name.to_vec());
                b"+OK\r\n".to_vec()
            }
            (b"SETNAME", _) => wrong_args("client|setname"),
            (b"GETNAME", [_, _]) => match &self.name {
                Some(n) => {
                    let mut out = format!("${}\r\n", n.len()).into_bytes();
                    out.extend_from_slice(n);
                    out.extend_from_slice(b"\r\n");
                    out
                }
                None => b"$-1\r\n".to_vec(),
            },
            (b"GETNAME", _) => wrong_args("client|getname"),
            _ => return None,
        };
        Some(SetupAction::Answer(answer))
    }

    /// `HELLO 2` and `HELLO 2 SETNAME name`; with AUTH (the client logs in upstream itself),
    /// another protocol or other options it needs a connection of its own.
    fn hello(&mut self, args: &[&[u8]]) -> Option<SetupAction> {
        let name = match args {
            [_, ver] if *ver == b"2" => None,
            [_, ver, opt, name] if *ver == b"2" && opt.eq_ignore_ascii_case(b"SETNAME") => {
                if !printable(name) {
                    return Some(SetupAction::Answer(
                        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n".to_vec(),
                    ));
                }
                Some(*name)
            }
            _ => return None,
        };
        if let Some(name) = name {
            self.name = (!name.is_empty()).then(|| name.to_vec());
        }
        let mut frame = Vec::new();
        resp::encode_command(&mut frame, &[b"HELLO", b"2"]);
        Some(SetupAction::Send(frame))
    }

    /// What to send first on the client's own connection when it moves to one: its name. The
    /// reply is not the client's.
    pub(crate) fn replay(&self) -> Option<Vec<u8>> {
        let name = self.name.as_ref()?;
        let mut frame = Vec::new();
        resp::encode_command(&mut frame, &[b"CLIENT", b"SETNAME", name]);
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(s: &mut Setup, args: &[&[u8]]) -> Option<SetupAction> {
        s.on_shared(&args[0].to_ascii_uppercase(), args, 0)
    }

    fn ok() -> Option<SetupAction> {
        Some(SetupAction::Answer(b"+OK\r\n".to_vec()))
    }

    #[test]
    fn names_and_library_info_stay_with_the_proxy() {
        let mut s = Setup::default();
        assert_eq!(
            answer(&mut s, &[b"client", b"setinfo", b"lib-name", b"redis-py"]),
            ok()
        );
        assert_eq!(
            answer(&mut s, &[b"CLIENT", b"SETINFO", b"LIB-VER", b"8.1.0"]),
            ok()
        );
        assert!(matches!(
            answer(&mut s, &[b"CLIENT", b"SETINFO", b"LIB-NAME", b"a b"]),
            Some(SetupAction::Answer(e)) if e.starts_with(b"-ERR lib-name cannot contain")
        ));
        assert_eq!(
            answer(&mut s, &[b"CLIENT", b"GETNAME"]),
            Some(SetupAction::Answer(b"$-1\r\n".to_vec()))
        );
        assert_eq!(s.replay(), None);
        assert_eq!(answer(&mut s, &[b"CLIENT", b"SETNAME", b"app1"]), ok());
        assert_eq!(
            answer(&mut s, &[b"CLIENT", b"GETNAME"]),
            Some(SetupAction::Answer(b"$4\r\napp1\r\n".to_vec()))
        );
        assert!(s.replay().unwrap().ends_with(b"$4\r\napp1\r\n"));
        assert_eq!(answer(&mut s, &[b"CLIENT", b"ID"]), None);
    }

    #[test]
    fn only_the_urls_database_and_protocol_2_stay_shared() {
        let mut s = Setup::default();
        assert_eq!(s.on_shared(b"SELECT", &[b"SELECT", b"3"], 3), ok());
        assert_eq!(s.on_shared(b"SELECT", &[b"SELECT", b"0"], 3), None);
        assert!(matches!(
            s.on_shared(b"HELLO", &[b"HELLO", b"2"], 0),
            Some(SetupAction::Send(_))
        ));
        assert_eq!(s.on_shared(b"HELLO", &[b"HELLO", b"3"], 0), None);
        assert_eq!(s.on_shared(b"HELLO", &[b"HELLO"], 0), None);
        assert!(matches!(
            s.on_shared(b"HELLO", &[b"HELLO", b"2", b"SETNAME", b"n"], 0),
            Some(SetupAction::Send(_))
        ));
        assert!(s.replay().is_some());
    }
}

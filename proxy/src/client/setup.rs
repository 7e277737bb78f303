//! Connection-setup commands that client libraries send as they connect, answered so that the
//! client keeps sharing the upstream connections (a library that names itself would otherwise
//! get a connection of its own for good):
//!
//! - `CLIENT SETINFO LIB-NAME|LIB-VER value`: `+OK`, checked as Redis 7.2 checks it, kept by
//!   the proxy (the upstream never sees it);
//! - `CLIENT MAINT_NOTIFICATIONS ...` (redis-py 8 sends it with RESP3): Redis 7.0's
//!   unknown-subcommand error, as the server would answer (the proxy sends no such notices);
//! - `CLIENT SETNAME name` and `CLIENT GETNAME`: the name is kept by the proxy, and set upstream
//!   (`CLIENT SETNAME`, its reply swallowed) on the client's own connection if it moves to one
//!   (which speaks the client's protocol from its login on);
//! - `HELLO [2|3] [SETNAME name]`: the name kept as above, and `HELLO` sent on the shared
//!   connection of the client's protocol (the proxy keeps one set per protocol), which answers
//!   with the server's details in that protocol;
//! - `SELECT db` of the upstream URL's own database: `+OK`.
//!
//! Anything else of the kind (`CLIENT ID`, `SELECT` of another database, ...) still moves the
//! client to a connection of its own, where it keeps its meaning.

use lockkit_resp::errors::{unknown_subcommand, wrong_number_of_arguments};
use lockkit_resp::number::string2ll;
use lockkit_resp::write_multibulk;

use super::command::c_eq;
use crate::upstream::RespVersion;

/// What a client set up while on the shared connections.
#[derive(Debug, Default)]
pub(crate) struct Setup {
    name: Option<Vec<u8>>,
}

/// Redis's reply to a client name it refuses.
const BAD_NAME: &[u8] =
    b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n";

/// Redis's check for names and library attributes: printable ASCII without spaces.
fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

impl Setup {
    /// The proxy's answer to `CLIENT SETNAME|GETNAME|SETINFO` with `args` (name first) from a
    /// client on the shared connections, in protocol `resp`; `None`: it needs a connection of
    /// its own.
    pub(crate) fn client(&mut self, args: &[&[u8]], resp: RespVersion) -> Option<Vec<u8>> {
        let sub = args.get(1)?;
        let wrong = wrong_number_of_arguments;
        if sub.eq_ignore_ascii_case(b"SETINFO") {
            let [_, _, attr, value] = args else {
                return Some(wrong("client|setinfo"));
            };
            let attr_name = if c_eq(attr, b"LIB-NAME") {
                "lib-name"
            } else if c_eq(attr, b"LIB-VER") {
                "lib-ver"
            } else {
                let shown =
                    String::from_utf8_lossy(attr.split(|&b| b == 0).next().unwrap_or_default())
                        .replace(['\r', '\n'], " ");
                return Some(format!("-ERR Unrecognized option '{shown}'\r\n").into_bytes());
            };
            return Some(if printable(value) {
                b"+OK\r\n".to_vec()
            } else {
                format!(
                    "-ERR {attr_name} cannot contain spaces, newlines or special characters.\r\n"
                )
                .into_bytes()
            });
        }
        if sub.eq_ignore_ascii_case(b"MAINT_NOTIFICATIONS") {
            // Redis 8's notices of an endpoint about to move: the client's endpoint is the
            // proxy, which sends none. Answered as Redis 7.0 answers it.
            return Some(unknown_subcommand(args[0], sub));
        }
        if sub.eq_ignore_ascii_case(b"SETNAME") {
            let [_, _, name] = args else {
                return Some(wrong("client|setname"));
            };
            return Some(match self.set_name(name) {
                true => b"+OK\r\n".to_vec(),
                false => BAD_NAME.to_vec(),
            });
        }
        if sub.eq_ignore_ascii_case(b"GETNAME") {
            if args.len() != 2 {
                return Some(wrong("client|getname"));
            }
            return Some(match (&self.name, resp) {
                (Some(n), _) => {
                    let mut out = format!("${}\r\n", n.len()).into_bytes();
                    out.extend_from_slice(n);
                    out.extend_from_slice(b"\r\n");
                    out
                }
                (None, RespVersion::Resp2) => b"$-1\r\n".to_vec(),
                (None, RespVersion::Resp3) => b"_\r\n".to_vec(),
            });
        }
        None
    }

    /// Keeps `name` (an empty one clears it), or refuses it as Redis does: false.
    pub(crate) fn set_name(&mut self, name: &[u8]) -> bool {
        if !printable(name) {
            return false;
        }
        self.name = (!name.is_empty()).then(|| name.to_vec());
        true
    }

    /// Redis's reply to a name it refuses.
    pub(crate) fn bad_name() -> Vec<u8> {
        BAD_NAME.to_vec()
    }

    /// The proxy's answer to `SELECT` with `args` on the shared connections: `+OK` for the
    /// URL's own database; `None`: it needs a connection of its own.
    pub(crate) fn select(args: &[&[u8]], url_db: i64) -> Option<Vec<u8>> {
        match args {
            [_, db] if string2ll(db) == Some(url_db) => Some(b"+OK\r\n".to_vec()),
            _ => None,
        }
    }

    /// What to send first on the client's own connection when it moves to one: its name. The
    /// reply is not the client's.
    pub(crate) fn replay(&self) -> Option<Vec<u8>> {
        let name = self.name.as_ref()?;
        let mut frame = Vec::new();
        write_multibulk(&mut frame, [&b"CLIENT"[..], b"SETNAME", name]);
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Option<Vec<u8>> {
        Some(b"+OK\r\n".to_vec())
    }

    #[test]
    fn names_and_library_info_stay_with_the_proxy() {
        let mut s = Setup::default();
        let v2 = RespVersion::Resp2;
        assert_eq!(
            s.client(&[b"client", b"setinfo", b"lib-name", b"redis-py"], v2),
            ok()
        );
        assert_eq!(
            s.client(&[b"CLIENT", b"SETINFO", b"LIB-VER", b"8.1.0"], v2),
            ok()
        );
        assert!(s
            .client(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"a b"], v2)
            .unwrap()
            .starts_with(b"-ERR lib-name cannot contain"));
        assert_eq!(
            s.client(&[b"CLIENT", b"GETNAME"], v2),
            Some(b"$-1\r\n".to_vec())
        );
        assert_eq!(
            s.client(&[b"CLIENT", b"GETNAME"], RespVersion::Resp3),
            Some(b"_\r\n".to_vec())
        );
        assert!(s.replay().is_none());
        assert_eq!(s.client(&[b"CLIENT", b"SETNAME", b"app1"], v2), ok());
        assert_eq!(
            s.client(&[b"CLIENT", b"GETNAME"], v2),
            Some(b"$4\r\napp1\r\n".to_vec())
        );
        assert_eq!(
            s.client(&[b"CLIENT", b"SETNAME", b"a b"], v2),
            Some(BAD_NAME.to_vec())
        );
        assert!(s.replay().unwrap().ends_with(b"$4\r\napp1\r\n"));
        assert_eq!(s.client(&[b"CLIENT", b"ID"], v2), None);
    }

    #[test]
    fn only_the_urls_database_stays_shared() {
        assert_eq!(Setup::select(&[b"SELECT", b"3"], 3), ok());
        assert_eq!(Setup::select(&[b"SELECT", b"0"], 3), None);
        assert_eq!(Setup::select(&[b"SELECT", b"03"], 3), None);
    }
}

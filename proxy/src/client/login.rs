//! A client's login at the proxy ([`crate::ClientAuth`]), checked as redis-server checks it:
//! `AUTH [user] password`, `HELLO [protover [AUTH user password] [SETNAME name]]` with its
//! options read in Redis's order, `-NOAUTH` before login, `RESET` logging out. Every proxy
//! user reaches the upstream as the upstream URL's user: AUTH and the AUTH part of HELLO never
//! leave the proxy while client passwords are set.

use lockkit_resp::errors::wrong_number_of_arguments;
use lockkit_resp::number::string2ll;
use lockkit_resp::write_multibulk;

use super::command::c_eq;
use crate::auth::{ClientAuth, DEFAULT_USER};

/// Redis's reply to a command that needs a login, before it.
pub(crate) const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
/// Redis's reply to a wrong user or password.
pub(crate) const WRONGPASS: &[u8] =
    b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
/// Redis 7.0.15's reply to `HELLO` without `AUTH` before login.
pub(crate) const HELLO_NOAUTH: &[u8] = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n";

/// One connection's login.
#[derive(Debug)]
pub(crate) struct Login {
    /// The user it logged in as; `None` before login (when a login is required).
    user: Option<String>,
}

impl Login {
    /// Logged in from the start when the proxy asks for no password.
    pub(crate) fn new(auth: &ClientAuth) -> Login {
        Login {
            user: (!auth.is_required()).then(|| DEFAULT_USER.to_string()),
        }
    }

    /// Whether the client logged in (or needs not).
    pub(crate) fn logged_in(&self) -> bool {
        self.user.is_some()
    }

    /// `RESET` logs the connection out, as on Redis with a password set.
    pub(crate) fn reset(&mut self, auth: &ClientAuth) {
        *self = Login::new(auth);
    }

    /// The reply to `AUTH` with `args` (its name first).
    pub(crate) fn auth(&mut self, auth: &ClientAuth, args: &[&[u8]]) -> Vec<u8> {
        let (user, password) = match args {
            [_, password] => (DEFAULT_USER.as_bytes(), *password),
            [_, user, password] => (*user, *password),
            [_] | [] => return wrong_number_of_arguments("auth"),
            _ => return b"-ERR syntax error\r\n".to_vec(),
        };
        match self.log_in(auth, user, password) {
            true => b"+OK\r\n".to_vec(),
            false => WRONGPASS.to_vec(),
        }
    }

    /// Logs in as `user` when `password` is right.
    pub(crate) fn log_in(&mut self, auth: &ClientAuth, user: &[u8], password: &[u8]) -> bool {
        let ok = auth.check(user, password);
        if ok {
            self.user = Some(String::from_utf8_lossy(user).into_owned());
        }
        ok
    }
}

/// A `HELLO` read as `helloCommand` reads it: the protocol asked for, the login and the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello<'a> {
    /// 2 or 3; `None`: `HELLO` alone (the connection's protocol stays).
    pub(crate) version: Option<u8>,
    /// `AUTH user password`.
    pub(crate) auth: Option<(&'a [u8], &'a [u8])>,
    /// `SETNAME name`.
    pub(crate) setname: Option<&'a [u8]>,
}

impl<'a> Hello<'a> {
    /// Reads `args` (the name first), or Redis's error reply for them.
    pub(crate) fn parse(args: &[&'a [u8]]) -> Result<Hello<'a>, Vec<u8>> {
        let mut hello = Hello {
            version: None,
            auth: None,
            setname: None,
        };
        if let Some(v) = args.get(1) {
            hello.version = match string2ll(v) {
                None => {
                    return Err(
                        b"-ERR Protocol version is not an integer or out of range\r\n".to_vec(),
                    )
                }
                Some(2) => Some(2),
                Some(3) => Some(3),
                Some(_) => return Err(b"-NOPROTO unsupported protocol version\r\n".to_vec()),
            };
        }
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - j - 1;
            if c_eq(args[j], b"AUTH") && more >= 2 {
                hello.auth = Some((args[j + 1], args[j + 2]));
                j += 3;
            } else if c_eq(args[j], b"SETNAME") && more >= 1 {
                hello.setname = Some(args[j + 1]);
                j += 2;
            } else {
                // `%s` of a C string: up to its first NUL.
                let opt = args[j].split(|&b| b == 0).next().unwrap_or_default();
                let mut e = b"-ERR Syntax error in HELLO option '".to_vec();
                e.extend(
                    opt.iter()
                        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                e.extend_from_slice(b"'\r\n");
                return Err(e);
            }
        }
        Ok(hello)
    }

    /// The same `HELLO` without its AUTH part (and, with `name: false`, without SETNAME).
    pub(crate) fn encode(&self, name: bool) -> Vec<u8> {
        let version = self.version.map(|v| [b'0' + v]);
        let mut args: Vec<&[u8]> = vec![b"HELLO"];
        if let Some(v) = &version {
            args.push(v);
        }
        if let (true, Some(n)) = (name, self.setname) {
            args.extend_from_slice(&[b"SETNAME", n]);
        }
        let mut out = Vec::new();
        write_multibulk(&mut out, args);
        out
    }
}

/// A command the server refuses in turn (an unknown command: inside MULTI, it fails the EXEC
/// as any refused command does), whose name says why.
pub(crate) fn refusal(why: &str) -> Vec<u8> {
    let name = format!("lockkit-proxy-refuses:{why}");
    let mut out = Vec::new();
    write_multibulk(&mut out, [name.as_bytes()]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> ClientAuth {
        ClientAuth::new()
            .requirepass("pw")
            .unwrap()
            .user("app", "apw")
            .unwrap()
    }

    #[test]
    fn auth_is_checked_as_redis_checks_it() {
        let a = auth();
        let mut l = Login::new(&a);
        assert!(!l.logged_in());
        assert_eq!(l.auth(&a, &[b"AUTH", b"app", b"pw"]), WRONGPASS);
        assert_eq!(
            l.auth(&a, &[b"AUTH"]),
            b"-ERR wrong number of arguments for 'auth' command\r\n"
        );
        assert_eq!(
            l.auth(&a, &[b"AUTH", b"a", b"b", b"c"]),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(l.auth(&a, &[b"AUTH", b"pw"]), b"+OK\r\n");
        assert!(l.logged_in());
        l.reset(&a);
        assert!(!l.logged_in());
        assert!(Login::new(&ClientAuth::new()).logged_in());
    }

    #[test]
    fn hello_is_read_in_redis_order() {
        let h = Hello::parse(&[b"HELLO", b"3", b"AUTH", b"app", b"apw", b"SETNAME", b"n"]).unwrap();
        assert_eq!(h.version, Some(3));
        assert_eq!(h.auth, Some((&b"app"[..], &b"apw"[..])));
        assert_eq!(h.setname, Some(&b"n"[..]));
        let mut want = Vec::new();
        write_multibulk(&mut want, [&b"HELLO"[..], b"3", b"SETNAME", b"n"]);
        assert_eq!(h.encode(true), want);
        assert_eq!(
            Hello::parse(&[b"HELLO"]).unwrap().encode(true),
            b"*1\r\n$5\r\nHELLO\r\n"
        );
        assert_eq!(
            Hello::parse(&[b"HELLO", b"03"]).unwrap_err(),
            b"-ERR Protocol version is not an integer or out of range\r\n"
        );
        assert_eq!(
            Hello::parse(&[b"HELLO", b"4"]).unwrap_err(),
            b"-NOPROTO unsupported protocol version\r\n"
        );
        assert_eq!(
            Hello::parse(&[b"HELLO", b"3", b"AUTH", b"x"]).unwrap_err(),
            b"-ERR Syntax error in HELLO option 'AUTH'\r\n"
        );
        // Options read as C strings: `AUTH\0` is AUTH.
        assert!(Hello::parse(&[b"HELLO", b"2", b"auth\0x", b"u", b"p"])
            .unwrap()
            .auth
            .is_some());
    }

    #[test]
    fn refusals_name_why() {
        assert_eq!(refusal("x"), b"*1\r\n$23\r\nlockkit-proxy-refuses:x\r\n");
    }
}

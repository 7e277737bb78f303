//! Clients log in at the proxy ([`ClientAuth`]), as they would at Redis: `-NOAUTH` before
//! `AUTH`, `AUTH PASSWORD` for `--requirepass`, `AUTH NAME PASSWORD` for a named user, and
//! `HELLO <proto> AUTH NAME PASSWORD`. Every proxy user reaches the upstream server as the
//! upstream URL's user: AUTH and the AUTH part of HELLO are answered by the proxy and never
//! forwarded, and a client's command reaches the upstream only once it logged in.
//!
//! Whatever the proxy hands a client never holds the upstream's secrets: the value of
//! `requirepass` and `masterauth` in a `CONFIG GET` reply is blanked ([`Gate::Scrub`]), and a
//! `CONFIG GET` whose reply cannot be rewritten (inside MULTI, or once replies no longer pair
//! with commands) is refused.

use std::path::Path;

use crate::resp;

/// The users clients log in as at the proxy: `--requirepass` (the user `default`) and
/// `--user NAME:PASSWORD`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientAuth {
    /// (name, password); `default` is the one `AUTH PASSWORD` checks.
    users: Vec<(String, String)>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.users.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ClientAuth")
            .field("users", &names)
            .finish_non_exhaustive()
    }
}

/// The user `AUTH PASSWORD` logs in as (Redis's name).
pub const DEFAULT_USER: &str = "default";

impl ClientAuth {
    /// No users yet: every client is let in until one is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clients log in with `AUTH password` (the user `default`).
    ///
    /// # Errors
    /// An empty password.
    pub fn requirepass(self, password: &str) -> Result<Self, String> {
        self.user(DEFAULT_USER, password)
    }

    /// A named user: `AUTH name password`.
    ///
    /// # Errors
    /// An empty name or password, a name with spaces, a name given twice.
    pub fn user(mut self, name: &str, password: &str) -> Result<Self, String> {
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(format!(
                "user name `{name}`: must be non-empty and without spaces"
            ));
        }
        if password.is_empty() {
            return Err(format!("user `{name}`: empty password"));
        }
        if self.users.iter().any(|(n, _)| n == name) {
            return Err(format!("user `{name}` is given twice"));
        }
        self.users.push((name.to_string(), password.to_string()));
        Ok(self)
    }

    /// Adds `NAME:PASSWORD` (the password may hold `:`).
    ///
    /// ```
    /// use lockkit_proxy::ClientAuth;
    /// let auth = ClientAuth::new().user_spec("orders:pw:with:colons").unwrap();
    /// assert!(auth.is_required());
    /// assert!(ClientAuth::new().user_spec("no-password").is_err());
    /// ```
    ///
    /// # Errors
    /// No `:`, or what [`ClientAuth::user`] refuses.
    pub fn user_spec(self, spec: &str) -> Result<Self, String> {
        let Some((name, password)) = spec.split_once(':') else {
            return Err("expected NAME:PASSWORD".into());
        };
        self.user(name, password)
    }

    /// Adds the users of a file: one `NAME:PASSWORD` a line; blank lines and `#` comments.
    ///
    /// # Errors
    /// The file cannot be read, or a line is not a valid user (its number is named, never its
    /// password).
    pub fn users_file(mut self, path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self = self
                .user_spec(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        }
        Ok(self)
    }

    /// Whether clients must log in.
    pub fn is_required(&self) -> bool {
        !self.users.is_empty()
    }

    /// The user names, `default` for `--requirepass`.
    pub fn user_names(&self) -> Vec<&str> {
        self.users.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn check(&self, name: &[u8], password: &[u8]) -> bool {
        // Every user is compared, in time that does not depend on where the bytes differ.
        let mut ok = false;
        for (n, p) in &self.users {
            ok |= n.as_bytes() == name && same_bytes(p.as_bytes(), password);
        }
        ok
    }
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

/// What the proxy does with one command before it reaches plugins and the upstream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Goes on as it came.
    Pass,
    /// Answered by the proxy with this reply; nothing is forwarded.
    Answer(Vec<u8>),
    /// Answered with this reply, then the connection closes.
    Close(Vec<u8>),
    /// This command is forwarded instead (HELLO without its AUTH part, or a refusal the server
    /// answers in turn).
    Forward(Vec<u8>),
    /// Forwarded as it came; its reply (a `CONFIG GET`) has the secrets blanked.
    Scrub,
}

/// One connection's login.
#[derive(Debug)]
pub(crate) struct Login {
    /// The user it logged in as; `None` before login (when a login is required).
    user: Option<String>,
}

const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
const HELLO_NOAUTH: &[u8] = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n";

/// Config parameters whose value is a secret.
const SECRET_PARAMS: [&[u8]; 2] = [b"requirepass", b"masterauth"];

impl Login {
    pub(crate) fn new(auth: &ClientAuth) -> Login {
        Login {
            user: (!auth.is_required()).then(|| DEFAULT_USER.to_string()),
        }
    }

    /// Whether the client logged in (or needs not).
    pub(crate) fn logged_in(&self) -> bool {
        self.user.is_some()
    }

    /// [`Login::gate`] for a command frame; quick for the commands it has no business with.
    pub(crate) fn gate_frame(
        &mut self,
        auth: &ClientAuth,
        name: &[u8],
        frame: &[u8],
        inline: bool,
        answerable: bool,
    ) -> Gate {
        const LOOKED_AT: [&[u8]; 5] = [b"AUTH", b"HELLO", b"QUIT", b"RESET", b"CONFIG"];
        if self.logged_in() && !LOOKED_AT.contains(&name) {
            return Gate::Pass;
        }
        self.gate(auth, name, &resp::command_args(frame, inline), answerable)
    }

    /// Decides on command `name` (upper case) with `args` (its name first). `answerable`: a
    /// reply of the proxy's own would be in turn (outside MULTI, replies pairing with commands).
    pub(crate) fn gate(
        &mut self,
        auth: &ClientAuth,
        name: &[u8],
        args: &[&[u8]],
        answerable: bool,
    ) -> Gate {
        if auth.is_required() {
            match name {
                b"AUTH" if !answerable => {
                    return Gate::Forward(refusal(b"AUTH-inside-MULTI-or-pubsub"))
                }
                b"AUTH" => return Gate::Answer(self.auth(auth, args)),
                b"HELLO" => return self.hello(auth, args, answerable),
                b"QUIT" if !self.logged_in() => return Gate::Close(b"+OK\r\n".to_vec()),
                b"RESET" if !self.logged_in() => return Gate::Answer(b"+RESET\r\n".to_vec()),
                b"RESET" => {
                    // RESET logs the connection out, as on Redis with a password set.
                    self.user = None;
                    return Gate::Pass;
                }
                _ if !self.logged_in() => return Gate::Answer(NOAUTH.to_vec()),
                _ => {}
            }
        }
        if name == b"CONFIG" && asks_for_secrets(args) {
            return if answerable {
                Gate::Scrub
            } else {
                Gate::Forward(refusal(b"CONFIG-GET-of-a-secret-inside-MULTI-or-pubsub"))
            };
        }
        Gate::Pass
    }

    fn auth(&mut self, auth: &ClientAuth, args: &[&[u8]]) -> Vec<u8> {
        let (user, password) = match args {
            [_, password] => (DEFAULT_USER.as_bytes(), *password),
            [_, user, password] => (*user, *password),
            [_] | [] => return b"-ERR wrong number of arguments for 'auth' command\r\n".to_vec(),
            _ => return b"-ERR syntax error\r\n".to_vec(),
        };
        self.log_in(auth, user, password)
            .map_or_else(|| WRONGPASS.to_vec(), |()| b"+OK\r\n".to_vec())
    }

    fn log_in(&mut self, auth: &ClientAuth, user: &[u8], password: &[u8]) -> Option<()> {
        auth.check(user, password).then(|| {
            self.user = Some(String::from_utf8_lossy(user).into_owned());
        })
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`, checked in Redis's order; what
    /// reaches the upstream has no AUTH part.
    fn hello(&mut self, auth: &ClientAuth, args: &[&[u8]], answerable: bool) -> Gate {
        if let Some(ver) = args.get(1) {
            match resp::parse_int(ver) {
                None => {
                    return Gate::Answer(
                        b"-ERR Protocol version is not an integer or out of range\r\n".to_vec(),
                    )
                }
                Some(v) if !(2..=3).contains(&v) => {
                    return Gate::Answer(b"-NOPROTO unsupported protocol version\r\n".to_vec())
                }
                Some(_) => {}
            }
        }
        let mut kept: Vec<&[u8]> = args.iter().take(2).copied().collect();
        let mut login = None;
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - j - 1;
            if args[j].eq_ignore_ascii_case(b"AUTH") && more >= 2 {
                login = Some((args[j + 1], args[j + 2]));
                j += 3;
            } else if args[j].eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
                kept.extend_from_slice(&args[j..j + 2]);
                j += 2;
            } else {
                let mut e = b"-ERR Syntax error in HELLO option '".to_vec();
                e.extend(
                    args[j]
                        .iter()
                        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                e.extend_from_slice(b"'\r\n");
                return Gate::Answer(e);
            }
        }
        if login.is_some() && !answerable {
            return Gate::Forward(refusal(b"HELLO-AUTH-inside-MULTI-or-pubsub"));
        }
        if let Some((user, password)) = login {
            if self.log_in(auth, user, password).is_none() {
                return Gate::Answer(WRONGPASS.to_vec());
            }
        }
        if !self.logged_in() {
            return Gate::Answer(HELLO_NOAUTH.to_vec());
        }
        if login.is_none() {
            return Gate::Pass;
        }
        let mut frame = Vec::new();
        resp::encode_command(&mut frame, &kept);
        Gate::Forward(frame)
    }
}

/// A command the server refuses in turn (an unknown command: inside MULTI, it fails the EXEC
/// as any refused command does), whose name says why.
fn refusal(why: &[u8]) -> Vec<u8> {
    let mut name = b"lockkit-proxy-refuses:".to_vec();
    name.extend_from_slice(why);
    let mut frame = Vec::new();
    resp::encode_command(&mut frame, &[&name]);
    frame
}

/// Whether `CONFIG GET` with these patterns may name a secret parameter.
fn asks_for_secrets(args: &[&[u8]]) -> bool {
    if !args.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"GET")) {
        return false;
    }
    args.iter()
        .skip(2)
        .any(|p| SECRET_PARAMS.iter().any(|s| glob_match(p, s)))
}

/// Redis's `stringmatchlen`, case-insensitive: `*`, `?`, `[...]` (with `^` and ranges), `\`.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let lower = |b: u8| b.to_ascii_lowercase();
    let (mut p, mut t) = (0, 0);
    while p < pattern.len() {
        match pattern[p] {
            b'*' => {
                while pattern.get(p + 1) == Some(&b'*') {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                return (t..=text.len()).any(|s| glob_match(&pattern[p + 1..], &text[s..]));
            }
            b'?' => {
                if t == text.len() {
                    return false;
                }
                t += 1;
            }
            b'[' => {
                let Some(&c) = text.get(t) else { return false };
                p += 1;
                let not = pattern.get(p) == Some(&b'^');
                if not {
                    p += 1;
                }
                let mut hit = false;
                while p < pattern.len() && pattern[p] != b']' {
                    if pattern[p] == b'\\' && p + 1 < pattern.len() {
                        p += 1;
                        hit |= lower(pattern[p]) == lower(c);
                    } else if pattern.get(p + 1) == Some(&b'-') && p + 2 < pattern.len() {
                        let (mut a, mut b) = (lower(pattern[p]), lower(pattern[p + 2]));
                        if a > b {
                            std::mem::swap(&mut a, &mut b);
                        }
                        hit |= (a..=b).contains(&lower(c));
                        p += 2;
                    } else {
                        hit |= lower(pattern[p]) == lower(c);
                    }
                    p += 1;
                }
                if hit == not {
                    return false;
                }
                t += 1;
            }
            c => {
                let c = if c == b'\\' && p + 1 < pattern.len() {
                    p += 1;
                    pattern[p]
                } else {
                    c
                };
                if text.get(t).map(|&x| lower(x)) != Some(lower(c)) {
                    return false;
                }
                t += 1;
            }
        }
        p += 1;
    }
    t == text.len()
}

/// A `CONFIG GET` reply with the values of the secret parameters blanked (`""`, as a server
/// without a password answers); any other reply as it came.
pub(crate) fn scrub_config_reply(frame: &[u8]) -> Vec<u8> {
    let (Some(&kind), Some(end)) = (frame.first(), lockkit::resp::find_crlf(frame, 0)) else {
        return frame.to_vec();
    };
    let Some(n) = resp::parse_int(&frame[1..end]) else {
        return frame.to_vec();
    };
    let items = match kind {
        b'*' => n,
        b'%' => 2 * n,
        _ => return frame.to_vec(),
    };
    let mut out = frame[..end + 2].to_vec();
    let mut pos = end + 2;
    let mut secret_next = false;
    for i in 0..items.max(0) {
        let Ok(Some(len)) = resp::frame_len(&frame[pos..]) else {
            return frame.to_vec();
        };
        let item = &frame[pos..pos + len];
        if secret_next {
            out.extend_from_slice(b"$0\r\n\r\n");
        } else {
            out.extend_from_slice(item);
        }
        secret_next = i % 2 == 0
            && matches!(resp::reply_kind(item), resp::ReplyKind::Bulk(name)
                if SECRET_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(name)));
        pos += len;
    }
    out.extend_from_slice(&frame[pos..]);
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
    fn globs_match_as_redis_matches_config_names() {
        for (p, t) in [
            ("*", "requirepass"),
            ("*PASS*", "requirepass"),
            ("require?ass", "requirepass"),
            ("[mr]*", "masterauth"),
            ("[a-n]asterauth", "masterauth"),
            ("master\\auth", "masterauth"),
        ] {
            assert!(glob_match(p.as_bytes(), t.as_bytes()), "{p} {t}");
        }
        for (p, t) in [
            ("maxmemory", "requirepass"),
            ("[^r]*", "requirepass"),
            ("*x", "masterauth"),
        ] {
            assert!(!glob_match(p.as_bytes(), t.as_bytes()), "{p} {t}");
        }
    }

    #[test]
    fn secrets_are_blanked_in_both_protocols() {
        let resp2 = b"*4\r\n$11\r\nrequirepass\r\n$2\r\npw\r\n$4\r\nport\r\n$2\r\n70\r\n";
        assert_eq!(
            scrub_config_reply(resp2),
            b"*4\r\n$11\r\nrequirepass\r\n$0\r\n\r\n$4\r\nport\r\n$2\r\n70\r\n"
        );
        let resp3 = b"%1\r\n$10\r\nmasterauth\r\n$2\r\npw\r\n";
        assert_eq!(
            scrub_config_reply(resp3),
            b"%1\r\n$10\r\nmasterauth\r\n$0\r\n\r\n"
        );
        assert_eq!(scrub_config_reply(b"-ERR x\r\n"), b"-ERR x\r\n");
    }

    #[test]
    fn nothing_but_auth_hello_quit_and_reset_before_login() {
        let a = auth();
        let mut l = Login::new(&a);
        assert_eq!(
            l.gate(&a, b"GET", &[b"GET", b"k"], true),
            Gate::Answer(NOAUTH.to_vec())
        );
        assert_eq!(
            l.gate(&a, b"AUTH", &[b"AUTH", b"app", b"pw"], true),
            Gate::Answer(WRONGPASS.to_vec())
        );
        assert_eq!(
            l.gate(&a, b"HELLO", &[b"HELLO", b"3"], true),
            Gate::Answer(HELLO_NOAUTH.to_vec())
        );
        assert_eq!(
            l.gate(&a, b"RESET", &[b"RESET"], true),
            Gate::Answer(b"+RESET\r\n".to_vec())
        );
        let mut want = Vec::new();
        resp::encode_command(&mut want, &[b"HELLO", b"3", b"SETNAME", b"n"]);
        assert_eq!(
            l.gate(
                &a,
                b"HELLO",
                &[b"HELLO", b"3", b"AUTH", b"app", b"apw", b"SETNAME", b"n"],
                true
            ),
            Gate::Forward(want)
        );
        assert_eq!(l.gate(&a, b"GET", &[b"GET", b"k"], true), Gate::Pass);
        assert_eq!(l.gate(&a, b"RESET", &[b"RESET"], true), Gate::Pass);
        assert!(!l.logged_in(), "RESET logs out");
        assert_eq!(
            l.gate(&a, b"AUTH", &[b"AUTH", b"pw"], true),
            Gate::Answer(b"+OK\r\n".to_vec())
        );
        assert_eq!(
            l.gate(&a, b"CONFIG", &[b"config", b"get", b"*"], true),
            Gate::Scrub
        );
        assert!(matches!(
            l.gate(&a, b"CONFIG", &[b"config", b"get", b"*"], false),
            Gate::Forward(_)
        ));
        assert_eq!(
            l.gate(&a, b"CONFIG", &[b"config", b"get", b"port"], true),
            Gate::Pass
        );
    }

    #[test]
    fn the_debug_form_names_users_not_passwords() {
        let text = format!("{:?}", auth());
        assert!(text.contains("app") && !text.contains("apw"), "{text}");
    }
}

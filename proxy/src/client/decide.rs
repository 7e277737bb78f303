//! What happens to one classified request ([`ClientCommand`]), decided in redis-server's
//! order: an HTTP request closes the connection; a command Redis does not know or with the
//! wrong number of arguments is refused before the login is looked at; a command that needs a
//! login gets `-NOAUTH` before it; then the commands the proxy carries out itself (AUTH,
//! HELLO, QUIT, RESET, CLIENT REPLY, the connection-setup commands, CONFIG GET's scrubbing,
//! MULTI's bookkeeping); everything else is forwarded, on a shared upstream connection when
//! it means the same on any.

use lockkit_resp::Request;

use super::command::{c_eq, ClientCommand, Refusal, ReplyMode, Special};
use super::conn::{ClientConn, Mode, ReplyControl};
use super::login::{refusal, Hello, HELLO_NOAUTH, NOAUTH, WRONGPASS};
use super::secrets::SECRET_PARAMETERS;
use super::setup::Setup;
use crate::upstream::route::Up;
use crate::upstream::RespVersion;

/// What becomes of a request's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyHandling {
    /// Passed on as it comes.
    Plain,
    /// Passed on; the command may block longer than the operation timeout.
    Blocking,
    /// Passed on with its secrets blanked (`CONFIG GET`).
    Scrub,
    /// An `EXEC` reply, passed on with the secrets of its `CONFIG GET`s blanked.
    ScrubExec,
}

/// Where a forwarded request goes and what becomes of its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    /// On a connection of the client's own (moving it there if it shares).
    pub(crate) own: bool,
    pub(crate) reply: ReplyHandling,
    /// Replies stop pairing with commands after it.
    pub(crate) unpairs: bool,
}

impl Route {
    fn of(cmd: &ClientCommand) -> Route {
        Route {
            own: !cmd.shareable,
            reply: if cmd.blocking {
                ReplyHandling::Blocking
            } else {
                ReplyHandling::Plain
            },
            unpairs: cmd.unpairs,
        }
    }

    fn own() -> Route {
        Route {
            own: true,
            reply: ReplyHandling::Plain,
            unpairs: false,
        }
    }
}

/// What the proxy does with one request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing: no reply, nothing forwarded (`CLIENT REPLY OFF`).
    Nothing,
    /// The proxy answers this, in turn.
    Answer(Vec<u8>),
    /// The proxy answers this, and the connection closes once it is out (QUIT).
    AnswerAndClose(Vec<u8>),
    /// The connection closes at once, without a reply (an HTTP request).
    CloseNow,
    /// Forwarded as it was read (re-encoded when its bytes are not plain).
    Forward(Route),
    /// These bytes are forwarded in its place (HELLO without its AUTH part, a refusal the
    /// server answers in turn).
    Instead(Vec<u8>, Route),
    /// The client, on the shared connections, moves to those of protocol `resp`, and this
    /// `HELLO` goes there.
    Hello(RespVersion, Vec<u8>),
    /// RESET.
    Reset,
}

impl ClientConn {
    /// Decides what happens to `cmd`, the request `req` read from `bytes`.
    pub(crate) fn decide(
        &mut self,
        cmd: &ClientCommand,
        req: &Request,
        bytes: &[u8],
        up: &Up,
    ) -> Decision {
        if cmd.special == Special::Http {
            return Decision::CloseNow;
        }
        let logged_in = self.login.logged_in();
        if let Some(refusal) = cmd.refusal {
            // Redis refuses these before it looks at the login. After login, the server
            // answers them (a newer one may know a command or an arity Redis 7.0 did not),
            // but for an empty name, which no server knows, and the commands the proxy
            // carries out itself. Inside MULTI the server refuses them all in turn, as it
            // must: a refused command fails the transaction's EXEC.
            let empty_name = req.arg(bytes, 0).is_some_and(<[u8]>::is_empty);
            let ours = matches!(
                cmd.special,
                Special::Auth | Special::Hello | Special::Quit | Special::Reset
            ) && refusal == Refusal::WrongArity;
            if !logged_in {
                return Decision::Answer(cmd.refusal_reply(req, bytes).unwrap_or_default());
            }
            if let Mode::Transaction { .. } = self.mode {
                return Decision::Forward(Route::own());
            }
            if empty_name || ours {
                return Decision::Answer(cmd.refusal_reply(req, bytes).unwrap_or_default());
            }
        }
        if cmd.needs_login && !logged_in {
            return Decision::Answer(NOAUTH.to_vec());
        }
        let args = || req.args(bytes).collect::<Vec<&[u8]>>();
        match cmd.special {
            Special::Auth => self.auth(&args()),
            Special::Hello => self.hello(&args(), up),
            Special::Quit if self.mode == Mode::Unpaired => Decision::Forward(Route::own()),
            Special::Quit => Decision::AnswerAndClose(b"+OK\r\n".to_vec()),
            Special::Reset => Decision::Reset,
            Special::ClientReply(mode) => self.client_reply(cmd, mode),
            Special::ClientSetup if up.is_shared() => match self.setup.client(&args(), self.resp) {
                Some(answer) => Decision::Answer(answer),
                None => Decision::Forward(Route::own()),
            },
            Special::Select if up.is_shared() => {
                match Setup::select(&args(), self.shared.upstream.db()) {
                    Some(answer) => Decision::Answer(answer),
                    None => Decision::Forward(Route::own()),
                }
            }
            Special::Multi => {
                if self.mode == Mode::Paired {
                    self.mode = Mode::Transaction { config_get: false };
                }
                Decision::Forward(Route::of(cmd))
            }
            Special::Exec | Special::Discard => {
                let scrub = matches!(self.mode, Mode::Transaction { config_get: true });
                if let Mode::Transaction { .. } = self.mode {
                    self.mode = Mode::Paired;
                }
                let mut route = Route::of(cmd);
                if scrub && cmd.special == Special::Exec {
                    route.reply = ReplyHandling::ScrubExec;
                }
                Decision::Forward(route)
            }
            Special::ConfigGet => self.config_get(cmd, &args()),
            _ => self.forward_as_is(cmd),
        }
    }

    /// A command forwarded as it is; one after which replies stop pairing cannot join a
    /// transaction that queued a `CONFIG GET` (its `EXEC` reply could not be scrubbed).
    fn forward_as_is(&mut self, cmd: &ClientCommand) -> Decision {
        if !cmd.unpairs {
            return Decision::Forward(Route::of(cmd));
        }
        match self.mode {
            Mode::Transaction { config_get: true } => Decision::Instead(
                refusal("a-command-that-unpairs-replies-in-a-transaction-with-CONFIG-GET"),
                Route::own(),
            ),
            _ => Decision::Forward(Route::of(cmd)),
        }
    }

    /// `CONFIG GET`: its reply scrubbed; queued in a transaction, its `EXEC` reply scrubbed.
    /// Where replies no longer pair its reply cannot be found to scrub: it goes only when no
    /// pattern can name a secret (exact names, none of them a secret's), refused otherwise.
    fn config_get(&mut self, cmd: &ClientCommand, args: &[&[u8]]) -> Decision {
        let mut route = Route::of(cmd);
        match &mut self.mode {
            Mode::Paired => {}
            Mode::Transaction { config_get } => *config_get = true,
            _ if args.iter().skip(2).all(|p| names_no_secret(p)) => {
                return Decision::Forward(route);
            }
            _ => {
                return Decision::Instead(
                    refusal("CONFIG-GET-of-a-pattern-where-replies-do-not-pair"),
                    Route::own(),
                )
            }
        }
        // Inside a transaction the reply is `QUEUED`, which scrubbing leaves alone; scrubbed
        // all the same in case the server is not in the transaction the proxy counts.
        route.reply = ReplyHandling::Scrub;
        Decision::Forward(route)
    }

    /// `AUTH`: answered by the proxy when clients log in at it; otherwise the client logs in
    /// upstream itself, on a connection of its own.
    fn auth(&mut self, args: &[&[u8]]) -> Decision {
        if !self.shared.client_auth().is_required() {
            return Decision::Forward(Route::own());
        }
        if !self.mode.answerable() {
            return Decision::Instead(refusal("AUTH-inside-MULTI-or-pubsub"), Route::own());
        }
        let auth = self.shared.client_auth();
        Decision::Answer(self.login.auth(&auth, args))
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`, checked in Redis's order; what
    /// reaches the upstream has no AUTH part when the proxy checked it.
    fn hello(&mut self, args: &[&[u8]], up: &Up) -> Decision {
        let hello = match Hello::parse(args) {
            Ok(h) => h,
            Err(reply) => return Decision::Answer(reply),
        };
        let proxy_login = self.shared.client_auth().is_required();
        if let (Some((user, password)), true) = (hello.auth, proxy_login) {
            if !self.mode.answerable() {
                let why = "HELLO-AUTH-inside-MULTI-or-pubsub";
                return Decision::Instead(refusal(why), Route::own());
            }
            if !self
                .login
                .log_in(&self.shared.client_auth(), user, password)
            {
                return Decision::Answer(WRONGPASS.to_vec());
            }
        }
        if !self.login.logged_in() {
            return Decision::Answer(HELLO_NOAUTH.to_vec());
        }
        if hello.auth.is_some() && !proxy_login {
            // The client logs in upstream as a user of its own.
            return Decision::Forward(Route::own());
        }
        if !up.is_shared() || !self.mode.answerable() {
            if let (Some(v), true) = (hello.version, self.mode.answerable()) {
                self.resp = RespVersion::of(v);
            }
            return Decision::Instead(hello.encode(true), Route::own());
        }
        if let Some(name) = hello.setname {
            if !self.setup.set_name(name) {
                return Decision::Answer(Setup::bad_name());
            }
        }
        let resp = hello.version.map_or(self.resp, RespVersion::of);
        Decision::Hello(resp, hello.encode(false))
    }

    /// `CLIENT REPLY ON|OFF|SKIP`, carried out by the proxy while replies pair (so the client
    /// keeps sharing and no reply goes missing upstream); forwarded where they do not.
    fn client_reply(&mut self, cmd: &ClientCommand, mode: Option<ReplyMode>) -> Decision {
        if self.mode != Mode::Paired {
            // In a transaction it runs at EXEC, whose reply it then cuts short: nothing pairs
            // after it.
            return self.forward_as_is(&ClientCommand {
                unpairs: true,
                shareable: false,
                ..*cmd
            });
        }
        match mode {
            Some(ReplyMode::On) => {
                self.replies = ReplyControl::default();
                Decision::Answer(b"+OK\r\n".to_vec())
            }
            Some(ReplyMode::Off) => {
                self.replies.off = true;
                Decision::Nothing
            }
            Some(ReplyMode::Skip) => {
                self.replies.skip = !self.replies.off;
                Decision::Nothing
            }
            None => Decision::Answer(b"-ERR syntax error\r\n".to_vec()),
        }
    }
}

/// Whether `CONFIG GET pattern` surely names no secret parameter: no glob character anywhere
/// (Redis looks a name without `[`, `*` or `?` up exactly), and not a secret's name however
/// cased (read up to a NUL byte, as C's `strcasecmp` would).
fn names_no_secret(pattern: &[u8]) -> bool {
    !pattern
        .iter()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        && !SECRET_PARAMETERS.iter().any(|s| c_eq(pattern, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_names_of_no_secret_pass_where_replies_do_not_pair() {
        assert!(names_no_secret(b"notify-keyspace-events") && names_no_secret(b"maxmemory"));
        for secret in [
            &b"requirepass"[..],
            b"MasterAuth",
            b"tls-key-file-pass\0x",
            b"*",
            b"require?ass",
            b"[r]equirepass",
            b"x\0*",
            b"master\\auth",
        ] {
            assert!(!names_no_secret(secret), "{secret:?}");
        }
    }
}

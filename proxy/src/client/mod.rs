//! The client side of the proxy: one task per client connection, which reads the client's
//! requests exactly as redis-server reads them, classifies each once, and forwards it.
//!
//! # The life of a request
//!
//! 1. **Read** ([`requests`]): [`lockkit_resp::RequestParser`], the workspace's one reading of
//!    a client's bytes, finds where the request ends and what its arguments are, with
//!    redis-server 7.0.15's rules byte for byte (a length line ends at its first `\r`, bulk
//!    trailers unchecked, `string2ll`, inline quoting, Redis's limits before login). A
//!    protocol error is answered with Redis's text after the replies owed, then the connection
//!    closes. An empty request (`*0`, `*-1`, a blank inline line) is dropped: Redis answers it
//!    nothing, and no server ever sees it.
//! 2. **Classify** ([`command`]): once, into a [`command::ClientCommand`], from Redis 7.0's
//!    command table ([`table`], generated from a real server): its row, whether Redis would
//!    refuse it before looking at the login (unknown command or subcommand, wrong arity),
//!    whether it needs a login, may share an upstream connection, may block, stops replies
//!    from pairing with commands, is an admin command, may carry secrets in its reply, and
//!    where its first key is.
//! 3. **Decide** ([`decide`]), in Redis's order: an HTTP request closes the connection; the
//!    refusals Redis gives before the login; `-NOAUTH`; then what the proxy carries out itself
//!    (AUTH and HELLO's login, QUIT, RESET, CLIENT REPLY, the set-up commands of client
//!    libraries, CONFIG GET's scrubbing, MULTI's bookkeeping).
//! 4. **Plugins** see the command, with its arguments and first key, and may delay, answer,
//!    close or lose its reply.
//! 5. **Forward**: on a shared upstream connection of the client's protocol while every
//!    command so far meant the same on any connection, on a connection of its own from the
//!    first that does not ([`moves`]); the very bytes read when they are the plain encoding
//!    of the request, its plain encoding otherwise (so the server cannot read it otherwise
//!    than the proxy did).
//! 6. **Reply** ([`replies`]): each reply fills the slot its command left in the queue of owed
//!    replies ([`owed`]): passed on, shown to plugins, scrubbed of secrets ([`secrets`]),
//!    dropped (the client asked for no reply), or the end of a RESET; the proxy's own answers
//!    go out in their turn. After a command whose replies do not pair one-to-one (pub/sub,
//!    MONITOR, replication, the Lua debugger) the bytes flow as they come.
//!
//! Why each decision reads the one classified value: a proxy that frames a request with one
//! reading and checks its arguments with another can be made to check one command and forward
//! another (a length line ended by `\r` and any byte once put `SCRIPT DEBUG YES` and
//! `XREAD BLOCK 0` on the shared connection and showed `CONFIG GET requirepass` unscrubbed),
//! and a command that gets no reply (an empty name skipped before the login check,
//! `REPLCONF GETACK`) shifts every later reply on a shared connection to the wrong client.

pub(crate) mod command;
mod conn;
mod decide;
mod login;
mod metered;
mod moves;
mod owed;
mod replies;
mod requests;
pub(crate) mod secrets;
mod setup;
pub(crate) mod spec;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use conn::serve;

//! `lockkit-resp`: Redis requests read exactly as redis-server 7.0 reads them, for everything
//! in lockkit that reads a client's bytes (the proxy, `lockkit lua serve`).
//!
//! One reading of the bytes, shared, is the point: a proxy that frames a request with one
//! parser and checks its arguments with another can be made to check one thing and forward
//! another. Here the same [`RequestParser`] decides where a request ends, what its arguments
//! are and which protocol error it gets, with Redis 7.0.15's rules and texts byte for byte;
//! and a request whose bytes are not the plain encoding of its arguments is forwarded
//! re-encoded ([`Request::is_canonical`]).
//!
//! Kept so by `tests/it/differential.rs`, a differential fuzz test that runs in every `cargo
//! test`: random and mutated byte streams (CR and LF moved, signs, zeros, huge counts, NULs,
//! quotes, reads split anywhere) go to a real redis-server, logged in and not, and what it
//! answers (each command's reply, the protocol error, the bytes it still holds) must be what
//! this reading predicts; the streams of `tests/corpus/` (each quirk, and any difference a run
//! found) are replayed first.
//!
//! - [`request`]: the reader, its limits and its errors;
//! - [`inline`]: inline requests split into words (`sdssplitargs`);
//! - [`number`]: numbers as Redis reads them (`string2ll`, and C's `strtod`/`strtol`/`atoi`);
//! - [`errors`]: the command-level error texts every server and proxy of ours answers alike;
//! - [`slot`]: Redis Cluster's hash slot of a key (CRC16 and hash tags), for every router of ours.
//!
//! ```
//! use lockkit_resp::{ProtocolError, RequestParser};
//! let mut p = RequestParser::default();
//! // Before login, Redis refuses big requests at their first line.
//! assert_eq!(p.parse(b"*11\r\n", false), Err(ProtocolError::UnauthenticatedMultibulkLength));
//! ```

pub mod errors;
pub mod inline;
pub mod number;
pub mod request;
pub mod slot;

pub use request::{write_multibulk, ProtocolError, Request, RequestLimits, RequestParser};

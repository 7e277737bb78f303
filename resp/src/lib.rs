//! `lockkit-resp`: Redis requests read exactly as redis-server 7.0 reads them, for everything
//! in lockkit that reads a client's bytes (the proxy, `lockkit lua serve`).
//!
//! One reading of the bytes, shared, is the point: a proxy that frames a request with one
//! parser and checks its arguments with another can be made to check one thing and forward
//! another. Here the same [`RequestParser`] decides where a request ends, what its arguments
//! are and which protocol error it gets, with Redis 7.0.15's rules and texts byte for byte
//! (kept by tests that compare against a real redis-server); and a request whose bytes are not
//! the plain encoding of its arguments is forwarded re-encoded ([`Request::is_canonical`]).
//!
//! - [`request`]: the reader, its limits and its errors;
//! - [`inline`]: inline requests split into words (`sdssplitargs`);
//! - [`number`]: integers as Redis reads them (`string2ll`);
//! - [`errors`]: the command-level error texts every server and proxy of ours answers alike.
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

pub use request::{write_multibulk, ProtocolError, Request, RequestLimits, RequestParser};

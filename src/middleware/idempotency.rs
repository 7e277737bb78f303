//! The idempotency store: the first response to an `Idempotency-Key`, kept in Redis and
//! replayed to retries.
//!
//! One Redis string per key, written once with `SET key record NX PX ttl` (never over another
//! record), read with `GET`. The record is a small HTTP-like text head and the raw body:
//!
//! ```text
//! LKIDEM1
//! 201
//! {fingerprint: digest of the request's method, target and body}
//! content-type: application/json
//! {more headers}
//!
//! {body bytes}
//! ```
//! Header values cannot contain line breaks (the `http` crate refuses them), so the head parses
//! back unambiguously; the body is everything after the blank line.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};
use redis::Value;

use crate::error::{Error, Result};
use crate::lock::ttl_ms;
use crate::LockClient;

const MAGIC: &str = "LKIDEM1";

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredResponse {
    pub(crate) status: StatusCode,
    /// The digest of the request that produced it; a retry must match it (else 422).
    pub(crate) fingerprint: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Headers that describe one connection or one transfer, not the response.
fn is_not_stored(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::SET_COOKIE,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

impl StoredResponse {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.body.len());
        out.extend_from_slice(MAGIC.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.fingerprint.as_bytes());
        out.push(b'\n');
        for (name, value) in &self.headers {
            if is_not_stored(name) {
                continue;
            }
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    /// `None` for anything that is not a well-formed record.
    pub(crate) fn decode(raw: &[u8]) -> Option<StoredResponse> {
        let mut rest = raw;
        let mut line = || -> Option<&[u8]> {
            let end = rest.iter().position(|&b| b == b'\n')?;
            let l = &rest[..end];
            rest = &rest[end + 1..];
            Some(l)
        };
        if line()? != MAGIC.as_bytes() {
            return None;
        }
        let status = StatusCode::from_bytes(line()?).ok()?;
        let fingerprint = String::from_utf8(line()?.to_vec()).ok()?;
        let mut headers = HeaderMap::new();
        loop {
            let l = line()?;
            if l.is_empty() {
                break;
            }
            let colon = l.iter().position(|&b| b == b':')?;
            let name = HeaderName::from_bytes(&l[..colon]).ok()?;
            let value = l[colon + 1..].strip_prefix(b" ").unwrap_or(&l[colon + 1..]);
            headers.append(name, HeaderValue::from_bytes(value).ok()?);
        }
        Some(StoredResponse {
            status,
            fingerprint,
            headers,
            body: Bytes::copy_from_slice(rest),
        })
    }
}

/// Reads and writes records over the lock client's connection.
#[derive(Debug, Clone)]
pub(crate) struct IdempotencyStore {
    client: LockClient,
}

impl IdempotencyStore {
    pub(crate) fn new(client: LockClient) -> Self {
        IdempotencyStore { client }
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<StoredResponse>> {
        let mut conn = self.client.conns.conn();
        let reply: Value = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
        match reply {
            Value::Nil => Ok(None),
            Value::BulkString(raw) => match StoredResponse::decode(&raw) {
                Some(r) => Ok(Some(r)),
                None => {
                    tracing::warn!(%key, "ignoring an unreadable idempotency record");
                    Ok(None)
                }
            },
            other => Err(Error::UnexpectedReply {
                what: "GET (idempotency record)",
                reply: format!("{other:?}"),
            }),
        }
    }

    /// Writes `record` unless the key already holds one (`SET NX`): a stored response is never
    /// replaced. `Ok(false)` when another record was there first.
    pub(crate) async fn put_new(
        &self,
        key: &str,
        record: &StoredResponse,
        ttl: Duration,
    ) -> Result<bool> {
        let mut conn = self.client.conns.conn();
        let reply: Value = redis::cmd("SET")
            .arg(key)
            .arg(record.encode())
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms(ttl))
            .query_async(&mut conn)
            .await?;
        match reply {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            other => Err(Error::UnexpectedReply {
                what: "SET NX (idempotency record)",
                reply: format!("{other:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredResponse {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.append("x-multi", "a".parse().unwrap());
        headers.append("x-multi", "b: c".parse().unwrap());
        StoredResponse {
            status: StatusCode::CREATED,
            fingerprint: "lockkit:submit:alice:POST:/orders:00ff".into(),
            headers,
            body: Bytes::from_static(b"{\"id\":1}\n\n\nLKIDEM1\n\xff"),
        }
    }

    #[test]
    fn record_round_trips_with_binary_body() {
        let r = sample();
        assert_eq!(StoredResponse::decode(&r.encode()), Some(r));
    }

    #[test]
    fn transfer_headers_are_not_stored() {
        let mut r = sample();
        r.headers
            .insert(header::CONTENT_LENGTH, "9".parse().unwrap());
        r.headers
            .insert(header::CONNECTION, "keep-alive".parse().unwrap());
        let back = StoredResponse::decode(&r.encode()).unwrap();
        assert_eq!(back.headers, sample().headers);
    }

    #[test]
    fn garbage_is_not_a_record() {
        assert_eq!(StoredResponse::decode(b""), None);
        assert_eq!(StoredResponse::decode(b"hello"), None);
        assert_eq!(StoredResponse::decode(b"LKIDEM1\n999x\nk\n\n"), None);
        assert_eq!(
            StoredResponse::decode(b"LKIDEM1\n201\nk\nno-colon\n\n"),
            None
        );
        assert_eq!(StoredResponse::decode(b"LKIDEM1\n201\nk\n"), None);
    }
}

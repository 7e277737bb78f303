//! What the proxy hands a client never holds the upstream's secrets: in every `CONFIG GET`
//! reply (whatever its patterns: globs, several of them, upper case, cut at a NUL; in RESP2 or
//! RESP3; inside an `EXEC` reply) the values of the secret parameters are blanked, and so is
//! any value equal to the upstream URL's password.
//!
//! The reply is rewritten rather than the patterns judged: Redis decides which parameters a
//! pattern names, and the reply says which ones it did. A reply that cannot be read is
//! withheld (the client gets an error in its place), never passed on unread.

use lockkit::resp::find_crlf;

use crate::resp::{frame_len, reply_kind, ReplyKind};

/// Redis 7.0's parameters whose value is a secret: the password clients log in with, the one
/// a replica logs in to its master with, the passphrases of the TLS keys.
pub(crate) const SECRET_PARAMETERS: [&[u8]; 4] = [
    b"requirepass",
    b"masterauth",
    b"tls-key-file-pass",
    b"tls-client-key-file-pass",
];

/// What replaces a reply the proxy could not read.
const WITHHELD: &[u8] =
    b"-ERR lockkit proxy: a CONFIG GET reply it could not read was withheld\r\n";

/// The secrets to blank besides the parameters' values: the upstream URL's password.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secrets {
    values: Vec<Vec<u8>>,
}

impl Secrets {
    /// The upstream's password, when its URL has one.
    pub(crate) fn new(password: Option<&str>) -> Secrets {
        Secrets {
            values: password
                .filter(|p| !p.is_empty())
                .map(|p| vec![p.as_bytes().to_vec()])
                .unwrap_or_default(),
        }
    }

    fn is_secret_value(&self, value: &[u8]) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// A `CONFIG GET` reply with the secrets blanked (`""`, what a server without them
    /// answers); an error reply as it came.
    pub(crate) fn scrub_config_reply(&self, frame: &[u8]) -> Vec<u8> {
        match frame.first() {
            // An error, or `QUEUED` inside a transaction.
            Some(b'-' | b'!' | b'+') => frame.to_vec(),
            _ => self.scrub_pairs(frame).unwrap_or_else(|| WITHHELD.to_vec()),
        }
    }

    /// An `EXEC` reply whose elements that are arrays or maps of name and value pairs (the
    /// `CONFIG GET` replies among them) have their secrets blanked.
    pub(crate) fn scrub_exec_reply(&self, frame: &[u8]) -> Vec<u8> {
        if frame.first() != Some(&b'*') {
            // An error (EXECABORT), or RESP3's null for a WATCH that failed: nothing ran.
            return frame.to_vec();
        }
        let Some((_, n, head)) = header(frame) else {
            return WITHHELD.to_vec();
        };
        if n < 0 {
            return frame.to_vec();
        }
        let mut out = frame[..head].to_vec();
        let mut pos = head;
        for _ in 0..n {
            let Ok(Some(len)) = frame_len(&frame[pos..]) else {
                return WITHHELD.to_vec();
            };
            let item = &frame[pos..pos + len];
            match item.first() {
                Some(b'*' | b'%') => match self.scrub_pairs(item) {
                    Some(clean) => out.extend_from_slice(&clean),
                    None => out.extend_from_slice(item),
                },
                _ => out.extend_from_slice(item),
            }
            pos += len;
        }
        out.extend_from_slice(&frame[pos..]);
        out
    }

    /// An array (RESP2) or map (RESP3) of name and value pairs with the secret values blanked;
    /// `None` when it is not one.
    fn scrub_pairs(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let (kind, n, head) = header(frame)?;
        let items = match kind {
            b'*' => n,
            b'%' => 2 * n,
            _ => return None,
        };
        let mut out = frame[..head].to_vec();
        let mut pos = head;
        let mut secret_next = false;
        for i in 0..items.max(0) {
            let len = frame_len(frame.get(pos..)?).ok()??;
            let item = &frame[pos..pos + len];
            let value = match reply_kind(item) {
                ReplyKind::Bulk(b) => Some(b),
                _ => None,
            };
            if i % 2 == 1 && (secret_next || value.is_some_and(|v| self.is_secret_value(v))) {
                out.extend_from_slice(b"$0\r\n\r\n");
            } else {
                out.extend_from_slice(item);
            }
            secret_next = i % 2 == 0
                && value.is_some_and(|name| {
                    SECRET_PARAMETERS
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(name))
                });
            pos += len;
        }
        out.extend_from_slice(&frame[pos..]);
        Some(out)
    }
}

/// An aggregate's kind, count and header length.
fn header(frame: &[u8]) -> Option<(u8, i64, usize)> {
    let kind = *frame.first()?;
    let end = find_crlf(frame, 0)?;
    let n = crate::resp::parse_int(&frame[1..end])?;
    Some((kind, n, end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_blanked_in_both_protocols() {
        let s = Secrets::new(None);
        let resp2 = b"*4\r\n$11\r\nrequirepass\r\n$2\r\npw\r\n$4\r\nport\r\n$2\r\n70\r\n";
        assert_eq!(
            s.scrub_config_reply(resp2),
            b"*4\r\n$11\r\nrequirepass\r\n$0\r\n\r\n$4\r\nport\r\n$2\r\n70\r\n"
        );
        let resp3 =
            b"%2\r\n$10\r\nMASTERAUTH\r\n$2\r\npw\r\n$17\r\ntls-key-file-pass\r\n$1\r\nk\r\n";
        assert_eq!(
            s.scrub_config_reply(resp3),
            b"%2\r\n$10\r\nMASTERAUTH\r\n$0\r\n\r\n$17\r\ntls-key-file-pass\r\n$0\r\n\r\n"
        );
        assert_eq!(s.scrub_config_reply(b"-ERR x\r\n"), b"-ERR x\r\n");
        assert_eq!(s.scrub_config_reply(b"*2\r\n$1\r\na"), WITHHELD);
    }

    #[test]
    fn the_urls_password_is_blanked_wherever_it_is_a_value() {
        let s = Secrets::new(Some("pw"));
        let reply = b"*2\r\n$10\r\nmasteruser\r\n$2\r\npw\r\n";
        assert_eq!(
            s.scrub_config_reply(reply),
            b"*2\r\n$10\r\nmasteruser\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn exec_replies_are_scrubbed_element_by_element() {
        let s = Secrets::new(None);
        let exec = b"*3\r\n+OK\r\n*2\r\n$11\r\nrequirepass\r\n$2\r\npw\r\n:1\r\n";
        assert_eq!(
            s.scrub_exec_reply(exec),
            b"*3\r\n+OK\r\n*2\r\n$11\r\nrequirepass\r\n$0\r\n\r\n:1\r\n"
        );
        assert_eq!(s.scrub_exec_reply(b"*-1\r\n"), b"*-1\r\n");
        assert_eq!(s.scrub_exec_reply(b"-EXECABORT x\r\n"), b"-EXECABORT x\r\n");
    }
}

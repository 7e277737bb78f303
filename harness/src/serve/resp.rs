//! RESP for the server side: replies in RESP2 or RESP3. Requests are read by
//! `lockkit_resp::RequestParser`, the one reader of the workspace (Redis's
//! `processMultibulkBuffer`/`processInlineBuffer`, its limits before login, its error texts).

use crate::reply::Reply;

/// Appends `reply` to `out` in RESP2 (`resp3 == false`) or RESP3.
pub fn encode(reply: &Reply, resp3: bool, out: &mut Vec<u8>) {
    match reply {
        Reply::Status(s) => line(out, b'+', s.as_bytes()),
        Reply::Error(e) => line(out, b'-', e.as_bytes()),
        Reply::Int(i) => line(out, b':', i.to_string().as_bytes()),
        Reply::Bulk(b) => {
            line(out, b'$', b.len().to_string().as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Array(items) => {
            line(out, b'*', items.len().to_string().as_bytes());
            for i in items {
                encode(i, resp3, out);
            }
        }
        Reply::Map(pairs) if resp3 => {
            line(out, b'%', pairs.len().to_string().as_bytes());
            for (k, v) in pairs {
                encode(k, resp3, out);
                encode(v, resp3, out);
            }
        }
        Reply::Double(d) if resp3 => {
            line(out, b',', crate::number::format_double_reply(*d).as_bytes());
        }
        Reply::Bool(b) if resp3 => line(out, b'#', if *b { b"t" } else { b"f" }),
        Reply::BigNumber(n) if resp3 => line(out, b'(', n.as_bytes()),
        Reply::Verbatim(format, text) if resp3 => {
            line(
                out,
                b'=',
                (format.len() + 1 + text.len()).to_string().as_bytes(),
            );
            out.extend_from_slice(format.as_bytes());
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Set(items) if resp3 => {
            line(out, b'~', items.len().to_string().as_bytes());
            for i in items {
                encode(i, resp3, out);
            }
        }
        other => encode(&other.clone().into_resp2(), resp3, out),
    }
}

fn line(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    // A status or error line cannot carry a newline (Redis replaces them with spaces).
    out.extend(
        body.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_encode_in_resp2_and_resp3() {
        let r = Reply::Array(vec![
            Reply::Nil,
            Reply::Map(vec![(Reply::bulk("a"), Reply::Double(1.5))]),
        ]);
        let mut two = Vec::new();
        encode(&r, false, &mut two);
        assert_eq!(two, b"*2\r\n$-1\r\n*2\r\n$1\r\na\r\n$3\r\n1.5\r\n");
        let mut three = Vec::new();
        encode(&r, true, &mut three);
        assert_eq!(three, b"*2\r\n_\r\n%1\r\n$1\r\na\r\n,1.5\r\n");
    }
}

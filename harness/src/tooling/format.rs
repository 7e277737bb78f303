//! Printing replies byte for byte as `redis-cli --no-raw` does (`cliFormatReplyTTY`).

use crate::reply::Reply;

/// A string quoted as redis-cli's `sdscatrepr` does: `"..."` with `\\ \" \n \r \t \a \b`
/// escaped and other non-printable bytes as `\xHH`.
pub fn repr(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() + 2);
    s.push('"');
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            7 => s.push_str("\\a"),
            8 => s.push_str("\\b"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

/// The reply as redis-cli prints it, ending in a newline.
///
/// ```
/// use lockkit_harness::{tooling::format::format_reply, Reply};
/// let r = Reply::Array(vec![Reply::Int(1), Reply::Array(vec![Reply::Nil]), Reply::bulk("a\n")]);
/// assert_eq!(format_reply(&r), "1) (integer) 1\n2) 1) (nil)\n3) \"a\\n\"\n");
/// ```
pub fn format_reply(r: &Reply) -> String {
    let mut out = String::new();
    format_into(&mut out, &r.clone().into_resp2(), "");
    out
}

fn format_into(out: &mut String, r: &Reply, prefix: &str) {
    match r {
        Reply::Error(e) => {
            out.push_str("(error) ");
            out.push_str(e);
            out.push('\n');
        }
        Reply::Status(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Reply::Int(i) => out.push_str(&format!("(integer) {i}\n")),
        Reply::Bulk(b) => {
            out.push_str(&repr(b));
            out.push('\n');
        }
        Reply::Nil => out.push_str("(nil)\n"),
        Reply::Array(items) if items.is_empty() => out.push_str("(empty array)\n"),
        Reply::Array(items) => {
            let idxlen = items.len().to_string().len();
            let child_prefix = format!("{prefix}{}", " ".repeat(idxlen + 2));
            for (i, item) in items.iter().enumerate() {
                let p = if i == 0 { "" } else { prefix };
                out.push_str(&format!("{p}{:>idxlen$}) ", i + 1));
                format_into(out, item, &child_prefix);
            }
        }
        // into_resp2 removed these.
        Reply::Map(_)
        | Reply::Double(_)
        | Reply::Bool(_)
        | Reply::BigNumber(_)
        | Reply::Verbatim(..)
        | Reply::Set(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_arrays_indent_by_index_width() {
        let items: Vec<Reply> = (1..=10).map(Reply::Int).collect();
        let r = Reply::Array(vec![Reply::Array(items), Reply::Status("OK".into())]);
        let text = format_reply(&r);
        assert!(
            text.starts_with("1)  1) (integer) 1\n    2) (integer) 2\n"),
            "{text}"
        );
        assert!(text.contains("\n   10) (integer) 10\n2) OK\n"), "{text}");
    }

    #[test]
    fn scalars() {
        assert_eq!(format_reply(&Reply::err("ERR x")), "(error) ERR x\n");
        assert_eq!(format_reply(&Reply::Array(vec![])), "(empty array)\n");
        assert_eq!(format_reply(&Reply::bulk(b"\x01\"")), "\"\\x01\\\"\"\n");
        assert_eq!(format_reply(&Reply::Double(1.5)), "\"1.5\"\n");
    }
}

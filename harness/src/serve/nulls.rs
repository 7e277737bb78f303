//! Null arrays: the commands whose "nothing" Redis 7.0 writes as a null array (`*-1` in
//! RESP2; `_` in RESP3, like every null) where others write a null bulk string (`$-1`), and
//! EXEC's reply, which carries each queued command's null as that command writes it.

use super::resp;
use crate::commands::is;
use crate::reply::Reply;

/// Whether `argv`'s null reply is a null array: XREAD's, XREADGROUP's, the blocking pops'
/// (on timeout, or inside MULTI where they do not block), LMPOP's, ZMPOP's and a counted
/// LPOP's / RPOP's (`addReplyNullArray` in Redis).
pub(super) fn null_is_array(argv: &[Vec<u8>]) -> bool {
    let Some(name) = argv.first() else {
        return false;
    };
    [
        "xread",
        "xreadgroup",
        "lmpop",
        "zmpop",
        "blpop",
        "brpop",
        "blmpop",
        "bzpopmin",
        "bzpopmax",
        "bzmpop",
    ]
    .iter()
    .any(|n| is(name, n))
        || (argv.len() == 3 && (is(name, "lpop") || is(name, "rpop")))
}

/// For EXEC: which of its `replies` are nulls that are null arrays, `arrays[i]` telling
/// whether the `i`th queued command's null is one (empty when none is, the common case).
pub(super) fn exec_null_arrays(arrays: &[bool], replies: &[Reply]) -> Vec<bool> {
    let marked: Vec<bool> = arrays
        .iter()
        .zip(replies)
        .map(|(&array, r)| array && matches!(r, Reply::Nil))
        .collect();
    if marked.contains(&true) {
        marked
    } else {
        Vec::new()
    }
}

/// Appends EXEC's `reply` with the null arrays `arrays` marks (RESP2; RESP3's null is one).
pub(super) fn encode_exec(reply: &Reply, arrays: &[bool], resp3: bool, out: &mut Vec<u8>) {
    match reply {
        Reply::Array(items) if !resp3 => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for (i, item) in items.iter().enumerate() {
                if arrays.get(i) == Some(&true) {
                    out.extend_from_slice(b"*-1\r\n");
                } else {
                    resp::encode(item, resp3, out);
                }
            }
        }
        other => resp::encode(other, resp3, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn exec_writes_each_null_as_its_command_does() {
        let queued = [
            argv(&["LPOP", "k", "2"]),
            argv(&["GET", "k"]),
            argv(&["BLPOP", "k", "0"]),
        ];
        let nils = vec![Reply::Nil, Reply::Nil, Reply::Nil];
        let may: Vec<bool> = queued.iter().map(|a| null_is_array(a)).collect();
        let arrays = exec_null_arrays(&may, &nils);
        let reply = Reply::Array(nils);
        assert_eq!(arrays, [true, false, true]);
        let mut two = Vec::new();
        encode_exec(&reply, &arrays, false, &mut two);
        assert_eq!(two, b"*3\r\n*-1\r\n$-1\r\n*-1\r\n");
        let mut three = Vec::new();
        encode_exec(&reply, &arrays, true, &mut three);
        assert_eq!(three, b"*3\r\n_\r\n_\r\n_\r\n");
        assert!(exec_null_arrays(&may[1..2], &[Reply::Nil]).is_empty());
        assert!(exec_null_arrays(&may, &[Reply::Int(1)]).is_empty());
    }
}

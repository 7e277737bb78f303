//! Errors about a command that Redis 7.0 words the same whoever answers them: a proxy that
//! answers a command itself (an empty name, an unknown one before login) answers these texts.

/// Redis's `%.Ns` on a C string: at most `max` bytes, up to the first NUL.
fn c_prefix(b: &[u8], max: usize) -> &[u8] {
    let b = &b[..b.len().min(max)];
    match b.iter().position(|&c| c == 0) {
        Some(nul) => &b[..nul],
        None => b,
    }
}

/// Redis replaces CR and LF in an error reply with spaces (`rejectCommandFormat`).
fn no_newlines(mut s: Vec<u8>) -> Vec<u8> {
    for b in &mut s {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    s
}

/// The reply to a command whose name Redis does not know, `-ERR unknown command ...\r\n`, as
/// redis-server 7.0.15 writes it (the name cut at 128 bytes; arguments quoted while the list
/// is under 128 bytes; each cut at a NUL).
///
/// ```
/// use lockkit_resp::errors::unknown_command;
/// assert_eq!(unknown_command(&[&b""[..]]), b"-ERR unknown command '', with args beginning with: \r\n");
/// assert_eq!(
///     unknown_command(&[&b"nosuch"[..], b"a\0b", b"c\r\nd"]),
///     b"-ERR unknown command 'nosuch', with args beginning with: 'a' 'c  d' \r\n"
/// );
/// ```
#[must_use]
pub fn unknown_command(args: &[&[u8]]) -> Vec<u8> {
    let Some((name, rest)) = args.split_first() else {
        return Vec::new();
    };
    let mut list = Vec::new();
    for a in rest {
        if list.len() >= 128 {
            break;
        }
        list.push(b'\'');
        list.extend_from_slice(c_prefix(a, 128 - list.len() + 1));
        list.extend_from_slice(b"' ");
    }
    let mut s = b"unknown command '".to_vec();
    s.extend_from_slice(c_prefix(name, 128));
    s.extend_from_slice(b"', with args beginning with: ");
    s.extend_from_slice(&list);
    let mut out = b"-ERR ".to_vec();
    out.extend(no_newlines(s));
    out.extend_from_slice(b"\r\n");
    out
}

/// The reply to a container command (`CONFIG`, `CLIENT`, ...) with a subcommand Redis does not
/// know, `-ERR unknown subcommand '...'. Try NAME HELP.\r\n`, as redis-server 7.0.15 writes it
/// (the subcommand cut at 128 bytes and at a NUL, the container's name upper-cased as sent).
///
/// ```
/// use lockkit_resp::errors::unknown_subcommand;
/// assert_eq!(unknown_subcommand(b"conFig", b"a\r\nb"), b"-ERR unknown subcommand 'a  b'. Try CONFIG HELP.\r\n");
/// ```
#[must_use]
pub fn unknown_subcommand(container: &[u8], sub: &[u8]) -> Vec<u8> {
    let mut s = b"unknown subcommand '".to_vec();
    s.extend_from_slice(c_prefix(sub, 128));
    s.extend_from_slice(b"'. Try ");
    s.extend(
        c_prefix(container, usize::MAX)
            .iter()
            .map(u8::to_ascii_uppercase),
    );
    s.extend_from_slice(b" HELP.");
    let mut out = b"-ERR ".to_vec();
    out.extend(no_newlines(s));
    out.extend_from_slice(b"\r\n");
    out
}

/// The reply to a command with the wrong number of arguments for its arity,
/// `-ERR wrong number of arguments for 'NAME' command\r\n`; `full_name` is Redis's own
/// (lower case, `config|get` for a subcommand).
///
/// ```
/// use lockkit_resp::errors::wrong_number_of_arguments;
/// assert_eq!(wrong_number_of_arguments("config|get"), b"-ERR wrong number of arguments for 'config|get' command\r\n");
/// ```
#[must_use]
pub fn wrong_number_of_arguments(full_name: &str) -> Vec<u8> {
    format!("-ERR wrong number of arguments for '{full_name}' command\r\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_list_is_cut_as_redis_cuts_it() {
        // Observed on redis-server 7.0.15: 100 a's, then 25 b's, then nothing more.
        let a = vec![b'a'; 100];
        let b = vec![b'b'; 100];
        let got = unknown_command(&[b"nosuch", &a, &b, b"c"]);
        let want = format!(
            "-ERR unknown command 'nosuch', with args beginning with: '{}' '{}' \r\n",
            "a".repeat(100),
            "b".repeat(25)
        );
        assert_eq!(String::from_utf8(got).unwrap(), want);
        let long = vec![b'n'; 200];
        let got = unknown_command(&[&long]);
        assert!(String::from_utf8(got)
            .unwrap()
            .contains(&format!("'{}'", "n".repeat(128))));
    }
}

//! Folding lock keys into patterns: `order:42:lock` and `order:43:lock` are one lock kind,
//! `order:{id}:lock`.

/// The pattern of `key`: separators (`: / . | # = , { }` and spaces) stay, every part between
/// them that is a number, a UUID, hex of 8 or more digits, or a word with digits in it becomes
/// `{id}`.
///
/// ```
/// use lockkit_proxy::observe::fold_key;
/// assert_eq!(fold_key(b"order:42:lock"), "order:{id}:lock");
/// assert_eq!(fold_key(b"lock:user/6f1c2a9e-8b3d-4c1e-9f00-1a2b3c4d5e6f"), "lock:user/{id}");
/// assert_eq!(fold_key(b"{tenant7}:job:nightly"), "{{id}}:job:nightly");
/// assert_eq!(fold_key(b"cron.tick"), "cron.tick");
/// ```
pub fn fold_key(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    let mut out = String::with_capacity(text.len());
    let mut part = String::new();
    for c in text.chars() {
        if is_separator(c) {
            fold_part(&part, &mut out);
            part.clear();
            out.push(c);
        } else {
            part.push(c);
        }
    }
    fold_part(&part, &mut out);
    out
}

fn is_separator(c: char) -> bool {
    matches!(
        c,
        ':' | '/' | '.' | '|' | '#' | '=' | ',' | '{' | '}' | ' ' | '@'
    )
}

fn fold_part(part: &str, out: &mut String) {
    if is_id(part) {
        out.push_str("{id}");
    } else {
        out.push_str(part);
    }
}

/// Whether a part of a key is an identifier rather than a fixed word.
fn is_id(part: &str) -> bool {
    if part.is_empty() {
        return false;
    }
    let digits = part.chars().filter(char::is_ascii_digit).count();
    if digits == part.len() {
        return true;
    }
    let hexish = part.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if hexish && part.len() >= 8 && digits > 0 {
        return true;
    }
    // `user42`, `job_2024_01`, `a1b2`: a digit inside a word names one of many.
    digits > 0
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_fold_and_words_stay() {
        let cases: [(&[u8], &str); 8] = [
            (b"lock:orders:42", "lock:orders:{id}"),
            (b"lock:orders:43", "lock:orders:{id}"),
            (b"invoice:deadbeef00:pdf", "invoice:{id}:pdf"),
            (b"session:user42", "session:{id}"),
            (b"lockkit:bench:7", "lockkit:bench:{id}"),
            (b"lock", "lock"),
            (b"a-b", "a-b"),
            (b"", ""),
        ];
        for (key, pattern) in cases {
            assert_eq!(fold_key(key), pattern, "{key:?}");
        }
    }

    #[test]
    fn binary_keys_do_not_panic() {
        assert_eq!(fold_key(b"lock:\xff\xfe:1"), "lock:\u{fffd}\u{fffd}:{id}");
    }
}

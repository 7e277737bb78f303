//! Which keys a request names, read from the one parsed request and its row of Redis's table
//! (first, last and step of its keys; the commands whose keys move with their arguments are
//! read as Redis reads them), and the slot they hash to ([`lockkit::key_slot`], hash tags as
//! Redis computes them).

use lockkit_resp::number::string2ll;
use lockkit_resp::Request;

use crate::client::spec::CommandSpec;

/// Where a request goes, by its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Keys {
    /// It names no key.
    None,
    /// All its keys hash to this slot.
    Slot(u16),
    /// Its keys hash to several slots: the argument index of each key.
    Cross(Vec<usize>),
}

/// A count argument as Redis reads it (`numkeys`), when positive and in range.
fn count(req: &Request, buf: &[u8], at: usize) -> Option<usize> {
    let n = string2ll(req.arg(buf, at)?)?;
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// The argument indexes of the keys of `row` in `req`.
pub(crate) fn key_positions(row: &CommandSpec, req: &Request, buf: &[u8]) -> Vec<usize> {
    let argc = req.argc();
    let upto = |from: usize, n: usize| (from..(from + n).min(argc)).collect::<Vec<_>>();
    match row.name {
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {
            count(req, buf, 2).map_or_else(Vec::new, |n| upto(3, n))
        }
        "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" | "SINTERCARD" | "LMPOP" | "ZMPOP" => {
            count(req, buf, 1).map_or_else(Vec::new, |n| upto(2, n))
        }
        "BLMPOP" | "BZMPOP" => count(req, buf, 2).map_or_else(Vec::new, |n| upto(3, n)),
        "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" => {
            let mut keys = vec![1];
            if let Some(n) = count(req, buf, 2) {
                keys.extend(upto(3, n));
            }
            keys
        }
        "XREAD" | "XREADGROUP" => {
            let streams = (1..argc).find(|&i| {
                req.arg(buf, i)
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"STREAMS"))
            });
            match streams {
                Some(s) => {
                    let n = (argc - s - 1) / 2;
                    upto(s + 1, n)
                }
                None => Vec::new(),
            }
        }
        _ => {
            let first = usize::try_from(row.first_key).unwrap_or(0);
            if first == 0 || first >= argc {
                return Vec::new();
            }
            let last = if row.last_key < 0 {
                let back = usize::try_from(-row.last_key).unwrap_or(1);
                argc.saturating_sub(back)
            } else {
                usize::try_from(row.last_key).unwrap_or(first).min(argc - 1)
            };
            let step = usize::try_from(row.key_step).unwrap_or(1).max(1);
            (first..=last.max(first)).step_by(step).collect()
        }
    }
}

/// Where `req`'s keys (at `positions`) hash.
pub(crate) fn keys_of(positions: &[usize], req: &Request, buf: &[u8]) -> Keys {
    let mut slot = None;
    let mut cross = false;
    for &i in positions {
        let s = lockkit::key_slot(req.arg(buf, i).unwrap_or_default());
        match slot {
            None => slot = Some(s),
            Some(prev) if prev != s => cross = true,
            Some(_) => {}
        }
    }
    match slot {
        None => Keys::None,
        Some(_) if cross => Keys::Cross(positions.to_vec()),
        Some(s) => Keys::Slot(s),
    }
}

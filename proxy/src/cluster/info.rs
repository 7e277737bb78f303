//! `INFO` in front of a cluster: every master's, made one. The first master's text is the
//! frame; the counters that add up across nodes are the sums over all masters: the `Stats`
//! counters and blocked clients of [`SUMMED`], each `dbN` line of `Keyspace` (keys and expires; `avg_ttl` the
//! first master's), each `cmdstat_*` line of `Commandstats` (calls, usec, rejected and failed
//! calls; `usec_per_call` worked out again) and each `errorstat_*` line of `Errorstats`.
//! Everything else (memory, clients, server, replication) is the first master's, and
//! `cluster_enabled` reads `0`.

use std::collections::BTreeMap;

/// `Stats` fields (and the blocked clients of `Clients`) summed over the masters.
pub(crate) const SUMMED: [&str; 17] = [
    "blocked_clients",
    "clients_in_timeout_table",
    "total_connections_received",
    "total_commands_processed",
    "instantaneous_ops_per_sec",
    "total_net_input_bytes",
    "total_net_output_bytes",
    "rejected_connections",
    "expired_keys",
    "evicted_keys",
    "keyspace_hits",
    "keyspace_misses",
    "total_error_replies",
    "total_reads_processed",
    "total_writes_processed",
    "expired_time_cap_reached_count",
    "unexpected_error_replies",
];

/// The sections whose lines are `name:a=1,b=2,...`, summed field by field per name.
const SUMMED_LINES: [&str; 3] = ["keyspace", "commandstats", "errorstats"];

/// A bulk or verbatim string's text, and its header (`None`: not a string reply).
fn text(reply: &[u8]) -> Option<(&str, bool)> {
    let verbatim = match reply.first() {
        Some(b'$') => false,
        Some(b'=') => true,
        _ => return None,
    };
    let end = lockkit::resp::find_crlf(reply, 0)?;
    let body = reply.get(end + 2..reply.len().checked_sub(2)?)?;
    let body = if verbatim { body.get(4..)? } else { body };
    Some((std::str::from_utf8(body).ok()?, verbatim))
}

/// Sums of the fields of one `name:a=1,b=2` line, in the order first seen.
#[derive(Default)]
struct Line {
    fields: Vec<(String, f64)>,
}

impl Line {
    fn add(&mut self, value: &str) {
        for kv in value.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v: f64 = v.parse().unwrap_or(0.0);
            match self.fields.iter_mut().find(|(n, _)| n == k) {
                // avg_ttl is not a count: the first master's.
                Some((n, sum)) if n != "avg_ttl" => *sum += v,
                Some(_) => {}
                None => self.fields.push((k.to_string(), v)),
            }
        }
    }

    fn show(&self) -> String {
        let get = |k: &str| self.fields.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let shown: Vec<String> = (self.fields.iter())
            .map(|(k, v)| {
                if k == "usec_per_call" {
                    let calls = get("calls").unwrap_or(0.0);
                    let per = if calls > 0.0 {
                        get("usec").unwrap_or(0.0) / calls
                    } else {
                        0.0
                    };
                    format!("{k}={per:.2}")
                } else {
                    format!("{k}={}", *v as i64)
                }
            })
            .collect();
        shown.join(",")
    }
}

/// The masters' `INFO` replies made one (the first one when none is a string).
pub(crate) fn merge(replies: &[Vec<u8>]) -> Vec<u8> {
    let texts: Vec<(&str, bool)> = replies.iter().filter_map(|r| text(r)).collect();
    let Some(&(first, verbatim)) = texts.first() else {
        return replies.first().cloned().unwrap_or_default();
    };
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    let mut lines: BTreeMap<(&str, &str), Line> = BTreeMap::new();
    let mut order: Vec<(&str, &str)> = Vec::new();
    for (t, _) in &texts {
        let mut section = "";
        for l in t.lines() {
            if let Some(name) = l.strip_prefix("# ") {
                section = SUMMED_LINES
                    .iter()
                    .find(|s| s.eq_ignore_ascii_case(name.trim()))
                    .copied()
                    .unwrap_or("");
                continue;
            }
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            if !section.is_empty() {
                if !lines.contains_key(&(section, k)) {
                    order.push((section, k));
                }
                lines.entry((section, k)).or_default().add(v);
            } else if SUMMED.contains(&k) {
                *sums.entry(k).or_default() += v.trim().parse::<i64>().unwrap_or(0);
            }
        }
    }
    let mut out = String::with_capacity(first.len() + 64);
    let mut section = "";
    for l in first.lines() {
        if let Some(name) = l.strip_prefix("# ") {
            // The lines of a summed section come all at its end.
            flush_section(&mut out, section, &order, &lines);
            section = SUMMED_LINES
                .iter()
                .find(|s| s.eq_ignore_ascii_case(name.trim()))
                .copied()
                .unwrap_or("");
            out.push_str(l);
            out.push_str("\r\n");
            continue;
        }
        match l.split_once(':') {
            Some(_) if !section.is_empty() => {}
            Some((k, _)) if sums.contains_key(k) => {
                out.push_str(&format!("{k}:{}\r\n", sums[k]));
            }
            Some(("cluster_enabled", _)) => out.push_str("cluster_enabled:0\r\n"),
            _ => {
                out.push_str(l);
                out.push_str("\r\n");
            }
        }
    }
    flush_section(&mut out, section, &order, &lines);
    let body = if verbatim { format!("txt:{out}") } else { out };
    let mut reply = format!("{}{}\r\n", if verbatim { '=' } else { '$' }, body.len()).into_bytes();
    reply.extend_from_slice(body.as_bytes());
    reply.extend_from_slice(b"\r\n");
    reply
}

/// The summed lines of `section` (nothing for another section).
fn flush_section(
    out: &mut String,
    section: &str,
    order: &[(&str, &str)],
    lines: &BTreeMap<(&str, &str), Line>,
) {
    if section.is_empty() {
        return;
    }
    // Before the blank line that ends the section.
    let blank = out.ends_with("\r\n\r\n");
    if blank {
        out.truncate(out.len() - 2);
    }
    for key in order.iter().filter(|(s, _)| *s == section) {
        out.push_str(&format!("{}:{}\r\n", key.1, lines[key].show()));
    }
    if blank {
        out.push_str("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(t: &str) -> Vec<u8> {
        format!("${}\r\n{t}\r\n", t.len()).into_bytes()
    }

    #[test]
    fn counters_add_up_over_the_masters() {
        let a = "# Stats\r\ntotal_commands_processed:10\r\nexpired_keys:1\r\n\r\n# Cluster\r\ncluster_enabled:1\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=500\r\n";
        let b = "# Stats\r\ntotal_commands_processed:5\r\nexpired_keys:2\r\n\r\n# Cluster\r\ncluster_enabled:1\r\n\r\n# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=0\r\n";
        let m = merge(&[bulk(a), bulk(b)]);
        let (t, _) = text(&m).unwrap();
        assert!(t.contains("total_commands_processed:15\r\n"), "{t}");
        assert!(t.contains("expired_keys:3\r\n"), "{t}");
        assert!(t.contains("cluster_enabled:0\r\n"), "{t}");
        assert!(t.contains("db0:keys=7,expires=1,avg_ttl=500\r\n"), "{t}");
        let c = "# Commandstats\r\ncmdstat_set:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n";
        let d = "# Commandstats\r\ncmdstat_set:calls=3,usec=5,usec_per_call=1.67,rejected_calls=1,failed_calls=0\r\ncmdstat_get:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n";
        let m = merge(&[bulk(c), bulk(d)]);
        let (t, _) = text(&m).unwrap();
        assert!(
            t.contains("cmdstat_set:calls=5,usec=15,usec_per_call=3.00,rejected_calls=1,failed_calls=0\r\n"),
            "{t}"
        );
        assert!(t.contains("cmdstat_get:calls=1,"), "{t}");
    }
}

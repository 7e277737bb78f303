//! The target's metadata (version, mode) and CPU counters, and this process's CPU time.

use std::time::Duration;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

/// What the server says about itself.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    /// `redis_version`.
    pub version: String,
    /// `redis_mode` (standalone, cluster, sentinel).
    pub mode: String,
    /// `process_id`.
    pub pid: Option<u32>,
}

/// A plain connection for metadata (the measured calls all go through the lock library).
pub async fn info_connection(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let redacted = lockkit::redact_url(url);
    let info = lockkit::parse_url(url).map_err(lockkit_report::exit::bad_input)?;
    // No CLIENT SETINFO: a proxy such as twemproxy closes the connection on it.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = redis::Client::open(info.set_redis_settings(settings)).map_err(|e| {
        lockkit_report::exit::bad_input(format!("`{redacted}` is not a valid Redis URL: {e}"))
    })?;
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .map_err(|e| {
            lockkit_report::exit::unreachable(format!(
                "connecting to {redacted}: {}",
                throwaway_hint(connect_hint(&e.to_string()))
            ))
        })
}

/// `bench` starts a throwaway server when no URL is given: say so after a refused connection
/// (only `bench` does this, so only `bench` suggests it).
pub fn throwaway_hint(hint: String) -> String {
    if hint.to_ascii_lowercase().contains("refused") {
        format!("{hint} (or omit --url to measure a throwaway local one)")
    } else {
        hint
    }
}

/// A short hint for a connection error's message.
pub fn connect_hint(msg: &str) -> String {
    // One line: some redis-rs errors (a parse error on a non-Redis port) span several.
    let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    let m = msg.to_ascii_lowercase();
    let hint = if m.contains("wrongpass") || m.contains("noauth") || m.contains("auth") {
        "check the user and password in the URL (redis://user:password@host:port)"
    } else if m.contains("refused") {
        "is the server running on that host and port?"
    } else if m.contains("parse error") || m.contains("incompatible type") {
        "that port does not speak the Redis protocol; check the host and port"
    } else if m.contains("timed out") || m.contains("timeout") {
        "the server did not answer in 2 s; check the host, port and firewall"
    } else {
        "is this a Redis server? check the scheme (redis://, rediss://), host and port"
    };
    format!("{msg}; {hint}")
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// `INFO server`; a target that closes the connection on `INFO` (twemproxy does) is a proxy.
pub async fn server_info(conn: &mut MultiplexedConnection) -> anyhow::Result<ServerInfo> {
    let info: String = match redis::cmd("INFO").arg("server").query_async(conn).await {
        Ok(info) => info,
        Err(e) if e.is_connection_dropped() || e.is_unrecoverable_error() => {
            return Ok(ServerInfo {
                version: "unknown (INFO refused)".into(),
                mode: "proxy".into(),
                pid: None,
            })
        }
        Err(e) => {
            return Err(anyhow::anyhow!("{}", connect_hint(&e.to_string())))
                .context("reading INFO server")
        }
    };
    Ok(ServerInfo {
        version: field(&info, "redis_version").unwrap_or("unknown").into(),
        mode: field(&info, "redis_mode").unwrap_or("standalone").into(),
        pid: field(&info, "process_id").and_then(|p| p.parse().ok()),
    })
}

/// The server's CPU seconds (user + sys) from `INFO cpu`; `None` if the server hides it.
pub async fn server_cpu(conn: &mut MultiplexedConnection) -> Option<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let user: f64 = field(&info, "used_cpu_user")?.parse().ok()?;
    let sys: f64 = field(&info, "used_cpu_sys")?.parse().ok()?;
    Some(user + sys)
}

/// This process's CPU seconds (user + sys, all threads) from /proc/self/stat; `None` elsewhere.
pub fn own_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at ") ".
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture lockkit runs on.
    Some((utime + stime) / 100.0)
}

/// Host and port of a `redis://` / `rediss://` URL, for redis-benchmark.
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("redis://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let hostport = authority.rsplit('@').next()?;
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, p.parse().ok()?),
        _ => (hostport, 6379),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((
        if host.is_empty() { "127.0.0.1" } else { host }.to_string(),
        port,
    ))
}

/// The password of a URL, if any (for redis-benchmark's `-a`; never printed).
pub fn password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    let pw = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    (!pw.is_empty()).then(|| pw.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nprocess_id:42\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(field(info, "process_id"), Some("42"));
        assert_eq!(field(info, "missing"), None);
    }

    #[test]
    fn own_cpu_is_readable_on_linux() {
        assert!(own_cpu().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn host_port_and_password_come_out_of_urls() {
        assert_eq!(
            host_port("redis://127.0.0.1:7000"),
            Some(("127.0.0.1".into(), 7000))
        );
        assert_eq!(host_port("redis://:pw@h:1/0"), Some(("h".into(), 1)));
        assert_eq!(host_port("redis://h"), Some(("h".into(), 6379)));
        assert_eq!(host_port("rediss://h:1"), None);
        assert_eq!(password("redis://:s3cret@h:1"), Some("s3cret".into()));
        assert_eq!(password("redis://u:p@h"), Some("p".into()));
        assert_eq!(password("redis://h:1"), None);
    }

    #[test]
    fn hints_name_the_fix() {
        assert!(connect_hint("Connection refused").contains("server running"));
        assert!(connect_hint("WRONGPASS invalid").contains("password"));
        let h = connect_hint("Incompatible type - Parse error at 1\nUnexpected `33`\n");
        assert!(!h.contains('\n') && h.contains("Redis protocol"), "{h}");
    }
}

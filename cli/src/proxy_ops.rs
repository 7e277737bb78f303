//! How `lockkit proxy` fits the machine it runs on: the client limit against the open-file
//! limit (as redis-server fits `maxclients`), with a warning when it is lowered.

use rustix::process::{getrlimit, setrlimit, Resource};

/// Descriptors kept out of the clients' reach: the shared upstream connections, the listener,
/// the metrics listener and its scrapes, report files, the plugins' files (Redis keeps 32).
pub(crate) const RESERVED_FDS: u64 = 32;

/// The client limit that fits the open-file limit: each client may need two descriptors (its
/// own and an upstream connection of its own), and [`RESERVED_FDS`] plus the shared
/// connections are kept. The soft limit is raised toward the hard one first when `wanted`
/// needs it. Returns the limit and, when it is lower than `wanted`, the warning to print.
pub(crate) fn fit_max_clients(wanted: usize, shared_connections: usize) -> (usize, Option<String>) {
    let reserve = RESERVED_FDS + 2 * shared_connections as u64;
    let need = (wanted as u64).saturating_mul(2).saturating_add(reserve);
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft < need {
        let hard = lim.maximum.unwrap_or(u64::MAX);
        let raised = need.min(hard);
        if raised > soft {
            lim.current = Some(raised);
            if setrlimit(Resource::Nofile, lim).is_ok() {
                lim = getrlimit(Resource::Nofile);
            }
        }
    }
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft >= need {
        return (wanted, None);
    }
    let fits = usize::try_from(soft.saturating_sub(reserve) / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    let warning = format!(
        "lockkit proxy: warning: --max-clients lowered from {wanted} to {fits}: the open-file limit \
         is {soft} (each client may use 2 descriptors, {reserve} are kept for upstream \
         connections, files and metrics); raise it with `ulimit -n` for more"
    );
    (fits, Some(warning))
}

/// A size in bytes: a number, optionally followed by `kb`, `mb` or `gb` (1024-based, as
/// redis.conf reads them; `k`, `m`, `g` too).
///
/// # Errors
/// Not such a size, or past what fits in memory.
pub(crate) fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return Err(format!("`{s}`: a size such as 512mb or 1gb")),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: a size such as 512mb or 1gb"))?;
    n.checked_mul(scale)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("`{s}`: too large"))
}

/// On each SIGHUP: re-reads the users (--requirepass, --user, --users-file, their environment
/// forms) and the listener's certificate and key; what cannot be read is named on stderr and
/// the proxy keeps what it had. Connections stay; logged-in clients stay logged in.
///
/// `hup` is installed before the listener opens, so no SIGHUP ends the proxy.
pub(crate) fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    access: crate::proxy_access::AccessArgs,
    shared: std::sync::Arc<lockkit_proxy::ProxyShared>,
) {
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let users = access
                .client_auth()
                .and_then(|auth| shared.reload_auth(auth));
            match users {
                Ok(()) => eprintln!("lockkit proxy: SIGHUP: users reloaded"),
                Err(e) => eprintln!("lockkit proxy: SIGHUP: kept the users of before: {e}"),
            }
            match access.listener_tls() {
                Ok(None) => {}
                Ok(Some(tls)) => match shared.reload_tls(tls) {
                    Ok(()) => eprintln!("lockkit proxy: SIGHUP: TLS certificate and key reloaded"),
                    Err(e) => eprintln!("lockkit proxy: SIGHUP: kept the TLS of before: {e}"),
                },
                Err(e) => eprintln!("lockkit proxy: SIGHUP: kept the TLS of before: {e}"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_redis_conf_reads_them() {
        assert_eq!(parse_bytes("1gb"), Ok(1 << 30));
        assert_eq!(parse_bytes("512mb"), Ok(512 << 20));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err() && parse_bytes("1tb").is_err());
    }

    #[test]
    fn a_small_limit_is_fitted_and_a_fitting_one_kept() {
        let (n, warning) = fit_max_clients(1, 1);
        assert_eq!((n, warning), (1, None));
        let (n, warning) = fit_max_clients(usize::MAX / 4, 1);
        assert!(n < usize::MAX / 4);
        assert!(warning.unwrap().contains("--max-clients lowered"));
    }
}

//! How `lockkit proxy` fits the machine it runs on: the client limit against the open-file
//! limit (as redis-server fits `maxclients`), with a warning when it is lowered.

use rustix::process::{getrlimit, setrlimit, Resource};

/// Descriptors kept out of the clients' reach: the shared upstream connections, the listener,
/// the metrics listener and its scrapes, report files, the plugins' files (Redis keeps 32).
pub const RESERVED_FDS: u64 = 32;

/// The client limit that fits the open-file limit: each client may need two descriptors (its
/// own and an upstream connection of its own), and [`RESERVED_FDS`] plus the shared
/// connections are kept. The soft limit is raised toward the hard one first when `wanted`
/// needs it. Returns the limit and, when it is lower than `wanted`, the warning to print.
pub fn fit_max_clients(wanted: usize, shared_connections: usize) -> (usize, Option<String>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_limit_is_fitted_and_a_fitting_one_kept() {
        let (n, warning) = fit_max_clients(1, 1);
        assert_eq!((n, warning), (1, None));
        let (n, warning) = fit_max_clients(usize::MAX / 4, 1);
        assert!(n < usize::MAX / 4);
        assert!(warning.unwrap().contains("--max-clients lowered"));
    }
}

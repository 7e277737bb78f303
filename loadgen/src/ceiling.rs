//! The server's own ceiling: `redis-benchmark -P 16` for `SET k v NX PX` and the release
//! `EVALSHA`, combined as `1 / (1/a + 1/b)` cycles per second.

use std::process::Command;

use anyhow::Context;

use crate::target::{host_port, password};
use lockkit_report::bench::Ceiling;

/// Requests per redis-benchmark run (bounded: about a second each on a local server).
pub const REQUESTS: u64 = 1_000_000;

fn parse_csv_rps(out: &str) -> Option<f64> {
    // "test","rps",...\n"SET ...","812345.67",...
    let line = out
        .lines()
        .find(|l| !l.starts_with("\"test\"") && l.contains(','))?;
    let mut fields = line.split("\",\"");
    fields.next()?;
    fields.next()?.trim_matches('"').parse().ok()
}

fn run_one(
    host: &str,
    port: u16,
    pw: Option<&str>,
    command: &[&str],
) -> anyhow::Result<(f64, String)> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", host, "-p", &port.to_string()]).args([
        "-P",
        "16",
        "-c",
        "50",
        "-n",
        &REQUESTS.to_string(),
        "-r",
        "100000",
        "--csv",
    ]);
    if let Some(pw) = pw {
        cmd.args(["-a", pw, "--no-auth-warning"]);
    }
    cmd.args(command);
    let shown = format!(
        "redis-benchmark -h {host} -p {port} -P 16 -c 50 -n {REQUESTS} -r 100000 --csv {}",
        command.join(" ")
    );
    let out = cmd
        .output()
        .context("cannot run redis-benchmark; install it (Debian/Ubuntu: apt-get install -y redis-tools) or drop --ceiling")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = parse_csv_rps(&text)
        .filter(|_| out.status.success())
        .with_context(|| {
            format!(
                "redis-benchmark gave no result: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            )
        })?;
    Ok((rps, shown))
}

/// Runs both redis-benchmark measurements against `url` (a `redis://host:port` target).
pub async fn measure(url: &str, cycles_per_s: f64) -> anyhow::Result<Ceiling> {
    let (host, port) = host_port(url)
        .context("--ceiling needs a redis://host:port target (redis-benchmark speaks plain TCP)")?;
    let pw = password(url);
    let mut conn = crate::target::info_connection(url).await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(lockkit::scripts::RELEASE.source())
        .query_async(&mut conn)
        .await
        .context("SCRIPT LOAD of the release script")?;
    let set = [
        "SET",
        "lockkit:ceiling:__rand_int__",
        "v",
        "NX",
        "PX",
        "5000",
    ];
    let rel = [
        "EVALSHA",
        sha.as_str(),
        "1",
        "lockkit:ceiling:__rand_int__",
        "token",
    ];
    let (h, p, pw2) = (host.clone(), port, pw.clone());
    let (a, cmd_a) =
        tokio::task::spawn_blocking(move || run_one(&h, p, pw2.as_deref(), &set)).await??;
    let rel_owned: Vec<String> = rel.iter().map(|s| s.to_string()).collect();
    let (b, cmd_b) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = rel_owned.iter().map(String::as_str).collect();
        run_one(&host, port, pw.as_deref(), &refs)
    })
    .await??;
    let ceiling = 1.0 / (1.0 / a + 1.0 / b);
    Ok(Ceiling {
        set_nx_px_ops: a.round(),
        release_evalsha_ops: b.round(),
        ceiling_cycles_per_s: ceiling.round(),
        ratio: (cycles_per_s / ceiling * 1000.0).round() / 1000.0,
        commands: vec![cmd_a, cmd_b],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rps_is_read() {
        let out =
            "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET k v NX PX 5000\",\"812345.67\",\"0.9\"\n";
        assert_eq!(parse_csv_rps(out), Some(812_345.67));
        assert_eq!(parse_csv_rps(""), None);
    }
}

//! `lockkit probe --url URL`: what a target supports and its round-trip time.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

/// Ask a target what it supports (SCRIPT LOAD, EVALSHA, FUNCTION, cluster, proxy quirks) and
/// measure its round-trip time.
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The target, e.g. redis://127.0.0.1:6379 (default: $REDIS_URL).
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub url: String,
}

pub(crate) fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let target = lockkit::redact_url(&args.url);
    let options = lockkit::ClientOptions::new().connect_timeout(Duration::from_secs(3));
    // One line: the library's error already carries its cause, and a non-Redis port's parse
    // error spans several lines; printed as a chain it repeated itself three times.
    let report = runtime
        .block_on(lockkit::probe(&args.url, options))
        .map_err(|e| {
            let msg = format!(
                "probing {target}: {}",
                lockkit_loadgen::target::connect_hint(&e.to_string())
            );
            crate::exit::lock_failure(&e, msg)
        })?;
    print!("{}", render(&report));
    Ok(
        if report.set_nx_px.is_yes() && (report.evalsha.is_yes() || report.eval.is_yes()) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

fn render(r: &lockkit::ProbeReport) -> String {
    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
    let mut out = String::new();
    let mut row = |k: &str, v: String| out.push_str(&format!("{k:<18}{v}\n"));
    row("target", r.target.clone());
    row("topology", r.topology.name().to_string());
    row(
        "server version",
        r.server_version
            .clone()
            .unwrap_or_else(|| "unknown (INFO refused)".into()),
    );
    row("SET NX PX", r.set_nx_px.to_string());
    row("SCRIPT LOAD", r.script_load.to_string());
    row("EVAL", r.eval.to_string());
    row("EVALSHA", r.evalsha.to_string());
    row("FUNCTION/FCALL", r.functions.to_string());
    row(
        "round trip",
        format!(
            "min {} / median {} / max {} (20 PINGs)",
            ms(r.rtt[0]),
            ms(r.rtt[1]),
            ms(r.rtt[2])
        ),
    );
    row("script mode", r.recommended_mode.to_string());
    row(
        "waiters",
        if r.release_notify.is_yes() {
            "woken by releases (SUBSCRIBE lockkit:released:*)".to_string()
        } else {
            format!("poll: {}", r.release_notify)
        },
    );
    out
}

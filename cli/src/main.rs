//! `lockkit`: the one binary, a thin front door over the lock library, the harness and the
//! load generator. Parses options, dispatches, prints the error chain, exits non-zero on failure.

use std::process::ExitCode;

use bench_args::BenchArgs;
use clap::{Parser, Subcommand};

mod bench;
mod bench_args;
mod bench_faults;
mod exit;
mod lua;
mod lua_serve;
mod merge;

// The load generator allocates per request (commands, replies, tokens); mimalloc makes that
// cheaper than glibc's malloc, leaving more of the machine to the server being measured.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
mod probe;
mod proxy;
mod proxy_access;
mod proxy_ops;
mod report;
mod ttl;

/// Redis distributed locks, measured and tested: benchmark a target, size TTLs, test Lua offline.
#[derive(Debug, Parser)]
#[command(name = "lockkit", version, about, long_about = None)]
struct Opts {
    #[command(subcommand)]
    command: CliCommand,
}

// Parsed once per process: the size of the bench variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum CliCommand {
    /// Measure lock throughput and latency on a target (no --url: a throwaway local server).
    #[command(after_help = lockkit_report::exit::HELP)]
    Bench(BenchArgs),
    /// Recommend a TTL, watchdog interval and retry policy from a bench report.
    Ttl(ttl::TtlArgs),
    /// Merge HdrHistogram logs from several load machines into one report.
    Merge(merge::MergeArgs),
    /// One self-contained HTML page (SVG plots) for one bench run or several side by side, or
    /// for the observe reports of `lockkit proxy`.
    Report(report::ReportArgs),
    /// Run Redis scripting offline (exec, test, record transcripts).
    Lua(lua::LuaArgs),
    /// What a target supports (SCRIPT LOAD, EVALSHA, FUNCTION, cluster, proxy) and its round trip.
    Probe(probe::ProbeArgs),
    /// A pass-through proxy in front of a Redis server; `--plugin observe` measures how long
    /// the application really holds its locks.
    #[command(after_help = proxy::EXIT_HELP)]
    Proxy(proxy::ProxyArgs),
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    let result = match opts.command {
        CliCommand::Bench(args) => bench::run(args),
        CliCommand::Ttl(args) => lockkit_report::ttl_advice::run(args.into()),
        CliCommand::Merge(args) => lockkit_report::merge::run(&args.logs, args.json.as_deref()),
        CliCommand::Report(args) => lockkit_report::html::run(&args.inputs, args.out.as_deref()),
        CliCommand::Lua(args) => lua::run(args),
        CliCommand::Probe(args) => probe::run(args),
        CliCommand::Proxy(args) => proxy::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(lockkit_report::exit::code(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommands_parse_in_process() {
        let o = Opts::parse_from(["lockkit", "bench", "--duration", "2s", "--keys", "10k"]);
        assert!(matches!(o.command, CliCommand::Bench(ref b) if b.keys == 10_000));
        let o = Opts::parse_from(["lockkit", "ttl", "r.json", "--work-p99", "120ms"]);
        assert!(matches!(o.command, CliCommand::Ttl(_)));
        let o = Opts::parse_from(["lockkit", "merge", "a.hlog", "b.hlog", "--json", "m.json"]);
        assert!(matches!(o.command, CliCommand::Merge(ref m) if m.logs.len() == 2));
        assert!(Opts::try_parse_from(["lockkit", "bench", "--duration", "10x"]).is_err());
        assert!(Opts::try_parse_from(["lockkit", "merge"]).is_err());
        let o = Opts::parse_from(["lockkit", "report", "a.json", "b.json", "-o", "c.html"]);
        assert!(matches!(o.command, CliCommand::Report(ref r) if r.inputs.len() == 2));
        assert!(Opts::try_parse_from(["lockkit", "report"]).is_err());
        let o = Opts::parse_from([
            "lockkit",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "redis://h:1",
            "--plugin",
            "observe",
            "--duration",
            "2s",
        ]);
        assert!(matches!(o.command, CliCommand::Proxy(ref p) if p.plugins == ["observe"]));
    }
}

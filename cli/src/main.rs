//! `lockkit`: the one binary, a thin front door over the lock library, the harness and the
//! load generator. Parses options, dispatches, prints the error chain, exits non-zero on failure.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod lua;

/// Redis distributed locks, measured and tested: benchmark a target, size TTLs, test Lua offline.
#[derive(Debug, Parser)]
#[command(name = "lockkit", version, about, long_about = None)]
struct Opts {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Redis scripting offline (exec, test, record transcripts).
    Lua(lua::LuaArgs),
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    let result = match opts.command {
        Command::Lua(args) => lua::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

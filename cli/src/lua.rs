//! `lockkit lua ...`: placeholder until the harness lands (see issue 3).

use std::process::ExitCode;

/// Offline Redis scripting.
#[derive(Debug, clap::Args)]
pub struct LuaArgs {}

pub fn run(_args: LuaArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`lockkit lua` is not built yet")
}

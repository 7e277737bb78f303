//! Running command lines and transcripts, offline or against a server: what `lockkit lua`
//! does, kept here so the CLI stays a thin front door.

use std::io::Write;
use std::path::Path;

use super::format::format_reply;
use super::remote::Remote;
use super::transcript::{parse_command_in, Transcript};
use crate::{Harness, Reply};

/// Where commands go.
#[derive(Debug)]
pub enum CommandTarget {
    /// The offline harness.
    Offline(Box<Harness>),
    /// A real server.
    Server(Remote),
}

impl CommandTarget {
    /// Sends one command.
    ///
    /// # Errors
    /// Only a broken connection to a real server.
    pub fn call(&mut self, argv: &[Vec<u8>]) -> Result<Reply, String> {
        match self {
            CommandTarget::Offline(h) => Ok(h.call_argv(argv)),
            CommandTarget::Server(r) => r.call(argv).map_err(|e| format!("server: {e}")),
        }
    }

    /// Whether the offline harness stopped the last command's script (time limit, memory
    /// cap); a real server never does.
    pub fn stopped(&self) -> bool {
        match self {
            CommandTarget::Offline(h) => h.stopped(),
            CommandTarget::Server(_) => false,
        }
    }
}

/// Runs redis-cli style lines from `input` (named `name` in errors), printing each reply as
/// `redis-cli --no-raw` does; blank lines and `#` comments are skipped. Every line is parsed
/// before any runs.
///
/// # Errors
/// A line that does not parse (`name:line: why`), a broken server connection, or a script the
/// harness stopped (time limit, memory cap): its error reply is printed, then the run fails.
pub fn exec(
    target: &mut CommandTarget,
    input: &str,
    name: &str,
    base: &Path,
    out: &mut dyn Write,
) -> Result<(), String> {
    exec_in(target, input, name, base, None, out)
}

/// [`exec`] with directive files confined to `root` (see
/// [`parse_in`](super::transcript::parse_in)).
///
/// # Errors
/// As [`exec`].
pub fn exec_in(
    target: &mut CommandTarget,
    input: &str,
    name: &str,
    base: &Path,
    root: Option<&Path>,
    out: &mut dyn Write,
) -> Result<(), String> {
    let mut commands = Vec::new();
    for (i, line) in input.lines().enumerate() {
        // Blank lines and `#` comments, as in a transcript: never sent to a server.
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (argv, repeat) =
            parse_command_in(line, base, root).map_err(|e| format!("{name}:{}: {e}", i + 1))?;
        commands.push((i + 1, argv, repeat));
    }
    for (line, argv, repeat) in commands {
        for _ in 0..repeat {
            let reply = target.call(&argv)?;
            out.write_all(format_reply(&reply).as_bytes())
                .map_err(|e| format!("writing output: {e}"))?;
            // Redis would still be running such a script; going on would show replies Redis
            // would never give, so the run stops here and fails.
            if target.stopped() {
                return Err(format!(
                    "{name}:{line}: the harness stopped a runaway script (time limit or memory \
                     cap); nothing after it was run"
                ));
            }
        }
    }
    Ok(())
}

/// One case whose reply differed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Line of the command.
    pub line: usize,
    /// The command as written.
    pub command: String,
    /// What the transcript expects.
    pub expected: Vec<String>,
    /// What came back.
    pub actual: Vec<String>,
}

/// Every case's formatted reply lines, in order.
///
/// # Errors
/// A broken server connection.
pub fn replies(target: &mut CommandTarget, t: &Transcript) -> Result<Vec<Vec<String>>, String> {
    let mut all = Vec::new();
    for case in t.cases() {
        let mut lines = Vec::new();
        for _ in 0..case.repeat {
            let reply = target.call(&case.argv)?;
            lines.extend(format_reply(&reply).lines().map(str::to_string));
        }
        all.push(lines);
    }
    Ok(all)
}

/// Runs transcript `t` and lists the cases whose reply differs from the recorded one (a case
/// with no recorded reply is a mismatch too).
///
/// # Errors
/// A broken server connection.
pub fn check(target: &mut CommandTarget, t: &Transcript) -> Result<Vec<Mismatch>, String> {
    let got = replies(target, t)?;
    Ok(t.cases()
        .zip(got)
        .filter(|(c, actual)| c.expected.is_empty() || &c.expected != actual)
        .map(|(c, actual)| Mismatch {
            line: c.line,
            command: c.text.clone(),
            expected: c.expected.clone(),
            actual,
        })
        .collect())
}

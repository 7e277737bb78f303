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
    // Every line is parsed first, into one flat buffer: with a `Vec` per argument kept for
    // each line, parsing 100k lines took 15% of their run (allocations and fresh pages).
    let mut parsed = Parsed::default();
    for (i, line) in input.lines().enumerate() {
        // Blank lines and `#` comments, as in a transcript: never sent to a server.
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (argv, repeat) =
            parse_command_in(line, base, root).map_err(|e| format!("{name}:{}: {e}", i + 1))?;
        parsed.push(i + 1, &argv, repeat);
    }
    // Offline, replies are written in blocks (a `write` per reply line took 6% of the run);
    // a real server's replies go out as they come.
    let mut block;
    let out: &mut dyn Write = if matches!(target, CommandTarget::Offline(_)) {
        block = std::io::BufWriter::with_capacity(1 << 16, out);
        &mut block
    } else {
        out
    };
    let mut argv: Vec<Vec<u8>> = Vec::new();
    let ran = run_parsed(target, &parsed, &mut argv, name, out);
    let flushed = out.flush().map_err(|e| format!("writing output: {e}"));
    ran.and(flushed)
}

/// Command lines parsed by [`exec_in`], kept as one buffer of argument bytes.
#[derive(Default)]
struct Parsed {
    bytes: Vec<u8>,
    /// Where each argument ends in `bytes`.
    ends: Vec<usize>,
    /// (line, first argument, arguments, repeat) of each command.
    commands: Vec<(usize, usize, usize, usize)>,
}

impl Parsed {
    fn push(&mut self, line: usize, argv: &[Vec<u8>], repeat: usize) {
        self.commands
            .push((line, self.ends.len(), argv.len(), repeat));
        for arg in argv {
            self.bytes.extend_from_slice(arg);
            self.ends.push(self.bytes.len());
        }
    }

    /// Command `first..first + n` into `argv`, reusing its buffers.
    fn fill(&self, first: usize, n: usize, argv: &mut Vec<Vec<u8>>) {
        argv.resize_with(n, Vec::new);
        for (k, arg) in argv.iter_mut().enumerate() {
            let i = first + k;
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            arg.clear();
            arg.extend_from_slice(&self.bytes[start..self.ends[i]]);
        }
    }
}

fn run_parsed(
    target: &mut CommandTarget,
    parsed: &Parsed,
    argv: &mut Vec<Vec<u8>>,
    name: &str,
    out: &mut dyn Write,
) -> Result<(), String> {
    for &(line, first, n, repeat) in &parsed.commands {
        parsed.fill(first, n, argv);
        for _ in 0..repeat {
            let reply = target.call(argv)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_offline(input: &str) -> (Result<(), String>, String) {
        let mut target = CommandTarget::Offline(Box::new(Harness::new().expect("harness")));
        let mut out = Vec::new();
        let r = exec(&mut target, input, "t", Path::new("."), &mut out);
        (r, String::from_utf8(out).expect("utf-8"))
    }

    #[test]
    fn lines_run_in_order_with_their_repeat_counts() {
        let (r, out) = exec_offline(
            "SET k \"a b\"\n# comment\n\n3 INCR n\nEVAL \"return {ARGV[1], KEYS[1]}\" 1 x y\nGET k\n",
        );
        assert_eq!(r, Ok(()));
        assert_eq!(
            out,
            "OK\n(integer) 1\n(integer) 2\n(integer) 3\n1) \"y\"\n2) \"x\"\n\"a b\"\n"
        );
    }

    #[test]
    fn a_line_that_does_not_parse_runs_nothing() {
        let (r, out) = exec_offline("SET k v\nGET \"unclosed\n");
        assert!(r.as_ref().is_err_and(|e| e.starts_with("t:2: ")), "{r:?}");
        assert_eq!(out, "");
    }

    #[test]
    fn a_stopped_script_prints_what_ran_and_its_error_then_stops() {
        let mut target = CommandTarget::Offline(Box::new(
            Harness::with_options(
                crate::HarnessOptions::new().time_limit(std::time::Duration::from_millis(50)),
            )
            .expect("harness"),
        ));
        let mut out = Vec::new();
        let r = exec(
            &mut target,
            "SET k v\nEVAL \"while true do end\" 0\nGET k\n",
            "t",
            Path::new("."),
            &mut out,
        );
        let out = String::from_utf8(out).expect("utf-8");
        assert!(r.as_ref().is_err_and(|e| e.starts_with("t:2: ")), "{r:?}");
        assert!(out.starts_with("OK\n(error) ERR harness: script"), "{out}");
        assert_eq!(out.lines().count(), 2, "{out}");
    }
}

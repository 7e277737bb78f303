//! `lockkit lua exec|test|record`: a thin front door over `lockkit_harness::tooling::run`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Subcommand;
use lockkit_harness::tooling::remote::Remote;
use lockkit_harness::tooling::run::{self, CommandTarget};
use lockkit_harness::tooling::transcript::Transcript;
use lockkit_harness::{Harness, HarnessOptions};

/// Offline Redis scripting: run commands and transcripts without a server.
#[derive(Debug, clap::Args)]
pub(crate) struct LuaArgs {
    #[command(subcommand)]
    command: LuaCommand,
}

#[derive(Debug, Subcommand)]
enum LuaCommand {
    /// Run redis-cli style command lines offline (or against a server with --url) and print
    /// the replies as `redis-cli --no-raw` does.
    Exec {
        /// The file of command lines; `-` or nothing reads standard input.
        file: Option<PathBuf>,
        /// Send the commands to this server instead of the offline harness.
        #[arg(long)]
        url: Option<String>,
        /// Offline: bytes the keyspace may use before commands that grow it answer OOM, as
        /// Redis's `maxmemory` (`256mb`, `1gb`, `0` for no limit; default 256mb).
        #[arg(long, value_parser = parse_bytes, conflicts_with = "url")]
        maxmemory: Option<usize>,
        /// Files named by EVALFILE and the other directives must be under this folder
        /// (default: the transcript's tree or the working directory).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Run transcripts offline (or against an empty server with --url); exit non-zero on a diff.
    Test {
        /// Transcript files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Check against this server instead of the offline harness.
        #[arg(long)]
        url: Option<String>,
        /// Offline: bytes the keyspace may use before commands that grow it answer OOM, as
        /// Redis's `maxmemory` (`256mb`, `1gb`, `0` for no limit; default 256mb).
        #[arg(long, value_parser = parse_bytes, conflicts_with = "url")]
        maxmemory: Option<usize>,
        /// Files named by EVALFILE and the other directives must be under this folder
        /// (default: the transcript's tree or the working directory).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Run transcripts against an empty real server and write its replies into them. An error
    /// reply the transcript did not expect (a recorded reply that was no error, or a refusal
    /// for the server's set-up such as DEBUG on a server started without
    /// `--enable-debug-command local`) stops it: non-zero exit, no file written.
    Record {
        /// Transcript files, rewritten in place.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The server (default: REDIS_URL). It must be empty; what the transcripts create is
        /// flushed afterwards.
        #[arg(long)]
        url: Option<String>,
    },
    /// Serve the harness as a Redis server (RESP2/RESP3): one keyspace, script cache,
    /// function library and virtual clock for every connection, for tests in any language.
    Serve(crate::lua_serve::ServeArgs),
}

/// Runs `lockkit lua ...`.
pub(crate) fn run(args: LuaArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        LuaCommand::Exec {
            file,
            url,
            maxmemory,
            root,
        } => exec(file, url, maxmemory, root.as_deref()),
        LuaCommand::Test {
            files,
            url,
            maxmemory,
            root,
        } => test(&files, url, maxmemory, root.as_deref()),
        LuaCommand::Serve(args) => crate::lua_serve::run(args),
        LuaCommand::Record { files, url } => {
            let url = match url.or_else(|| std::env::var("REDIS_URL").ok()) {
                Some(u) => u,
                None => bail!("lua record needs a server: pass --url URL or set REDIS_URL"),
            };
            record(&files, &url)
        }
    }
}

fn connect(url: &str) -> anyhow::Result<Remote> {
    // One line with the fix, as `bench` and `probe` print it (the error's own chain repeats it).
    Remote::connect(url).map_err(|e| {
        let why = if e.is_timeout() {
            format!(
                "no answer within {} s; is it a TLS (rediss://) URL to a plain server, or the wrong port?",
                lockkit_harness::tooling::remote::CONNECT_TIMEOUT.as_secs()
            )
        } else {
            lockkit_loadgen::target::connect_hint(&e.to_string())
        };
        crate::exit::connect_failure(&e, format!("connecting to {}: {why}", lockkit::redact_url(url)))
    })
}

fn offline(maxmemory: Option<usize>) -> anyhow::Result<CommandTarget> {
    let options = HarnessOptions::new()
        .keyspace_limit(maxmemory.unwrap_or(lockkit_harness::DEFAULT_KEYSPACE_LIMIT));
    Ok(CommandTarget::Offline(Box::new(
        Harness::with_options(options).context("starting the offline harness")?,
    )))
}

/// A byte size: `1048576`, `512kb`, `256mb`, `1gb` (binary units, as Redis reads them).
pub(crate) fn parse_bytes(s: &str) -> Result<usize, String> {
    let lower = s.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let scale: usize = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => {
            return Err(format!(
                "unknown unit {unit:?}: use b, kb, mb or gb (e.g. 256mb)"
            ))
        }
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{s:?} is not a byte size: use e.g. 256mb, 1gb or 0"))
}

fn exec(
    file: Option<PathBuf>,
    url: Option<String>,
    maxmemory: Option<usize>,
    root: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let (input, name, base) = match file.as_deref() {
        None => read_stdin()?,
        Some(p) if p == Path::new("-") => read_stdin()?,
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.display().to_string(),
            p.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
    };
    let mut target = match url {
        Some(u) => CommandTarget::Server(connect(&u)?),
        None => offline(maxmemory)?,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run::exec_in(&mut target, &input, &name, &base, root, &mut out).map_err(anyhow::Error::msg)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn read_stdin() -> anyhow::Result<(String, String, PathBuf)> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("reading standard input")?;
    Ok((s, "-".into(), PathBuf::from(".")))
}

fn parse_all(files: &[PathBuf], root: Option<&Path>) -> anyhow::Result<Vec<Transcript>> {
    files
        .iter()
        .map(|f| Transcript::read_in(f, root).map_err(anyhow::Error::new))
        .collect()
}

/// Fails unless the server holds no keys, so a transcript sees what the harness sees.
fn require_empty(remote: &mut Remote, url: &str) -> anyhow::Result<()> {
    let size = remote
        .call(&[b"DBSIZE".to_vec()])
        .with_context(|| format!("asking {} for DBSIZE", lockkit::redact_url(url)))?;
    if size != lockkit_harness::Reply::Int(0) {
        bail!(
            "{} is not empty ({size}); transcripts need an empty server: use a throwaway one",
            lockkit::redact_url(url)
        );
    }
    Ok(())
}

fn cleanup(remote: &mut Remote) -> anyhow::Result<()> {
    for cmd in [
        &["FLUSHALL"][..],
        &["SCRIPT", "FLUSH"],
        &["FUNCTION", "FLUSH"],
    ] {
        let argv: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
        remote.call(&argv).context("cleaning up the server")?;
    }
    Ok(())
}

fn test(
    files: &[PathBuf],
    url: Option<String>,
    maxmemory: Option<usize>,
    root: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let transcripts = parse_all(files, root)?;
    let mut failed = 0;
    for t in &transcripts {
        let mut target = match &url {
            Some(u) => {
                let mut r = connect(u)?;
                require_empty(&mut r, u)?;
                CommandTarget::Server(r)
            }
            None => offline(maxmemory)?,
        };
        let mismatches = run::check(&mut target, t).map_err(anyhow::Error::msg)?;
        if let CommandTarget::Server(r) = &mut target {
            cleanup(r)?;
        }
        let n = t.cases().count();
        if mismatches.is_empty() {
            println!("ok   {} ({n} commands)", t.path);
            continue;
        }
        failed += 1;
        println!(
            "FAIL {} ({} of {n} commands differ)",
            t.path,
            mismatches.len()
        );
        for m in mismatches {
            println!("  {}:{}: > {}", t.path, m.line, m.command);
            if m.expected.is_empty() {
                println!("    expected: (nothing recorded; run `lockkit lua record`)");
            } else {
                println!("    expected:");
                m.expected.iter().for_each(|l| println!("      {l}"));
            }
            println!("    actual:");
            m.actual.iter().for_each(|l| println!("      {l}"));
            if let Some(fix) = m.actual.first().and_then(|l| refusal_fix(l)) {
                println!("    why: the server refused the command for its configuration: {fix}");
            }
        }
    }
    println!("{} passed, {failed} failed", transcripts.len() - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn record(files: &[PathBuf], url: &str) -> anyhow::Result<ExitCode> {
    let transcripts = parse_all(files, None)?;
    // Every transcript is run and checked before any is written: all or nothing.
    let mut texts = Vec::with_capacity(files.len());
    for t in &transcripts {
        let mut remote = connect(url)?;
        require_empty(&mut remote, url)?;
        let mut target = CommandTarget::Server(remote);
        let replies = run::replies(&mut target, t).map_err(anyhow::Error::msg);
        if let CommandTarget::Server(r) = &mut target {
            cleanup(r)?;
        }
        let replies = replies?;
        refuse_unexpected_errors(t, &replies, url)?;
        texts.push(t.render(&replies));
    }
    for ((t, file), text) in transcripts.iter().zip(files).zip(texts) {
        write_atomically(file, &text)?;
        println!("recorded {} ({} commands)", t.path, t.cases().count());
    }
    Ok(ExitCode::SUCCESS)
}

/// What to do when a server refuses a command for how it was started or who is asking (not
/// for what the script did): such a reply describes the set-up, never the behaviour under test.
fn refusal_fix(reply_line: &str) -> Option<&'static str> {
    let err = reply_line.strip_prefix("(error) ")?;
    if err.contains("DEBUG command not allowed") {
        Some(
            "start redis-server with --enable-debug-command local (Debian's package refuses DEBUG \
             by default; DEBUG SLEEP is how transcripts advance time)",
        )
    } else if err.starts_with("NOPERM") {
        Some("the URL's user may not run it: record against a throwaway server as the default user")
    } else if err.starts_with("NOAUTH") || err.starts_with("WRONGPASS") {
        Some("put the password in the URL: redis://:PASSWORD@host:port")
    } else {
        None
    }
}

/// Fails on the first error reply the transcript did not expect: a recorded reply that was not
/// an error, or a refusal for the server's set-up. Recording it would write a wrong answer.
fn refuse_unexpected_errors(
    t: &Transcript,
    replies: &[Vec<String>],
    url: &str,
) -> anyhow::Result<()> {
    for (case, actual) in t.cases().zip(replies) {
        let Some(err) = actual.iter().find(|l| l.starts_with("(error) ")) else {
            continue;
        };
        let expected_error = case.expected.iter().any(|l| l.starts_with("(error) "));
        let fix = refusal_fix(err);
        if fix.is_none() && (expected_error || case.expected.is_empty()) {
            continue;
        }
        let fix = fix.unwrap_or(
            "if the new reply is right, delete the old one under this line and record again",
        );
        bail!(
            "{}:{}: > {}: {} answered `{}` where the transcript expects {}; no transcript \
             was written. To fix: {fix}",
            t.path,
            case.line,
            case.text,
            lockkit::redact_url(url),
            err.trim_start_matches("(error) "),
            if case.expected.is_empty() {
                "no error".to_string()
            } else {
                format!("`{}`", case.expected.join(" "))
            },
        );
    }
    Ok(())
}

fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

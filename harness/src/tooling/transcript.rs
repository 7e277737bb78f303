//! Transcripts: redis-cli style command lines, each followed by the reply `redis-cli --no-raw`
//! prints. Parsed whole before anything runs; run offline, against a server, or re-recorded.
//!
//! ```text
//! # comments and blank lines are kept
//! > SET lock tok PX 5000
//! OK
//! > EVALFILE lua/release.lua 1 lock tok
//! (integer) 1
//! ```
//!
//! `> ` starts a command; the lines after it, up to the next command, are its expected reply.
//! Directives that name a file (resolved from the transcript's folder, then its parents) are
//! expanded before running, so a server only ever sees plain commands:
//! `EVALFILE path numkeys ...` → `EVAL <file> numkeys ...`,
//! `EVALSHAFILE path numkeys ...` → `EVALSHA <sha1 of file> numkeys ...`,
//! `SCRIPT LOADFILE path` → `SCRIPT LOAD <file>`,
//! `FUNCTION LOADFILE [REPLACE] path` → `FUNCTION LOAD [REPLACE] <file>`.

use std::fmt;
use std::path::{Path, PathBuf};

use super::cmdline::split_args;

/// A transcript that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file (or `-` for standard input).
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// One command and what it should answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// 1-based line of the command.
    pub line: usize,
    /// The command line as written (without `> `).
    pub text: String,
    /// The arguments to send, directives expanded.
    pub argv: Vec<Vec<u8>>,
    /// How many times redis-cli would send it (a leading count, `3 PING`).
    pub repeat: usize,
    /// The expected reply lines (empty when none recorded yet).
    pub expected: Vec<String>,
}

/// A line of a transcript file, kept so that `record` can rewrite it faithfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A `#` comment or blank line, as written.
    Text(String),
    /// A command and its expected reply.
    Case(Case),
}

/// A parsed transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// The file it came from.
    pub path: String,
    /// Its lines, in order.
    pub items: Vec<Item>,
}

impl Transcript {
    /// The commands in order.
    pub fn cases(&self) -> impl Iterator<Item = &Case> {
        self.items.iter().filter_map(|i| match i {
            Item::Case(c) => Some(c),
            Item::Text(_) => None,
        })
    }

    /// Reads and parses a transcript file.
    ///
    /// # Errors
    /// The file cannot be read, or a line does not parse.
    pub fn read(path: &Path) -> Result<Transcript, ParseError> {
        Self::read_in(path, None)
    }

    /// [`read`](Self::read) with directive files confined to `root` (see [`parse_in`]).
    ///
    /// # Errors
    /// The file cannot be read, or a line does not parse.
    pub fn read_in(path: &Path, root: Option<&Path>) -> Result<Transcript, ParseError> {
        let text = std::fs::read_to_string(path).map_err(|e| ParseError {
            path: path.display().to_string(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        parse_in(&text, path, root)
    }

    /// The transcript with `replies[i]` (formatted lines) as the expected reply of case `i`.
    pub fn render(&self, replies: &[Vec<String>]) -> String {
        let mut out = String::new();
        let mut i = 0;
        for item in &self.items {
            match item {
                Item::Text(t) => {
                    out.push_str(t);
                    out.push('\n');
                }
                Item::Case(c) => {
                    out.push_str("> ");
                    out.push_str(&c.text);
                    out.push('\n');
                    let lines = replies.get(i).unwrap_or(&c.expected);
                    for l in lines {
                        out.push_str(l);
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        }
        out
    }
}

/// Parses transcript `text` read from `path` (used to resolve directive files).
///
/// # Errors
/// The first line that does not parse.
pub fn parse(text: &str, path: &Path) -> Result<Transcript, ParseError> {
    parse_in(text, path, None)
}

/// [`parse`] with directive files confined to `root`: by default (`None`) a file must lie in
/// the transcript's tree (its folder, or the checkout it is in: the nearest folder above it
/// with a `.git`) or under the working directory; with a root, under that root only.
///
/// # Errors
/// The first line that does not parse, or a directive file outside the allowed tree.
pub fn parse_in(text: &str, path: &Path, root: Option<&Path>) -> Result<Transcript, ParseError> {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut items = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        // `lines` strips "\r\n" but not a lone final "\r": treat both as line ends.
        let line = line.strip_suffix('\r').unwrap_or(line);
        let n = idx + 1;
        let at = |message: String| ParseError {
            path: path.display().to_string(),
            line: n,
            message,
        };
        let trimmed = line.trim();
        if let Some(cmd) = line
            .strip_prefix("> ")
            .or_else(|| (line == ">").then_some(""))
        {
            let (argv, repeat) = parse_command_in(cmd, &base, root).map_err(at)?;
            items.push(Item::Case(Case {
                line: n,
                text: cmd.to_string(),
                argv,
                repeat,
                expected: Vec::new(),
            }));
        } else if trimmed.is_empty() || trimmed.starts_with('#') {
            items.push(Item::Text(line.to_string()));
        } else {
            match items.last_mut() {
                Some(Item::Case(c)) => c.expected.push(line.to_string()),
                _ => {
                    return Err(at(format!(
                        "expected a command starting with '> ', a '#' comment or a blank line, found {line:?}"
                    )))
                }
            }
        }
    }
    Ok(Transcript {
        path: path.display().to_string(),
        items,
    })
}

/// Splits a command line, applies redis-cli's repeat count and expands directives.
///
/// # Errors
/// Unbalanced quotes, an empty command, an unknown directive or an unreadable file.
pub fn parse_command(line: &str, base: &Path) -> Result<(Vec<Vec<u8>>, usize), String> {
    parse_command_in(line, base, None)
}

/// [`parse_command`] with directive files confined as [`parse_in`] says.
///
/// # Errors
/// As [`parse_command`], and a directive file outside the allowed tree.
pub fn parse_command_in(
    line: &str,
    base: &Path,
    root: Option<&Path>,
) -> Result<(Vec<Vec<u8>>, usize), String> {
    let mut argv = split_args(line).map_err(|e| format!("cannot split command: {}", e.reason))?;
    if argv.is_empty() {
        return Err("empty command".into());
    }
    let mut repeat = 1;
    if argv.len() > 1 && argv[0].iter().all(u8::is_ascii_digit) {
        repeat = std::str::from_utf8(&argv[0])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("repeat count out of range")?;
        argv.remove(0);
    }
    Ok((expand(argv, base, root)?, repeat))
}

fn upper(a: &[u8]) -> String {
    String::from_utf8_lossy(a).to_ascii_uppercase()
}

fn expand(
    mut argv: Vec<Vec<u8>>,
    base: &Path,
    root: Option<&Path>,
) -> Result<Vec<Vec<u8>>, String> {
    let first = upper(&argv[0]);
    // Only SCRIPT and FUNCTION directives have a second word (the rest would upper-case an
    // EVALSHA's digest on every line).
    let second = match first.as_str() {
        "SCRIPT" | "FUNCTION" => argv.get(1).map(|a| upper(a)).unwrap_or_default(),
        _ => String::new(),
    };
    let need = |argv: &Vec<Vec<u8>>, n: usize, usage: &str| {
        if argv.len() < n {
            Err(format!("usage: {usage}"))
        } else {
            Ok(())
        }
    };
    match (first.as_str(), second.as_str()) {
        ("EVALFILE", _) => {
            need(&argv, 3, "EVALFILE path numkeys [key ...] [arg ...]")?;
            argv[1] = read_file(&argv[1], base, root)?;
            argv[0] = b"EVAL".to_vec();
        }
        ("EVALSHAFILE", _) => {
            need(&argv, 3, "EVALSHAFILE path numkeys [key ...] [arg ...]")?;
            argv[1] = crate::sha1hex(&read_file(&argv[1], base, root)?).into_bytes();
            argv[0] = b"EVALSHA".to_vec();
        }
        ("SCRIPT", "LOADFILE") => {
            need(&argv, 3, "SCRIPT LOADFILE path")?;
            if argv.len() > 3 {
                return Err("usage: SCRIPT LOADFILE path".into());
            }
            argv[2] = read_file(&argv[2], base, root)?;
            argv[1] = b"LOAD".to_vec();
        }
        ("FUNCTION", "LOADFILE") => {
            need(&argv, 3, "FUNCTION LOADFILE [REPLACE] path")?;
            let last = argv.len() - 1;
            argv[last] = read_file(&argv[last], base, root)?;
            argv[1] = b"LOAD".to_vec();
        }
        (f, _) if f.ends_with("FILE") && !crate::is_redis_command(&f.to_ascii_lowercase()) => {
            return Err(format!(
                "unknown directive {f} (known: EVALFILE, EVALSHAFILE, SCRIPT LOADFILE, FUNCTION LOADFILE)"
            ))
        }
        (_, s) if s.ends_with("FILE") && matches!(first.as_str(), "SCRIPT" | "FUNCTION") => {
            return Err(format!("unknown directive {first} {s}"))
        }
        _ => {}
    }
    Ok(argv)
}

/// The folders a directive file may be in (canonical): `root`, or by default the
/// transcript's tree and the working directory.
fn allowed_roots(base: &Path, root: Option<&Path>) -> Vec<PathBuf> {
    let wanted: Vec<PathBuf> = match root {
        Some(r) => vec![r.to_path_buf()],
        None => {
            let dir = if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base
            };
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            let tree = dir
                .ancestors()
                .find(|d| d.join(".git").exists())
                .unwrap_or(&dir)
                .to_path_buf();
            vec![tree, PathBuf::from(".")]
        }
    };
    wanted
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .collect()
}

/// Finds `name` in `base` or one of its parents and reads it, if it lies inside the allowed
/// roots (a transcript must not read `/etc/...` or `../..` out of its tree).
fn read_file(name: &[u8], base: &Path, root: Option<&Path>) -> Result<Vec<u8>, String> {
    let name = String::from_utf8_lossy(name).into_owned();
    let rel = PathBuf::from(&name);
    let candidates: Vec<PathBuf> = if rel.is_absolute() {
        vec![rel]
    } else {
        base.ancestors()
            .map(|dir| dir.join(&rel))
            .chain(std::iter::once(rel.clone()))
            .collect()
    };
    for c in &candidates {
        if c.is_file() {
            let roots = allowed_roots(base, root);
            let real = c
                .canonicalize()
                .map_err(|e| format!("cannot read {}: {e}", c.display()))?;
            if !roots.iter().any(|r| real.starts_with(r)) {
                let shown: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
                return Err(format!(
                    "{name} is {}, outside {}: directive files stay inside the transcript's tree \
                     and the working directory (pass --root DIR to allow another folder)",
                    real.display(),
                    shown.join(" and ")
                ));
            }
            return std::fs::read(&real).map_err(|e| format!("cannot read {}: {e}", c.display()));
        }
    }
    Err(format!(
        "file not found: {name} (looked in {} and its parents)",
        if base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            base
        }
        .display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_replies_and_comments() {
        let t = parse(
            "# c\n> SET k v\nOK\n\n> MGET k x\n1) \"v\"\n2) (nil)\n",
            Path::new("t.txt"),
        )
        .unwrap();
        let cases: Vec<&Case> = t.cases().collect();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[1].expected, vec!["1) \"v\"", "2) (nil)"]);
        assert_eq!(
            t.render(&[]),
            "# c\n> SET k v\nOK\n\n> MGET k x\n1) \"v\"\n2) (nil)\n"
        );
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let e = parse("> SET k v\nOK\n# c\nstray\n", Path::new("x.txt")).unwrap_err();
        assert_eq!((e.line, e.path.as_str()), (4, "x.txt"));
        let e = parse("> SET \"k v\n", Path::new("x.txt")).unwrap_err();
        assert!(e.to_string().starts_with("x.txt:1: cannot split"), "{e}");
        let e = parse("> EVALFILE nope.lua 0\n", Path::new("x.txt")).unwrap_err();
        assert!(e.message.contains("file not found: nope.lua"), "{e}");
        let e = parse("> LOADFILE x\n", Path::new("x.txt")).unwrap_err();
        assert!(e.message.contains("unknown directive LOADFILE"), "{e}");
    }
}

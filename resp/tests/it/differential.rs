//! Differential fuzzing of [`RequestParser`] against a real redis-server 7.0.15: random and
//! mutated byte streams (CR and LF moved, signs, zeros, huge counts, NULs, quotes, split reads)
//! must split into the same commands, with the same arguments, and end in the same protocol
//! error (or the same wait for more bytes) as redis-server splits them.
//!
//! Every command in the streams is one whose reply shows its arguments: `ECHO x`, `PING [x]`,
//! and names Redis does not know (whose error quotes the name and the arguments). So the reply
//! bytes Redis sends are predicted from what the parser read, and compared byte for byte; a
//! stream that ends inside a request is checked with `CLIENT LIST` (the bytes Redis holds), a
//! stream that ends in a protocol error must end in that error and a closed connection. Each
//! stream goes once to a server without a password and once, not logged in, to one with a
//! password (Redis's limits before login, `-NOAUTH`).
//!
//! Runs for `LOCKKIT_FUZZ_SECS` seconds (default 3) from `LOCKKIT_FUZZ_SEED` (default: the
//! clock; printed on a failure), after replaying every stream in `tests/corpus/` (streams found
//! by earlier runs). A failing stream is written to `tests/corpus/` with `LOCKKIT_FUZZ_SAVE=1`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockkit_resp::errors::{unknown_command, wrong_number_of_arguments};
use lockkit_resp::{ProtocolError, RequestParser};
use lockkit_test_support::{RedisServer, ServerOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PASSWORD: &str = "fuzz-pw";
const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
const SENTINEL: &[u8] = b"*2\r\n$4\r\nECHO\r\n$8\r\nsentinel\r\n";

/// How the parser read a stream.
#[derive(Debug, PartialEq, Eq)]
struct Reading {
    /// The argument lists of the commands (empty requests left out).
    commands: Vec<Vec<Vec<u8>>>,
    end: End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Every byte was read into requests.
    Clean,
    /// A request is incomplete: this many bytes of it are held, and whether its first line
    /// (the inline line, or the count line) is complete.
    Waiting {
        held: usize,
        first_line_done: bool,
    },
    Error(ProtocolError),
}

/// Reads `stream` as fed in `chunks` (cut points), as a server would read it.
fn read(stream: &[u8], cuts: &[usize], authenticated: bool) -> Reading {
    let mut p = RequestParser::default();
    let mut commands = Vec::new();
    let mut start = 0;
    let ends = cuts.iter().copied().chain([stream.len()]);
    for end in ends {
        loop {
            match p.parse(&stream[start..end], authenticated) {
                Ok(Some(r)) => {
                    let len = r.len();
                    if !r.is_empty() {
                        commands.push(r.into_args(&stream[start..end]));
                    }
                    start += len;
                }
                Ok(None) => break,
                Err(e) => {
                    return Reading {
                        commands,
                        end: End::Error(e),
                    }
                }
            }
        }
    }
    let held = stream.len() - start;
    let end = if held == 0 {
        End::Clean
    } else {
        let rest = &stream[start..];
        let first_line_done = rest[0] == b'*'
            && rest
                .iter()
                .position(|&b| b == b'\r')
                .is_some_and(|cr| cr + 1 < rest.len());
        End::Waiting {
            held,
            first_line_done,
        }
    };
    Reading { commands, end }
}

/// C's `strcasecmp(s, what) == 0`: `s` read up to its first NUL.
fn c_eq(s: &[u8], what: &[u8]) -> bool {
    let s = s.split(|&b| b == 0).next().unwrap_or_default();
    s.eq_ignore_ascii_case(what)
}

fn bulk(b: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", b.len()).into_bytes();
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
    out
}

/// What redis-server 7.0.15 answers `args`, or `None` for a command whose reply cannot be
/// predicted here (another real command; `POST`/`Host:`, which close the connection).
fn reply(args: &[Vec<u8>], authenticated: bool) -> Option<Vec<u8>> {
    let name = &args[0];
    if c_eq(name, b"post") || c_eq(name, b"host:") {
        return None;
    }
    // ECHO's arity is 2; PING's is -1 (any count): it refuses more than one argument itself,
    // after the login check.
    let ping = name.eq_ignore_ascii_case(b"ping");
    let arity_ok = if name.eq_ignore_ascii_case(b"echo") {
        args.len() == 2
    } else if ping {
        true
    } else if is_other_command(name) {
        return None;
    } else {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        return Some(unknown_command(&refs));
    };
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    Some(match (arity_ok, authenticated) {
        (false, _) => wrong_number_of_arguments(&lower),
        (true, false) => NOAUTH.to_vec(),
        (true, true) if ping && args.len() > 2 => wrong_number_of_arguments("ping"),
        (true, true) if args.len() == 2 => bulk(&args[1]),
        (true, true) => b"+PONG\r\n".to_vec(),
    })
}

/// Names of Redis commands a mutation could plausibly make (the streams are built from ECHO
/// and PING): their replies are not predicted, and a stream holding one is not compared.
fn is_other_command(name: &[u8]) -> bool {
    const OTHERS: [&[u8]; 10] = [
        b"get", b"set", b"del", b"ttl", b"type", b"keys", b"info", b"time", b"exec", b"sort",
    ];
    OTHERS.iter().any(|o| name.eq_ignore_ascii_case(o))
}

/// One stream's case: the bytes and where they are cut into writes.
#[derive(Debug, Clone)]
struct Case {
    stream: Vec<u8>,
    cuts: Vec<usize>,
}

/// A server and how the fuzzed client stands with it.
struct Target<'a> {
    server: &'a RedisServer,
    authenticated: bool,
}

impl Target<'_> {
    /// Sends `case` to the server and compares what it does with what the parser read; the
    /// difference, if any.
    fn check(&self, case: &Case) -> Result<(), String> {
        let reading = read(&case.stream, &case.cuts, self.authenticated);
        let whole = read(&case.stream, &[], self.authenticated);
        if reading != whole {
            return Err(format!(
                "the parser reads differently when the stream is cut at {:?}: {reading:?} vs {whole:?}",
                case.cuts
            ));
        }
        let mut want = Vec::new();
        for args in &reading.commands {
            match reply(args, self.authenticated) {
                Some(r) => want.extend_from_slice(&r),
                None => return Ok(()),
            }
        }
        let mut c =
            TcpStream::connect(("127.0.0.1", self.server.port())).map_err(|e| e.to_string())?;
        c.set_nodelay(true).ok();
        let me = c.local_addr().map_err(|e| e.to_string())?;
        let mut from = 0;
        for &cut in case.cuts.iter().chain([&case.stream.len()]) {
            // A write after the server closed (a protocol error in an earlier piece) fails;
            // what it answered before is read all the same.
            if c.write_all(&case.stream[from..cut]).is_err() {
                break;
            }
            from = cut;
            std::thread::sleep(Duration::from_millis(1));
        }
        match reading.end {
            End::Error(e) => {
                want.extend_from_slice(&e.reply());
                let got = read_to_end(&mut c);
                same(&want, &got, "then the error, then the connection closes")
            }
            End::Clean => {
                c.write_all(SENTINEL).map_err(|e| e.to_string())?;
                let sentinel = reply(
                    &[b"ECHO".to_vec(), b"sentinel".to_vec()],
                    self.authenticated,
                )
                .unwrap_or_default();
                want.extend_from_slice(&sentinel);
                let got = read_at_least(&mut c, want.len());
                same(&want, &got, "then the sentinel's reply")
            }
            End::Waiting {
                held,
                first_line_done,
            } => {
                let got = read_at_least(&mut c, want.len());
                same(&want, &got, "while a request is still incomplete")?;
                let got = read_for(&mut c, Duration::from_millis(10));
                same(b"", &got, "nothing more while waiting")?;
                let qbuf = self.query_buffer(&me.to_string())?;
                let fits = if first_line_done {
                    qbuf <= held
                } else {
                    qbuf == held
                };
                if fits {
                    Ok(())
                } else {
                    Err(format!(
                        "redis-server holds {qbuf} bytes of the incomplete request, the parser {held} (first line done: {first_line_done})"
                    ))
                }
            }
        }
    }

    /// The `qbuf` of the client at `addr`, from `CLIENT LIST`.
    fn query_buffer(&self, addr: &str) -> Result<usize, String> {
        let mut admin =
            TcpStream::connect(("127.0.0.1", self.server.port())).map_err(|e| e.to_string())?;
        let mut ask = Vec::new();
        if !self.authenticated {
            ask.extend_from_slice(format!("AUTH {PASSWORD}\r\n").as_bytes());
        }
        ask.extend_from_slice(b"CLIENT LIST\r\nQUIT\r\n");
        admin.write_all(&ask).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&read_to_end(&mut admin)).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains(&format!(" addr={addr} ")))
            .ok_or_else(|| format!("{addr} is not in CLIENT LIST: {text}"))?;
        line.split(' ')
            .find_map(|f| f.strip_prefix("qbuf="))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("no qbuf in {line}"))
    }
}

fn same(want: &[u8], got: &[u8], when: &str) -> Result<(), String> {
    if want == got {
        return Ok(());
    }
    Err(format!(
        "redis-server answered {:?}, the parser predicts {:?} ({when})",
        String::from_utf8_lossy(got),
        String::from_utf8_lossy(want)
    ))
}

fn read_to_end(c: &mut TcpStream) -> Vec<u8> {
    c.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    got
}

fn read_at_least(c: &mut TcpStream, n: usize) -> Vec<u8> {
    c.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while got.len() < n {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => got.extend_from_slice(&buf[..k]),
        }
    }
    got
}

fn read_for(c: &mut TcpStream, d: Duration) -> Vec<u8> {
    c.set_read_timeout(Some(d)).ok();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(k) = c.read(&mut buf) {
        if k == 0 {
            break;
        }
        got.extend_from_slice(&buf[..k]);
    }
    got
}

/// Bytes that matter to Redis's reader.
const SPECIAL: &[u8] = b"\r\n\0*$-+0 \"'\\\tx1";

/// Numbers that matter to Redis's reader, for counts and lengths.
const NUMBERS: [&str; 20] = [
    "0",
    "-0",
    "1",
    "01",
    "+1",
    "-1",
    "-5",
    "2",
    "10",
    "11",
    "16384",
    "16385",
    "2147483647",
    "2147483648",
    "536870913",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999",
    "1 ",
    " 1",
];

fn arg(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0 => 0,
        1 => rng.random_range(100..300),
        _ => rng.random_range(1..8),
    };
    (0..len)
        .map(|_| {
            if rng.random_bool(0.3) {
                SPECIAL[rng.random_range(0..SPECIAL.len())]
            } else {
                rng.random_range(b'a'..=b'z')
            }
        })
        .collect()
}

/// A well-formed request: ECHO or PING (or an unknown name), multibulk or inline.
fn request(rng: &mut SmallRng) -> Vec<u8> {
    let name: Vec<u8> = match rng.random_range(0..6) {
        0 | 1 => b"ECHO".to_vec(),
        2 => b"echo".to_vec(),
        3 => b"PING".to_vec(),
        4 => Vec::new(),
        _ => b"nosuch".to_vec(),
    };
    let mut args = vec![name];
    for _ in 0..rng.random_range(0..3) {
        args.push(arg(rng));
    }
    if rng.random_bool(0.25) {
        // Inline: words joined by spaces, some quoted.
        let mut line = Vec::new();
        for a in &args {
            if !line.is_empty() {
                line.push(b' ');
            }
            if rng.random_bool(0.5) {
                line.push(b'"');
                for &b in a {
                    match b {
                        b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                        b'\r' => line.extend_from_slice(b"\\r"),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        0 => line.extend_from_slice(b"\\x00"),
                        _ => line.push(b),
                    }
                }
                line.push(b'"');
            } else {
                line.extend(a.iter().copied().filter(|b| !b" \t\r\n\0\"'".contains(b)));
            }
        }
        line.extend_from_slice(if rng.random_bool(0.5) { b"\r\n" } else { b"\n" });
        return line;
    }
    let mut out = Vec::new();
    lockkit_resp::write_multibulk(&mut out, args.iter().map(Vec::as_slice));
    out
}

/// Changes `s` a little, the way a hostile or broken client would.
fn mutate(rng: &mut SmallRng, s: &mut Vec<u8>) {
    if s.is_empty() {
        s.push(SPECIAL[rng.random_range(0..SPECIAL.len())]);
        return;
    }
    let at = rng.random_range(0..s.len());
    match rng.random_range(0..7) {
        0 => s[at] = SPECIAL[rng.random_range(0..SPECIAL.len())],
        1 => s.insert(at, SPECIAL[rng.random_range(0..SPECIAL.len())]),
        2 => {
            s.remove(at);
        }
        3 => s.truncate(at),
        4 => {
            // A count or length replaced by a number that matters.
            let marks: Vec<usize> = (0..s.len())
                .filter(|&i| s[i] == b'*' || s[i] == b'$')
                .collect();
            if let Some(&m) = marks.get(rng.random_range(0..marks.len().max(1))) {
                let end = (m + 1..s.len()).find(|&i| s[i] == b'\r').unwrap_or(s.len());
                let n = NUMBERS[rng.random_range(0..NUMBERS.len())].as_bytes();
                s.splice(m + 1..end, n.iter().copied());
            }
        }
        5 => {
            // A CRLF becomes CR and any byte, or LF alone.
            let crlfs: Vec<usize> = (0..s.len() - 1)
                .filter(|&i| &s[i..i + 2] == b"\r\n")
                .collect();
            if let Some(&c) = crlfs.get(rng.random_range(0..crlfs.len().max(1))) {
                if rng.random_bool(0.5) {
                    s[c + 1] = SPECIAL[rng.random_range(0..SPECIAL.len())];
                } else {
                    s.remove(c);
                }
            }
        }
        _ => {
            let end = (at + rng.random_range(1..8)).min(s.len());
            let piece = s[at..end].to_vec();
            s.splice(at..at, piece);
        }
    }
}

fn case(rng: &mut SmallRng) -> Case {
    let mut stream = Vec::new();
    if rng.random_bool(0.1) {
        // Tokens alone.
        for _ in 0..rng.random_range(1..20) {
            match rng.random_range(0..3) {
                0 => stream.push(SPECIAL[rng.random_range(0..SPECIAL.len())]),
                1 => {
                    stream.extend_from_slice(NUMBERS[rng.random_range(0..NUMBERS.len())].as_bytes())
                }
                _ => stream.extend_from_slice(b"ECHO"),
            }
        }
    } else {
        for _ in 0..rng.random_range(1..4) {
            stream.extend(request(rng));
        }
        for _ in 0..rng.random_range(0..4) {
            mutate(rng, &mut stream);
        }
    }
    let mut cuts: Vec<usize> = (0..rng.random_range(0..3))
        .filter(|_| stream.len() > 1)
        .map(|_| rng.random_range(1..stream.len()))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    Case { stream, cuts }
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn shown(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

/// Random streams against one server until `until` (or five differences): how many, and the
/// differences.
fn fuzz(t: &Target<'_>, seed: u64, until: Instant) -> (usize, Vec<String>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut cases = 0;
    while Instant::now() < until && failures.len() < 5 {
        let case = case(&mut rng);
        cases += 1;
        if let Err(e) = t.check(&case) {
            if std::env::var_os("LOCKKIT_FUZZ_SAVE").is_some() {
                let name = format!("found-{seed}-{cases}.bin");
                let _ = std::fs::write(corpus_dir().join(name), &case.stream);
            }
            failures.push(format!(
                "seed {seed}, case {cases}: {:?} cut at {:?} (authenticated: {}): {e}",
                shown(&case.stream),
                case.cuts,
                t.authenticated
            ));
        }
    }
    (cases, failures)
}

#[test]
fn requests_split_as_redis_server_splits_them() {
    let open = RedisServer::start();
    let locked = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), PASSWORD.into()],
        password: Some(PASSWORD.into()),
        ..ServerOptions::default()
    });
    let targets = [
        Target {
            server: &open,
            authenticated: true,
        },
        Target {
            server: &locked,
            authenticated: false,
        },
    ];
    let mut failures = Vec::new();
    let mut corpus: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    std::fs::read(e.path()).ok().map(|b| (name, b))
                })
                .collect()
        })
        .unwrap_or_default();
    corpus.sort();
    assert!(!corpus.is_empty(), "the corpus is in tests/corpus");
    for (name, stream) in &corpus {
        // Whole, then a byte at a time for the first bytes.
        let cuts = (1..stream.len().min(8)).collect();
        for case in [
            Case {
                stream: stream.clone(),
                cuts: vec![],
            },
            Case {
                stream: stream.clone(),
                cuts,
            },
        ] {
            for t in &targets {
                if let Err(e) = t.check(&case) {
                    failures.push(format!(
                        "corpus {name} (authenticated: {}): {e}",
                        t.authenticated
                    ));
                }
            }
        }
    }
    let secs: u64 = std::env::var("LOCKKIT_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("LOCKKIT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    // One thread per server, each with its own streams from the seed.
    let until = Instant::now() + Duration::from_secs(secs);
    let found: Vec<(usize, Vec<String>)> = std::thread::scope(|scope| {
        let runs: Vec<_> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| scope.spawn(move || fuzz(t, seed.wrapping_add(i as u64), until)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let cases: usize = found.iter().map(|f| f.0).sum();
    failures.extend(found.into_iter().flat_map(|f| f.1));
    assert!(
        failures.is_empty(),
        "{} difference(s) with redis-server (replay with LOCKKIT_FUZZ_SEED={seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{cases} random streams and {} corpus streams read as redis-server reads them (seed {seed})", corpus.len());
}

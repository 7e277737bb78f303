//! `lockkit lua serve` as the sandbox tests run it: the server process, a RESP2 client, and
//! FUNCTION RESTORE payloads built by hand (Redis's RDB `FUNCTION2` records and CRC-64).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a reply may take before the test calls the server stuck: far beyond what any of
/// the requests of these tests costs on a loaded machine once fixed.
pub(crate) const STUCK: Duration = Duration::from_secs(20);

/// `lockkit lua serve --port 0 [extra]`, killed and reaped on drop.
#[derive(Debug)]
pub(crate) struct Serve {
    child: Child,
    pub port: u16,
}

impl Serve {
    pub(crate) fn start(extra: &[&str]) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockkit"));
        cmd.args(["lua", "serve", "--port", "0"]).args(extra);
        Serve::spawn(cmd)
    }

    /// [`Serve::start`] under an address-space limit of `bytes` (`prlimit --as`), as a
    /// container or `ulimit -v` runs it: a reservation past it aborts the process.
    pub(crate) fn start_limited(bytes: u64, extra: &[&str]) -> Serve {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--as={bytes}"))
            .arg(env!("CARGO_BIN_EXE_lockkit"))
            .args(["lua", "serve", "--port", "0"])
            .args(extra);
        Serve::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Serve {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("lockkit starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("lockkit prints its port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the first line is the port, got {line:?}")
        });
        Serve { child, port }
    }

    /// A new client connection.
    pub(crate) fn connect(&self) -> Client {
        Client::to(self.port)
    }

    /// The server's process id.
    #[allow(dead_code)]
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running (not aborted).
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The server's resident memory now and at its peak, in KiB (`/proc/PID/status`).
    #[allow(dead_code)]
    pub(crate) fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One client connection speaking RESP2.
#[derive(Debug)]
pub(crate) struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    /// A connection to the server on loopback `port` (lua serve or a real redis-server).
    pub(crate) fn to(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
        s.set_read_timeout(Some(STUCK)).expect("read timeout");
        Client {
            reader: BufReader::new(s.try_clone().expect("clone socket")),
            stream: s,
        }
    }

    /// Sends one command (bulk strings, any bytes) and reads its reply.
    pub(crate) fn call(&mut self, argv: &[&[u8]]) -> Reply {
        self.send(argv);
        self.reply()
    }

    pub(crate) fn send(&mut self, argv: &[&[u8]]) {
        let mut out = format!("*{}\r\n", argv.len()).into_bytes();
        for a in argv {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).expect("send");
    }

    pub(crate) fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply; a stuck server (nothing within [`STUCK`]) fails the test.
    pub(crate) fn reply(&mut self) -> Reply {
        self.try_reply()
            .unwrap_or_else(|e| panic!("no reply within {STUCK:?}: {e}"))
    }

    /// Reads one reply as the bytes the server sent (RESP2 or RESP3), to compare encodings
    /// that [`Reply`] folds together (a null array `*-1` and a null bulk string `$-1`).
    #[allow(dead_code)]
    pub(crate) fn raw_reply(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).expect("a reply");
        assert!(line.len() >= 3, "a truncated reply line {line:?}");
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let n: i64 = text.parse().unwrap_or(-1);
        match line[0] {
            b'$' | b'=' | b'!' if n >= 0 => {
                let mut body = vec![0; n as usize + 2];
                self.reader.read_exact(&mut body).expect("a bulk body");
                line.extend_from_slice(&body);
            }
            b'*' | b'~' | b'>' | b'%' | b'|' if n >= 0 => {
                let items = if matches!(line[0], b'%' | b'|') {
                    2 * n
                } else {
                    n
                };
                for _ in 0..items {
                    let item = self.raw_reply();
                    line.extend_from_slice(&item);
                }
            }
            _ => {}
        }
        line
    }

    pub(crate) fn try_reply(&mut self) -> std::io::Result<Reply> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        let text = String::from_utf8_lossy(&line[1..line.len().saturating_sub(2)]).into_owned();
        Ok(match line[0] {
            b'+' => Reply::Status(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(text.parse().expect("integer reply")),
            b'$' if text == "-1" => Reply::Nil,
            b'$' => {
                let n: usize = text.parse().expect("bulk length");
                let mut body = vec![0; n + 2];
                self.reader.read_exact(&mut body)?;
                body.truncate(n);
                Reply::Bulk(body)
            }
            b'*' if text == "-1" => Reply::Nil,
            b'*' => {
                let n: usize = text.parse().expect("array length");
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.try_reply()?);
                }
                Reply::Array(items)
            }
            other => panic!("unexpected reply type {:?}", other as char),
        })
    }
}

/// A reply as a test looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// `+OK`.
pub(crate) fn ok() -> Reply {
    Reply::Status("OK".into())
}

/// Redis's CRC-64 (Jones polynomial, reflected), table-driven.
pub(crate) fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut table = [0u64; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u64;
        for _ in 0..8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
        }
        *slot = c;
    }
    data.iter().fold(0u64, |crc, &b| {
        table[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// An RDB length: 6-bit, 14-bit, 32-bit or 64-bit.
pub(crate) fn rdb_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Closes a FUNCTION RESTORE payload: RDB version 10 and the CRC-64 of everything.
pub(crate) fn seal_payload(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// A FUNCTION RESTORE payload holding `libraries` (each a library's code), as FUNCTION DUMP
/// writes it.
pub(crate) fn function_payload(libraries: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for code in libraries {
        body.push(245);
        rdb_len(&mut body, code.len() as u64);
        body.extend_from_slice(code);
    }
    seal_payload(body)
}

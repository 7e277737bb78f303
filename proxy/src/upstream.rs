//! The upstream server: where it is (read once from the URL by [`lockkit::parse_url`]), and
//! connections to it (shared ones, and one per client that needs its own), over TCP, TLS or a
//! Unix socket, logged in with the URL's user and password and switched to the URL's database
//! before any client's traffic flows.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::resp;

/// How long connecting (and logging in) to the upstream server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how to connect upstream.
#[derive(Clone)]
pub struct Upstream {
    info: ConnectionInfo,
    shown: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// One connection to the upstream server.
#[derive(Debug)]
pub enum UpstreamConn {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// A Unix socket.
    Unix(tokio::net::UnixStream),
}

/// The reading half of an upstream connection, whatever its transport.
pub(crate) type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
/// The writing half of an upstream connection, whatever its transport.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;

impl UpstreamConn {
    /// Its two halves, each usable on its own.
    pub(crate) fn into_boxed_split(self) -> (BoxRead, BoxWrite) {
        match self {
            UpstreamConn::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            UpstreamConn::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (Box::new(r), Box::new(w))
            }
            UpstreamConn::Unix(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
        }
    }
}

impl Upstream {
    /// Reads `url` (`redis://`, `rediss://`, `redis+unix://`, user and password in it).
    ///
    /// # Errors
    /// [`lockkit::Error::InvalidOptions`] for a URL that does not parse; its text names the URL
    /// with the password hidden.
    pub fn from_url(url: &str) -> lockkit::Result<Upstream> {
        let info = lockkit::parse_url(url)?;
        let tls = match info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => Some(Arc::new(
                lockkit::tls_config(*insecure, None).map_err(lockkit::Error::Redis)?,
            )),
            _ => None,
        };
        Ok(Upstream {
            info,
            shown: lockkit::redact_url(url),
            tls,
        })
    }

    /// The URL with its password hidden.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// A new connection, logged in and on the URL's database.
    ///
    /// # Errors
    /// The connection failed, timed out, or the server refused the login or the database; the
    /// text never holds the password.
    pub async fn connect(&self) -> Result<UpstreamConn, String> {
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connect_inner()).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
        }
    }

    async fn connect_inner(&self) -> Result<UpstreamConn, String> {
        let mut conn = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let s = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                UpstreamConn::Tcp(s)
            }
            ConnectionAddr::TcpTls { host, port, .. } => {
                let s = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                let config = self.tls.clone().ok_or("TLS is not set up")?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| format!("TLS server name {host}: {e}"))?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, s)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                UpstreamConn::Tls(Box::new(tls))
            }
            ConnectionAddr::Unix(path) => UpstreamConn::Unix(
                tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            other => return Err(format!("unsupported address {other}")),
        };
        let settings = self.info.redis_settings();
        let mut hello = Vec::new();
        let mut expected = 0;
        if let Some(password) = settings.password() {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = settings.username() {
                args.push(user.as_bytes());
            }
            args.push(password.as_bytes());
            resp::encode_command(&mut hello, &args);
            expected += 1;
        }
        let db = settings.db().to_string();
        if settings.db() != 0 {
            resp::encode_command(&mut hello, &[b"SELECT", db.as_bytes()]);
            expected += 1;
        }
        if expected > 0 {
            match &mut conn {
                UpstreamConn::Tcp(s) => login(s, &hello, expected).await?,
                UpstreamConn::Tls(s) => login(s.as_mut(), &hello, expected).await?,
                UpstreamConn::Unix(s) => login(s, &hello, expected).await?,
            }
        }
        Ok(conn)
    }
}

/// Sends AUTH/SELECT and reads their `expected` replies; an error reply is the error.
async fn login<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    commands: &[u8],
    expected: usize,
) -> Result<(), String> {
    s.write_all(commands).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(256);
    let mut seen = 0;
    while seen < expected {
        let n = s.read_buf(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection while logging in".into());
        }
        while let Some(len) = resp::frame_len(&buf).map_err(|e| e.to_string())? {
            if let resp::ReplyKind::Error(e) = resp::reply_kind(&buf[..len]) {
                return Err(String::from_utf8_lossy(e).into_owned());
            }
            buf.drain(..len);
            seen += 1;
        }
    }
    Ok(())
}

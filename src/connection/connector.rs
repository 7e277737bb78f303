//! Opening a connection to one Redis server and logging in: TCP, TLS (`rediss://`) or a Unix
//! socket, from a URL's settings ([`crate::parse_url`]).
//!
//! lockkit's own pipelined connections start here, and so do `lockkit proxy`'s upstream
//! connections: [`Connector::connect`] opens the socket and runs the [`handshake`] (`AUTH`,
//! `SELECT`, `CLIENT SETINFO` unless the settings skip it); the [`ServerStream`] it returns is
//! read and written as one, or split into halves that two tasks own.
//!
//! ```no_run
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let info = lockkit::parse_url("redis://:s3cret@127.0.0.1:6379/2")?;
//! let connector = lockkit::net::Connector::new(info, None)?;
//! // Logged in with the URL's password and on database 2.
//! let mut stream = connector.connect().await?;
//! stream.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
//! let mut reply = [0; 7];
//! stream.read_exact(&mut reply).await?;
//! assert_eq!(&reply, b"+PONG\r\n");
//! # Ok(()) }
//! ```

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo, RedisError,
    RedisResult,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

use crate::resp::{frame_len, parse_frame};

/// Opens connections to one server: its address and login from a URL, and for `rediss://` the
/// TLS set-up, built once.
#[derive(Clone)]
pub struct Connector {
    info: ConnectionInfo,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address only: the settings hold the password.
        f.debug_struct("Connector")
            .field("addr", &self.info.addr().to_string())
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// Connections to `info`'s server; `rediss://` trusts `tls_root_ca` (PEM) if given, else
    /// the web's roots (see [`tls_config`]).
    ///
    /// # Errors
    /// A `tls_root_ca` that is not PEM certificates.
    pub fn new(info: ConnectionInfo, tls_root_ca: Option<&[u8]>) -> RedisResult<Connector> {
        let tls = match info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => {
                Some(Arc::new(tls_config(*insecure, tls_root_ca)?))
            }
            _ => None,
        };
        Ok(Connector { info, tls })
    }

    /// The address and the login it connects with.
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// A new connection, logged in and on the URL's database ([`handshake`] with the URL's
    /// settings). It takes as long as the network does: put a timeout around it.
    ///
    /// # Errors
    /// The connection failed (refused, no such socket, a TLS failure: its text starts with
    /// `TLS:`), or the [`handshake`] did. No error text holds the password.
    pub async fn connect(&self) -> RedisResult<ServerStream> {
        let mut stream = self.open().await?;
        handshake(&mut stream, self.info.redis_settings()).await?;
        Ok(stream)
    }

    /// The socket (and TLS session), not logged in yet.
    async fn open(&self) -> RedisResult<ServerStream> {
        let transport = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                tune_tcp(&s)?;
                Transport::Tcp(s)
            }
            ConnectionAddr::TcpTls { host, port, .. } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                tune_tcp(&s)?;
                let config = self
                    .tls
                    .clone()
                    .ok_or_else(|| invalid("TLS is not set up"))?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| invalid(&format!("TLS server name {host}: {e}")))?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, s)
                    .await
                    .map_err(|e| io::Error::new(e.kind(), format!("TLS: {e}")))?;
                Transport::Tls(Box::new(tls))
            }
            ConnectionAddr::Unix(path) => Transport::Unix(UnixStream::connect(path).await?),
            other => return Err(invalid(&format!("unsupported address {other}"))),
        };
        Ok(ServerStream(transport))
    }
}

/// How long a TCP connection may be idle before the kernel probes the peer, how far apart
/// the probes are, and how many may go unanswered: a peer gone without a reset (a host that
/// died, a dropped NAT or load-balancer entry) is found within about 30 s even while no call is
/// made. With calls in flight, the connection's own silence rule is faster (`src/connection/link/driver.rs`).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "freebsd"
))]
const KEEPALIVE_PROBES: u32 = 3;

/// How long sent data may stay unacknowledged before the kernel gives up on the connection
/// (`TCP_USER_TIMEOUT`, Linux): instead of retransmitting for about 15 minutes.
#[cfg(any(target_os = "linux", target_os = "android"))]
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// No Nagle delay (requests are written whole), and keepalive (with `TCP_USER_TIMEOUT` where
/// the platform has it) on every socket to a server.
fn tune_tcp(s: &TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let sock = socket2::SockRef::from(s);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "freebsd"
    ))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    sock.set_tcp_keepalive(&keepalive)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}

/// The same socket settings for connections redis-rs opens (a Redis Cluster's): no Nagle
/// delay, keepalive, and `TCP_USER_TIMEOUT` where the platform has it.
pub(crate) fn redis_tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "freebsd"
    ))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

pub(crate) fn invalid(what: &str) -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::InvalidInput,
        what.to_string(),
    ))
}

/// Logs in and selects the database as `settings` say, before any other traffic: `AUTH [user]
/// password` (or `HELLO 3 AUTH ...` for RESP3), `SELECT db` unless it is 0, and `CLIENT SETINFO`
/// with the library's name and version unless [`RedisConnectionInfo::skip_set_lib_name`] (as
/// redis-rs does; servers before 7.2 refuse it, which is ignored). Nothing is sent when there is
/// nothing to do.
///
/// # Errors
/// - a refused login: [`redis::ErrorKind::AuthenticationFailed`], the server's reply
///   (`WRONGPASS ...`) as its detail;
/// - a refused `SELECT`: the server's error (`ERR DB index is out of range`);
/// - the server closed the connection ([`io::ErrorKind::UnexpectedEof`]), or answered with
///   something that is not RESP (a parse error);
/// - an I/O error.
pub async fn handshake<S>(stream: &mut S, settings: &RedisConnectionInfo) -> RedisResult<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::new();
    let mut checked = Vec::new();
    let mut push = |cmd: &Cmd, check: bool| {
        cmd.write_packed_command(&mut out);
        checked.push(check);
    };
    let resp3 = settings.protocol() == ProtocolVersion::RESP3;
    let logs_in = settings.password().is_some();
    if resp3 {
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        if let Some(password) = settings.password() {
            hello
                .arg("AUTH")
                .arg(settings.username().unwrap_or("default"))
                .arg(password);
        }
        push(&hello, true);
    } else if let Some(password) = settings.password() {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = settings.username() {
            auth.arg(user);
        }
        push(auth.arg(password), true);
    }
    if settings.db() != 0 {
        push(redis::cmd("SELECT").arg(settings.db()), true);
    }
    if !settings.skip_set_lib_name() {
        let name = settings.lib_name().unwrap_or("redis-rs");
        let ver = settings.lib_ver().unwrap_or("");
        let mut setinfo = |field: &str, value: &str| {
            push(
                redis::cmd("CLIENT").arg("SETINFO").arg(field).arg(value),
                false,
            );
        };
        setinfo("LIB-NAME", name);
        setinfo("LIB-VER", ver);
    }
    if checked.is_empty() {
        return Ok(());
    }
    stream.write_all(&out).await?;
    stream.flush().await?;
    let mut buf = Vec::with_capacity(512);
    let mut next = 0;
    while next < checked.len() {
        let Some(len) = frame_len(&buf)? else {
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during the handshake",
                )
                .into());
            }
            continue;
        };
        let reply = parse_frame(&buf[..len])?;
        buf.drain(..len);
        if checked[next] {
            if let Err(e) = reply.extract_error() {
                // As redis-rs reports it: a refused login is an authentication failure.
                return Err(if next == 0 && logs_in {
                    RedisError::from((
                        redis::ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                        server_reply(&e),
                    ))
                } else {
                    e
                });
            }
        }
        next += 1;
    }
    Ok(())
}

/// A server's error reply as it sent it: `WRONGPASS invalid username-password pair ...`.
fn server_reply(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// The TLS settings lockkit uses for `rediss://` (also `lockkit proxy`'s upstream): trust
/// `root_ca` (PEM) if given, else the web's roots; `insecure` (`rediss://...#insecure`) skips
/// the certificate check, as redis-rs does for that URL.
///
/// # Errors
/// A `root_ca` that is not PEM certificates.
///
/// ```
/// let config = lockkit::tls_config(false, None).unwrap();
/// assert!(config.alpn_protocols.is_empty());
/// ```
pub fn tls_config(insecure: bool, root_ca: Option<&[u8]>) -> RedisResult<rustls::ClientConfig> {
    ensure_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&format!("TLS: {e}")))?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth());
    }
    let roots = match root_ca {
        Some(pem) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| invalid(&format!("TLS root CA: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid(&format!("TLS root CA: {e}")))?;
            }
            roots
        }
        None => rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    };
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// `rediss://...#insecure`: the server's certificate is not checked (signatures still are).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One connection to a server: TCP, TLS over TCP, or a Unix socket.
#[derive(Debug)]
pub struct ServerStream(Transport);

#[derive(Debug)]
enum Transport {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

impl ServerStream {
    /// Makes closing this connection an abort: the kernel drops whatever it still had queued
    /// to send and resets the connection (`SO_LINGER` 0) instead of delivering the rest first.
    /// For a connection given up while its commands may still be in flight: delivered later,
    /// they could land after their clean-up ran on another connection. A Unix socket has
    /// nothing in flight (its peer holds what was written).
    pub(crate) fn abort(&self) {
        let tcp = match &self.0 {
            Transport::Tcp(s) => s,
            Transport::Tls(s) => s.get_ref().0,
            Transport::Unix(_) => return,
        };
        if let Err(e) = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO)) {
            tracing::debug!(error = %e, "could not set SO_LINGER 0 on a connection given up");
        }
    }

    /// Its reading and writing halves, each usable on its own (by two tasks). Dropping the
    /// writing half of a TCP or Unix connection shuts down its writing direction.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self.0 {
            Transport::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadHalf(ReadInner::Tcp(r)), WriteHalf(WriteInner::Tcp(w)))
            }
            Transport::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ReadHalf(ReadInner::Tls(r)), WriteHalf(WriteInner::Tls(w)))
            }
            Transport::Unix(s) => {
                let (r, w) = s.into_split();
                (ReadHalf(ReadInner::Unix(r)), WriteHalf(WriteInner::Unix(w)))
            }
        }
    }
}

/// The reading half of a [`ServerStream`].
#[derive(Debug)]
pub struct ReadHalf(ReadInner);

#[derive(Debug)]
enum ReadInner {
    Tcp(tcp::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
    Unix(unix::OwnedReadHalf),
}

/// The writing half of a [`ServerStream`].
#[derive(Debug)]
pub struct WriteHalf(WriteInner);

#[derive(Debug)]
enum WriteInner {
    Tcp(tcp::OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
    Unix(unix::OwnedWriteHalf),
}

/// Calls `$call` on whichever transport `$inner` holds (an enum of `Tcp`, `Tls`, `Unix`).
macro_rules! each {
    ($ty:ident, $inner:expr, |$s:ident| $call:expr) => {
        match $inner {
            $ty::Tcp($s) => $call,
            $ty::Tls($s) => $call,
            $ty::Unix($s) => $call,
        }
    };
}

/// `AsyncRead` for a wrapper `$ty` of an enum `$inner` of transports.
macro_rules! impl_read {
    ($ty:ident, $inner:ident) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                each!($inner, &mut self.get_mut().0, |s| Pin::new(s)
                    .poll_read(cx, buf))
            }
        }
    };
}

/// `AsyncWrite` for a wrapper `$ty` of an enum `$inner` of transports.
macro_rules! impl_write {
    ($ty:ident, $inner:ident) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                each!($inner, &mut self.get_mut().0, |s| Pin::new(s)
                    .poll_write(cx, buf))
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                each!($inner, &mut self.get_mut().0, |s| Pin::new(s)
                    .poll_flush(cx))
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                each!($inner, &mut self.get_mut().0, |s| Pin::new(s)
                    .poll_shutdown(cx))
            }
        }
    };
}

impl_read!(ServerStream, Transport);
impl_write!(ServerStream, Transport);
impl_read!(ReadHalf, ReadInner);
impl_write!(WriteHalf, WriteInner);

/// rustls needs a process-wide crypto provider; pick ring unless the application already
/// installed one (then that one is used).
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_test_support::{RedisServer, ServerOptions};

    fn server_with_password() -> RedisServer {
        RedisServer::start_with(ServerOptions {
            extra_args: vec!["--requirepass".into(), "Pw-4kq".into()],
            password: Some("Pw-4kq".into()),
            ..ServerOptions::default()
        })
    }

    fn connector(url: &str) -> Connector {
        Connector::new(crate::url::parse_url(url).unwrap(), None).unwrap()
    }

    #[tokio::test]
    async fn every_tcp_connection_has_keepalive_and_a_user_timeout() {
        let server = RedisServer::start();
        let stream = connector(&server.url()).connect().await.unwrap();
        let Transport::Tcp(tcp) = &stream.0 else {
            panic!("a redis:// URL gave no plain TCP connection")
        };
        let sock = socket2::SockRef::from(tcp);
        assert!(sock.keepalive().unwrap(), "no keepalive");
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        #[cfg(target_os = "linux")]
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
    }

    /// A cluster's connections are redis-rs's: they get the same socket settings.
    #[test]
    fn redis_rs_connections_get_keepalive_and_a_user_timeout_too() {
        let settings = redis_tcp_settings();
        assert!(settings.nodelay());
        let keepalive = settings.keepalive().expect("no keepalive");
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_tcp_keepalive(keepalive).unwrap();
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        #[cfg(target_os = "linux")]
        assert_eq!(settings.user_timeout(), Some(USER_TIMEOUT));
    }

    /// Sends one command and reads its whole reply.
    async fn call<R, W>(r: &mut R, w: &mut W, args: &[&str]) -> Vec<u8>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        w.write_all(&cmd.get_packed_command()).await.unwrap();
        w.flush().await.unwrap();
        let mut buf = Vec::new();
        loop {
            if let Some(len) = frame_len(&buf).unwrap() {
                buf.truncate(len);
                return buf;
            }
            assert!(r.read_buf(&mut buf).await.unwrap() > 0, "closed");
        }
    }

    #[tokio::test]
    async fn connect_logs_in_and_selects_the_urls_database_and_the_halves_work_apart() {
        let server = server_with_password();
        let url = format!("redis://:Pw-4kq@127.0.0.1:{}/3", server.port());
        let stream = connector(&url).connect().await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let info = call(&mut r, &mut w, &["CLIENT", "INFO"]).await;
        let info = String::from_utf8_lossy(&info);
        assert!(info.contains(" db=3 "), "{info}");
        // A writer task and a reader task, each with its half.
        let writer = tokio::spawn(async move {
            for i in 0..100 {
                let set = redis::cmd("SET").arg(format!("k{i}")).arg(i).clone();
                w.write_all(&set.get_packed_command()).await.unwrap();
            }
            w.flush().await.unwrap();
            w
        });
        let mut buf = Vec::new();
        let mut replies = 0;
        while replies < 100 {
            match frame_len(&buf).unwrap() {
                Some(len) => {
                    assert_eq!(&buf[..len], b"+OK\r\n");
                    buf.drain(..len);
                    replies += 1;
                }
                None => assert!(r.read_buf(&mut buf).await.unwrap() > 0, "closed"),
            }
        }
        let mut w = writer.await.unwrap();
        assert_eq!(call(&mut r, &mut w, &["DBSIZE"]).await, b":100\r\n");
    }

    #[tokio::test]
    async fn a_refused_login_says_what_the_server_said_and_never_the_password() {
        let server = server_with_password();
        for url in [
            format!("redis://:wrong-Pw-1@127.0.0.1:{}", server.port()),
            format!("redis://nobody:wrong-Pw-1@127.0.0.1:{}", server.port()),
        ] {
            let e = connector(&url).connect().await.unwrap_err();
            assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
            assert!(e.detail().unwrap().starts_with("WRONGPASS "), "{e}");
            assert!(!format!("{e} {e:?}").contains("wrong-Pw-1"), "{e}");
        }
        // The right password, a database the server does not have: the server's error.
        let url = format!("redis://:Pw-4kq@127.0.0.1:{}/99", server.port());
        let e = connector(&url).connect().await.unwrap_err();
        assert_eq!(e.code(), Some("ERR"), "{e}");
        assert!(e.to_string().contains("DB index is out of range"), "{e}");
    }

    #[tokio::test]
    async fn settings_that_skip_the_library_name_send_no_client_setinfo() {
        let server = RedisServer::start();
        let info = crate::url::parse_url(&server.url()).unwrap();
        let quiet = info.redis_settings().clone().set_skip_set_lib_name();
        for (info, sent) in [
            (info.clone(), true),
            (info.set_redis_settings(quiet), false),
        ] {
            server.inline("CONFIG RESETSTAT").unwrap();
            let mut stream = Connector::new(info, None).unwrap().connect().await.unwrap();
            let (mut r, mut w) = tokio::io::split(&mut stream);
            let stats = call(&mut r, &mut w, &["INFO", "commandstats"]).await;
            let errors = call(&mut r, &mut w, &["INFO", "errorstats"]).await;
            // Before Redis 7.2 the server refuses `CLIENT SETINFO`, which counts as an error.
            let text = String::from_utf8_lossy(&stats) + String::from_utf8_lossy(&errors);
            let seen = text.contains("cmdstat_client|setinfo") || text.contains("errorstat_ERR");
            assert_eq!(seen, sent, "{text}");
        }
    }

    #[test]
    fn a_connector_shows_no_password() {
        let shown = format!("{:?}", connector("redis://u:Pw-4kq@127.0.0.1:1/2"));
        assert!(
            shown.contains("127.0.0.1:1") && !shown.contains("Pw-4kq"),
            "{shown}"
        );
    }
}

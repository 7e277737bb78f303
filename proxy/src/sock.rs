//! The proxy's upstream connections: a plain TCP one (`redis://`) is opened here, so that its
//! socket gets TCP keepalive and, on Linux, `TCP_USER_TIMEOUT` (a peer that stops
//! acknowledging is noticed by the kernel, idle or not); TLS and Unix sockets are lockkit's own
//! [`ServerStream`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use lockkit::net::{ReadHalf, ServerStream, WriteHalf};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Idle time before the first keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Probes unanswered before the kernel gives the connection up.
const KEEPALIVE_PROBES: u32 = 3;

/// One upstream connection.
#[derive(Debug)]
pub enum UpConn {
    /// Plain TCP, with keepalive.
    Tcp(TcpStream),
    /// TLS or a Unix socket.
    Lib(ServerStream),
}

/// The reading half of an [`UpConn`].
#[derive(Debug)]
pub enum UpRead {
    /// Plain TCP.
    Tcp(OwnedReadHalf),
    /// TLS or a Unix socket.
    Lib(ReadHalf),
}

/// The writing half of an [`UpConn`].
#[derive(Debug)]
pub enum UpWrite {
    /// Plain TCP.
    Tcp(OwnedWriteHalf),
    /// TLS or a Unix socket.
    Lib(WriteHalf),
}

impl UpConn {
    /// Its two halves, each usable on its own.
    pub fn into_split(self) -> (UpRead, UpWrite) {
        match self {
            UpConn::Tcp(s) => {
                let (r, w) = s.into_split();
                (UpRead::Tcp(r), UpWrite::Tcp(w))
            }
            UpConn::Lib(s) => {
                let (r, w) = s.into_split();
                (UpRead::Lib(r), UpWrite::Lib(w))
            }
        }
    }
}

/// Opens a TCP connection to `host:port` with `TCP_NODELAY`, keepalive (10 s idle, then a probe
/// every 5 s, 3 probes) and, on Linux, `TCP_USER_TIMEOUT` of `user_timeout` (sent data not
/// acknowledged for that long fails the connection).
pub(crate) async fn connect_tcp(
    host: &str,
    port: u16,
    user_timeout: Duration,
) -> io::Result<TcpStream> {
    let s = TcpStream::connect((host, port)).await?;
    s.set_nodelay(true)?;
    tune(&s, user_timeout)?;
    Ok(s)
}

fn tune(s: &TcpStream, user_timeout: Duration) -> io::Result<()> {
    let sock = socket2::SockRef::from(s);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    sock.set_tcp_keepalive(&keepalive)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(user_timeout))?;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (user_timeout, KEEPALIVE_PROBES);
    Ok(())
}

/// The keepalive and user timeout of a plain TCP connection (for tests): whether keepalive is
/// on, and `TCP_USER_TIMEOUT` where there is one.
pub fn socket_options(conn: &UpConn) -> Option<(bool, Option<Duration>)> {
    let UpConn::Tcp(s) = conn else { return None };
    let sock = socket2::SockRef::from(s);
    let keepalive = sock.keepalive().ok()?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let user = sock.tcp_user_timeout().ok()?;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let user = None;
    Some((keepalive, user))
}

macro_rules! either {
    ($ty:ident, $this:expr, |$s:ident| $call:expr) => {
        match $this.get_mut() {
            $ty::Tcp($s) => $call,
            $ty::Lib($s) => $call,
        }
    };
}

impl AsyncRead for UpConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        either!(UpConn, self, |s| Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for UpConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        either!(UpConn, self, |s| Pin::new(s).poll_write(cx, b))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(UpConn, self, |s| Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(UpConn, self, |s| Pin::new(s).poll_shutdown(cx))
    }
}

impl AsyncRead for UpRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        either!(UpRead, self, |s| Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for UpWrite {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        either!(UpWrite, self, |s| Pin::new(s).poll_write(cx, b))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(UpWrite, self, |s| Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(UpWrite, self, |s| Pin::new(s).poll_shutdown(cx))
    }
}

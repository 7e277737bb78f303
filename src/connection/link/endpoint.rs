//! Where and how a link connects: the URL's connector, the timeouts, the retries; each
//! connection it opens is a [`Wire`] and the [`Driver`] task that owns its socket.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionInfo, RedisResult};

use super::driver::{Driver, GaveUp};
use super::wire::Wire;
use crate::connection::connector::Connector;

/// Numbers every connection this process makes, so that a number names one connection (and so
/// one server process) for good: see [`Link::query_on`].
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// How long after a connection was given up with requests in flight one of them may still
/// reach the server, as far as lockkit counts: the connection is aborted (`SO_LINGER` 0), so
/// our kernel drops what it had queued at once instead of retransmitting it for up to
/// `TCP_USER_TIMEOUT` (30 s, `connector.rs`); this bound covers that span and some margin, for
/// bytes some middlebox had already acknowledged. An acquire's clean-up keeps watching its key
/// this long ([`Link::late_delivery_until`]).
pub(crate) const LATE_DELIVERY: Duration = Duration::from_secs(35);

/// Where and how to connect, read once from the URL and the client's options.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(super) connector: Connector,
    connect_timeout: Duration,
    pub(super) response_timeout: Option<Duration>,
    retries: usize,
    /// Whether a connection that has gone silent is replaced ([`SILENT_TIMEOUTS`]).
    replace_silent: bool,
    /// The link's record of connections given up with requests in flight.
    pub(super) gave_up: GaveUp,
}

impl Endpoint {
    pub(crate) fn new(
        info: ConnectionInfo,
        tls_root_ca: Option<&[u8]>,
        connect_timeout: Duration,
        response_timeout: Option<Duration>,
        retries: usize,
    ) -> RedisResult<Endpoint> {
        Ok(Endpoint {
            connector: Connector::new(info, tls_root_ca)?,
            connect_timeout,
            response_timeout,
            retries,
            replace_silent: true,
            gave_up: GaveUp::default(),
        })
    }

    /// This endpoint with a record of given-up connections of its own: one per link.
    pub(super) fn for_one_link(mut self) -> Endpoint {
        self.gave_up = GaveUp::default();
        self
    }

    /// Keeps a silent connection (a test of what happens on it meanwhile).
    #[cfg(test)]
    pub(super) fn keeping_silent_connections(mut self) -> Endpoint {
        self.replace_silent = false;
        self
    }

    /// One connection, logged in, on the URL's database, within the connect timeout.
    async fn connect_once(&self) -> RedisResult<(Arc<Wire>, Driver)> {
        match tokio::time::timeout(self.connect_timeout, self.connect_inner()).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting: no answer within {:?}", self.connect_timeout),
            )
            .into()),
        }
    }

    async fn connect_inner(&self) -> RedisResult<(Arc<Wire>, Driver)> {
        let stream = self.connector.connect().await?;
        let wire = Arc::new(Wire {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            ..Wire::default()
        });
        let driver = Driver {
            stream,
            wire: wire.clone(),
            rbuf: vec![0; 16 * 1024],
            rlen: 0,
            wbuf: Vec::with_capacity(16 * 1024),
            wpos: 0,
            timeout: self.response_timeout,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
            deferred: false,
            replace_silent: self.replace_silent,
            silent_timeouts: 0,
            silent_since: None,
            gave_up: self.gave_up.clone(),
            ended: false,
        };
        Ok((wire, driver))
    }

    /// A connection, retrying a failed attempt up to `retries` times with a doubling pause.
    pub(super) async fn connect(&self) -> RedisResult<Arc<Wire>> {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            match self.connect_once().await {
                Ok((wire, driver)) => {
                    tokio::spawn(driver);
                    return Ok(wire);
                }
                // A refused login or an unknown database does not get better by retrying.
                Err(e)
                    if attempt >= self.retries
                        || e.code().is_some()
                        || e.kind() == redis::ErrorKind::AuthenticationFailed =>
                {
                    return Err(e)
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

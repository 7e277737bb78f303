//! A client's connection to a Redis Cluster: redis-rs's cluster connection, given what lockkit's
//! own connections have where redis-rs lets it, and said plainly where it does not.
//!
//! - **Keepalive and `TCP_USER_TIMEOUT`**: every socket to a node has the settings of lockkit's
//!   own connections (`connector.rs`), through redis-rs's `TcpSettings`: a node gone without a
//!   reset is found by the kernel within about 30 s, even while idle.
//! - **A runtime that ends**: redis-rs runs a cluster connection in a task on the runtime that
//!   made it; when that runtime ends, every later call failed at once, forever ("Unable to send
//!   command"). A sentinel task beside it says when that runtime is gone, and the next call
//!   makes the connection again on its own runtime, as a one-server connection does.
//!
//! What they lack beside lockkit's own connections, and why: redis-rs owns their sockets, so a
//! silent connection is not given up after a few timeouts (each call still fails at the response
//! timeout, and the kernel closes the socket within about 30 s: keepalive, `TCP_USER_TIMEOUT`),
//! and a connection given up is not aborted: an acquire's clean-up cannot tell when a command
//! sent on it could still land late (`client/cleanup.rs`, rule 3). The cluster client re-sends a
//! command after a dropped connection; acquires and releases are written to bear it
//! (`SET ... NX GET`, the "released" marker: docs/LIBRARY.md, "Redis Cluster").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// One of a client's connections to a cluster, made again on the caller's runtime when the
/// runtime that made it has ended. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ClusterConn(Arc<ClusterInner>);

struct ClusterInner {
    client: ClusterClient,
    connect_timeout: Duration,
    current: Mutex<Made>,
    /// One remake at a time.
    remaking: tokio::sync::Mutex<()>,
}

/// A cluster connection and whether the runtime that made it (and runs its task) still runs.
struct Made {
    conn: ClusterConnection,
    runtime_runs: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClusterConn {
    /// A connection to the cluster `client` knows, within `connect_timeout`.
    pub(crate) async fn open(
        client: ClusterClient,
        connect_timeout: Duration,
    ) -> RedisResult<ClusterConn> {
        let made = make(&client, connect_timeout).await?;
        Ok(ClusterConn(Arc::new(ClusterInner {
            client,
            connect_timeout,
            current: Mutex::new(made),
            remaking: tokio::sync::Mutex::new(()),
        })))
    }

    /// The connection to use now: the current one, or a new one made on this runtime when the
    /// runtime of the current one has ended.
    async fn live(&self) -> RedisResult<ClusterConnection> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _one = self.0.remaking.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        tracing::debug!("the runtime that made a cluster connection has ended; connecting again");
        let made = make(&self.0.client, self.0.connect_timeout).await?;
        let conn = made.conn.clone();
        *lock(&self.0.current) = made;
        Ok(conn)
    }

    fn current(&self) -> Option<ClusterConnection> {
        let made = lock(&self.0.current);
        made.runtime_runs
            .load(Ordering::Acquire)
            .then(|| made.conn.clone())
    }
}

/// A cluster connection made on the current runtime, with a sentinel task there that says when
/// the runtime has ended (its drop, as the runtime drops its tasks).
async fn make(client: &ClusterClient, connect_timeout: Duration) -> RedisResult<Made> {
    let conn = match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
        Ok(conn) => conn?,
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connecting to the cluster: no answer within {connect_timeout:?}"),
            )
            .into())
        }
    };
    let runtime_runs = Arc::new(AtomicBool::new(true));
    let sentinel = RuntimeSentinel(Arc::clone(&runtime_runs));
    tokio::spawn(async move {
        let _sentinel = sentinel;
        std::future::pending::<()>().await;
    });
    Ok(Made { conn, runtime_runs })
}

/// Dropped with the runtime it was spawned on: clears its flag.
struct RuntimeSentinel(Arc<AtomicBool>);

impl Drop for RuntimeSentinel {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { self.live().await?.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.live().await?;
            conn.req_packed_commands(pipeline, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

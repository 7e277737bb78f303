//! The client task end to end, its client an in-memory stream: what reaches the client, and in
//! how many writes.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use lockkit_test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::plugin::ConnInfo;
use crate::shared::ProxyShared;
use crate::upstream::route::Up;
use crate::upstream::Upstream;
use crate::ProxyOptions;

/// A writer that counts the writes that took bytes.
struct Counting<W> {
    inner: W,
    writes: Arc<AtomicUsize>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counting<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A pipelined burst on a shared connection goes upstream as one request and comes back as one
/// delivery, written to the client in one go (it went as one request per command, each reply
/// written on its own: one system call per reply, a quarter of the throughput at `-P 16`).
#[tokio::test]
async fn a_pipelined_burst_is_answered_in_one_write() {
    let server = RedisServer::start();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let upstream = Upstream::from_url(&server.url()).expect("a valid URL");
    let options = ProxyOptions::new().shared_connections(1);
    let shared = Arc::new(ProxyShared::new(upstream, vec![], &options, stop.clone()));
    let info = ConnInfo { id: 1, peer: None };
    let up = Up::shared(info.id, &shared);
    let (mut client, proxy_end) = tokio::io::duplex(1 << 20);
    let (cr, cw) = tokio::io::split(proxy_end);
    let writes = Arc::new(AtomicUsize::new(0));
    let cw = Counting {
        inner: cw,
        writes: writes.clone(),
    };
    let task = tokio::spawn(super::serve(shared, info, (cr, cw), up, stop));

    let mut burst = Vec::new();
    let mut want = Vec::new();
    for i in 0..8 {
        let v = format!("v{i}");
        burst.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n{v}\r\n").as_bytes());
        burst.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        want.extend_from_slice(format!("+OK\r\n$2\r\n{v}\r\n").as_bytes());
    }
    client
        .write_all(&burst)
        .await
        .expect("the burst is written");
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut got))
        .await
        .expect("every reply within 10 s")
        .expect("replies");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    let writes = writes.load(Ordering::Relaxed);
    println!("16 replies reached the client in {writes} writes");
    assert!(
        writes <= 2,
        "16 pipelined replies reached the client in {writes} writes"
    );
    let _ = stop_tx.send(true);
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
}

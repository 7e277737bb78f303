//! The way `lockkit bench` reaches the network faults ([`lockkit_report::faults::FaultsOptions`]):
//! one implementation injects them, the proxy's `faults` plugin (`lockkit_proxy::faults`), and
//! the `lockkit` binary hands it over through [`NetworkFaultInjector`] (this crate does not
//! depend on the proxy).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lockkit_report::faults::{FaultsOptions, NetworkFaultCounts};
use tokio::sync::watch;

use super::FaultLog;

/// A boxed future, for the object-safe traits below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Puts the network faults between the load generator and the target: `lockkit bench` runs
/// with one when `--faults` has `delay`, `drop` or `blackhole`. The `lockkit` binary hands over
/// the proxy's (`lockkit_proxy::bench::ProxyFaults`).
pub trait NetworkFaultInjector: Send + Sync + fmt::Debug {
    /// Stands in front of each of `urls`, in order; no fault until [`NetworkFaultPath::arm`].
    fn start<'a>(
        &'a self,
        urls: &'a [String],
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn NetworkFaultPath>>>;
}

/// The way to the target with the network faults on it, as [`NetworkFaultInjector::start`]
/// made it.
pub trait NetworkFaultPath: Send + Sync + fmt::Debug {
    /// The URLs to connect to instead of the target's, one per node, in the same order.
    fn urls(&self) -> Vec<String>;

    /// The faults of `options` begin (each node draws from its own seed, the first node from
    /// `options.seed`); blackhole windows count from `log.start()` and each is recorded in
    /// `log` (kind `blackhole`, with its node) when it ends, or when `stop` fires.
    fn arm(&self, options: FaultsOptions, log: Arc<FaultLog>, stop: watch::Receiver<bool>);

    /// The faults end (commands held already are let go at their time), once the window
    /// under way is recorded; what they did since [`NetworkFaultPath::arm`] (zero if never
    /// armed).
    fn disarm(&self) -> BoxFuture<'_, NetworkFaultCounts>;

    /// Closes the way.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
}

//! `lua serve` runs each command on its connection's worker thread (see `shared`), and a script
//! that runs long hands that worker over to a new thread, so that the sockets, the timers and
//! the other connections (BUSY, SCRIPT KILL) go on meanwhile.

use std::time::Duration;

/// After how long a running script hands its worker thread over (see [`hand_over`]).
pub(super) const SLOW_SCRIPT: Duration = Duration::from_millis(1);

thread_local! {
    /// This thread is a runtime worker running a command of `execute_as`.
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the thread as running a command on a worker until dropped.
pub(super) struct OnWorker;

impl OnWorker {
    pub(super) fn enter() -> OnWorker {
        ON_WORKER.with(|w| w.set(true));
        OnWorker
    }
}

impl Drop for OnWorker {
    fn drop(&mut self) {
        ON_WORKER.with(|w| w.set(false));
    }
}

/// Called from a script that has run [`SLOW_SCRIPT`] on a worker thread: tokio's
/// `block_in_place` moves the worker (its tasks, the sockets, the timers) to a new thread, and
/// this one goes on running the script outside the runtime. The worker moves as the call
/// starts, but comes back if it returns before the new thread picked it up: so it waits until
/// a task spawned meanwhile has run there (at most 100 ms).
pub(super) fn hand_over(rt: &tokio::runtime::Handle) {
    // Only a command run in `execute_as` holds a worker (not one on a blocking thread).
    if !ON_WORKER.with(|w| w.replace(false)) {
        return;
    }
    tokio::task::block_in_place(|| {
        let (ran, running) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let _ = ran.send(());
        });
        let _ = running.recv_timeout(Duration::from_millis(100));
    });
}

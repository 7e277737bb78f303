//! Redis's active expiry for `--clock wall`: ten times a second (Redis's default `hz`), the
//! keys past their deadline are deleted with their `expired` events, so that a subscriber
//! hears of a key nobody touches, as from redis-server. It runs only while `expired` events
//! are enabled (without them a key past its deadline is already invisible to every command).
//! On the frozen clock, the clock moving (`LOCKKIT.CLOCK`, `DEBUG SLEEP`) does the same.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::shared::ServeShared;

/// Redis's `serverCron` period at the default `hz 10`.
const PERIOD: Duration = Duration::from_millis(100);

/// Expires due keys every [`PERIOD`] until `stop`.
pub(super) async fn run(shared: Arc<ServeShared>, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(PERIOD);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = every.tick() => {
                if shared.expired_events_on() {
                    shared.tick().await;
                }
            }
        }
    }
}

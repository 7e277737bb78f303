//! The library's integration tests: one test binary (`cargo test -p lockkit --all-features --test
//! it`), one module per area, each against real servers that `tests/support` starts. One binary
//! links the world once instead of once per file (issue 43); a new area is a file here and a
//! `mod` line below. `tests/metrics.rs` stays a binary of its own: it installs the process-wide
//! metrics recorder and counts exact values, which the other modules' locks would add to.
//!
//! Run one area with a filter: `cargo test -p lockkit --all-features --test it -- lock::`.

// Shared by the example modules (builds and finds the example binaries).
#[cfg(feature = "tower")]
mod example_bin;

mod cleanup;
mod cluster;
#[cfg(feature = "tower")]
mod cron_example;
mod fair;
mod faults;
mod fencing;
#[cfg(feature = "tower")]
mod fencing_example;
mod guard;
mod layers;
mod lock;
#[cfg(feature = "tower")]
mod middleware;
#[cfg(all(feature = "tower", feature = "metrics"))]
mod orders_example;
mod probe;
mod proxy;
mod redlock;
mod redlock_wire;
mod rwlock;
mod safety;
mod security;
mod semaphore;
mod wait;
mod wire;

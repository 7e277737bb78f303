//! Test-only helpers for lockkit's real-server tests.
//!
//! The servers themselves come from [`lockkit_redis_proc`] (re-exported here, so a test writes
//! `use lockkit_test_support::RedisServer`): that crate is what `lockkit bench` uses at run time
//! too, while this one holds what only tests need, such as [`DelayRelay`], a slow network
//! between a client and a real server. Nothing here is a dependency of the `lockkit` binary.

#![warn(missing_docs)]

mod relay;

pub use lockkit_redis_proc::{
    free_port, Nutcracker, RedisCluster, RedisServer, ServerOptions, StartError,
};
pub use relay::DelayRelay;

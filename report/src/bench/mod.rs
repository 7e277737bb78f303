//! The report of a run: the JSON types of schema `lockkit.bench/1` ([`schema`]) and the terminal
//! summary ([`summary`](mod@summary)); the files a run writes are [`crate::files`].

pub mod schema;
pub mod summary;

pub use schema::*;
pub use summary::summary;

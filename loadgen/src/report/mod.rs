//! The report of a run: the JSON types of schema `lockkit.bench/1` ([`schema`]), the files a run
//! writes ([`files`]: atomic writes, HdrHistogram interval logs, file names), and the terminal
//! summary ([`summary`](mod@summary)).

pub mod files;
pub mod schema;
pub mod summary;

pub use files::{
    check_schema, check_writable, paths, read_json, read_report, schema_of, write_atomic,
    IntervalLog,
};
pub use schema::*;
pub use summary::summary;

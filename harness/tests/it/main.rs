//! The harness's integration tests: one test binary (`cargo test -p lockkit-harness
//! --all-features --test it`), one module per area: the emulation against real redis-servers,
//! the command table, the fuzzers. One binary links the world once instead of once per file
//! (issue 43); a new area is a file here and a `mod` line below.
//!
//! Run one area with a filter: `cargo test -p lockkit-harness --all-features --test it --
//! differential::`.

mod api;
mod command_coverage;
mod command_table;
mod differential;
mod fuzz_decoders;
mod fuzz_payloads;
mod fuzz_sandbox;
mod fuzz_transcript;
mod patterns;
// The RESP server on tokio (the `serve` feature).
#[cfg(feature = "serve")]
mod serve;

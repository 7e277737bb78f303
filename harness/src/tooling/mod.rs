//! The tooling around the engine: what turns text into commands and replies into text, and
//! what talks to a real server. Nothing here is part of Redis's scripting environment; the
//! engine (the crate root's other modules) never needs a server, a file or a terminal.
//!
//! - [`cmdline`]: redis-cli's quoting rules (`sdssplitargs`), both ways.
//! - [`format`](mod@format): replies printed as `redis-cli --no-raw` prints them.
//! - [`transcript`]: the transcript file format (command lines + expected replies).
//! - [`remote`]: a real server as a reply source (`--url`, the differential tests).
//! - [`run`]: running command lines and transcripts against either, for `lockkit lua`.

pub mod cmdline;
pub mod format;
pub mod remote;
pub mod run;
pub mod transcript;

//! The failures of the lock library and of redis-rs, mapped to the exit codes of `lockkit`
//! ([`lockkit_report::exit`], which has the codes and the other failures), for the commands
//! that connect (`lua`, `probe`, `proxy`).

use std::fmt;

use lockkit_report::exit::{bad_input, unreachable};

/// Bad input for a URL that does not parse, an unusable target for everything else.
pub(crate) fn connect_failure(e: &redis::RedisError, message: impl fmt::Display) -> anyhow::Error {
    if e.kind() == redis::ErrorKind::InvalidClientConfig {
        bad_input(message)
    } else {
        unreachable(message)
    }
}

/// Bad input for a lock-library error of kind `InvalidInput` (a URL that does not parse, an
/// option out of range), an unusable target for everything else.
pub(crate) fn lock_failure(e: &lockkit::Error, message: impl fmt::Display) -> anyhow::Error {
    if e.kind() == lockkit::ErrorKind::InvalidInput {
        bad_input(message)
    } else {
        unreachable(message)
    }
}

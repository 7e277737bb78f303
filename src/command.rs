//! The wire: a command lockkit encodes itself, as RESP bytes or as redis-rs's `Cmd`.

use redis::Cmd;

/// A command lockkit encodes itself: as RESP into a write buffer (the same bytes redis-rs
/// packs), or as redis-rs's `Cmd` where redis-rs sends it.
pub(crate) trait Command {
    /// Appends the command, encoded, to `out`.
    fn write(&self, out: &mut Vec<u8>);
    /// The command as redis-rs builds it.
    fn cmd(&self) -> Cmd;
}

/// Any other command: redis-rs packs it.
impl Command for Cmd {
    fn write(&self, out: &mut Vec<u8>) {
        self.write_packed_command(out);
    }

    fn cmd(&self) -> Cmd {
        self.clone()
    }
}

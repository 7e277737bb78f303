//! Encoding a script call: `EVALSHA`, `EVAL` or `FCALL` by the client's script mode, written
//! straight into a connection's buffer on the hot path ([`ScriptCmd`]) or built as redis-rs's
//! `Cmd`; a releasing script's keys and arguments.

use redis::Cmd;

use super::Connections;
use crate::command::Command;
use crate::options::ScriptMode;
use crate::scripts::LuaScript;

impl Connections {
    /// A releasing script's keys and arguments: `keys`, then the marker; the token, the
    /// marker's lifetime when there is a marker, then the channel
    /// (`lua/release.lua`, `lua/release_fair.lua`). On the stack: every release builds them.
    /// `keys` holds at most three (a fair lock's).
    pub(crate) fn release_args<'a>(
        &'a self,
        keys: &[&'a str],
        token: &'a str,
        marker: Option<&'a str>,
        channel: Option<&'a str>,
    ) -> ReleaseArgs<'a> {
        let mut r = ReleaseArgs {
            keys: [""; 4],
            nkeys: keys.len(),
            args: [token.as_bytes(), b"", b""],
            nargs: 1,
        };
        r.keys[..keys.len()].copy_from_slice(keys);
        if let Some(marker) = marker {
            r.keys[r.nkeys] = marker;
            r.nkeys += 1;
            r.args[1] = self.0.marker_ms.as_bytes();
            r.nargs = 2;
        }
        if let Some(channel) = channel {
            r.args[r.nargs] = channel.as_bytes();
            r.nargs += 1;
        }
        r
    }
}

/// One script call of a batch ([`Connections::run_script_many`]): its keys (the first routes it
/// in a cluster; at least one) and arguments.
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'a LuaScript,
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<&'a [u8]>,
}

pub(crate) fn script_cmd(
    mode: ScriptMode,
    script: &LuaScript,
    keys: &[&str],
    args: &[&[u8]],
) -> Cmd {
    let (name, first) = match mode {
        ScriptMode::EvalSha => ("EVALSHA", script.sha()),
        ScriptMode::Eval => ("EVAL", script.source()),
        ScriptMode::Function => ("FCALL", script.loaded_function_name()),
    };
    // Sized up front: the command is built once per lock operation, without regrowing.
    let data = name.len()
        + first.len()
        + 4
        + keys.iter().map(|k| k.len()).sum::<usize>()
        + args.iter().map(|a| a.len()).sum::<usize>();
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), data);
    cmd.arg(name).arg(first).arg(keys.len()).arg(keys);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// A releasing script's keys (the lock's, or the fair lock's three, then the marker) and
/// arguments, from [`Connections::release_args`].
pub(crate) struct ReleaseArgs<'a> {
    keys: [&'a str; 4],
    nkeys: usize,
    args: [&'a [u8]; 3],
    nargs: usize,
}

impl<'a> ReleaseArgs<'a> {
    pub(crate) fn keys(&self) -> &[&'a str] {
        &self.keys[..self.nkeys]
    }

    pub(crate) fn args(&self) -> &[&'a [u8]] {
        &self.args[..self.nargs]
    }
}

/// A script call (`EVALSHA`, `EVAL` or `FCALL`, by the client's script mode), encoded by
/// lockkit itself on the hot path ([`Command`]): the bytes of [`script_cmd`], without building it.
pub(crate) struct ScriptCmd<'a> {
    pub(crate) mode: ScriptMode,
    pub(crate) script: &'a LuaScript,
    pub(crate) keys: &'a [&'a str],
    pub(crate) args: &'a [&'a [u8]],
}

impl Command for ScriptCmd<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        use crate::resp::{write_array_len, write_bulk, write_bulk_uint};
        write_array_len(out, 3 + self.keys.len() + self.args.len());
        match self.mode {
            ScriptMode::EvalSha => {
                write_bulk(out, b"EVALSHA");
                write_bulk(out, self.script.sha().as_bytes());
            }
            ScriptMode::Eval => {
                write_bulk(out, b"EVAL");
                write_bulk(out, self.script.source().as_bytes());
            }
            ScriptMode::Function => {
                write_bulk(out, b"FCALL");
                write_bulk(out, self.script.loaded_function_name().as_bytes());
            }
        }
        write_bulk_uint(out, self.keys.len() as u64);
        for k in self.keys {
            write_bulk(out, k.as_bytes());
        }
        for a in self.args {
            write_bulk(out, a);
        }
    }

    fn cmd(&self) -> Cmd {
        script_cmd(self.mode, self.script, self.keys, self.args)
    }
}

/// A script's arguments followed by the release channel it publishes on, when there is one
/// ([`Connections::release_channel`]): the last argument of every releasing script.
pub(crate) fn with_channel<'a>(mut args: Vec<&'a [u8]>, channel: Option<&'a str>) -> Vec<&'a [u8]> {
    args.extend(channel.map(str::as_bytes));
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts;

    #[test]
    fn a_script_call_written_in_place_is_the_one_redis_rs_packs() {
        let keys: [&[&str]; 3] = [&["k"], &["k", "{k}:lockkit-released"], &[]];
        let args: [&[&[u8]]; 3] = [&[b"tok"], &[b"tok", b"2000", b"chan"], &[]];
        for mode in [ScriptMode::EvalSha, ScriptMode::Eval, ScriptMode::Function] {
            for (keys, args) in keys.iter().zip(args) {
                let call = ScriptCmd {
                    mode,
                    script: &scripts::RELEASE,
                    keys,
                    args,
                };
                let mut out = Vec::new();
                call.write(&mut out);
                let want = call.cmd().get_packed_command();
                assert_eq!(out, want, "{mode:?} {keys:?}");
            }
        }
    }

    #[test]
    fn evalsha_cmd_carries_sha_numkeys_and_args() {
        let cmd = script_cmd(ScriptMode::EvalSha, &scripts::RELEASE, &["k"], &[b"tok"]);
        let packed = String::from_utf8(cmd.get_packed_command()).unwrap();
        assert!(packed.contains("EVALSHA"));
        assert!(packed.contains(scripts::RELEASE.sha()));
        assert!(
            packed.contains("\r\n1\r\n") && packed.ends_with("k\r\n$3\r\ntok\r\n"),
            "{packed}"
        );
    }
}

//! `#!lua flags=...` script shebangs and `#!lua name=...` library headers.

/// Flags a script declares in its shebang.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ScriptFlags {
    /// The script had a `#!lua` line (no longer in EVAL compatibility mode).
    pub shebang: bool,
    /// `no-writes`: write commands are refused.
    pub no_writes: bool,
    /// `allow-oom`: runs, and writes, past a `CONFIG SET maxmemory` limit.
    pub allow_oom: bool,
    /// `allow-oom`, `allow-stale`, `no-cluster`, `allow-cross-slot-keys`: accepted; the last
    /// three change nothing on a standalone server.
    pub others: bool,
}

const KNOWN: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// Parses one comma-separated flags list (also used by `redis.register_function`).
pub(super) fn parse_flag(flags: &mut ScriptFlags, name: &[u8]) -> Result<(), String> {
    let name = String::from_utf8_lossy(name);
    if !KNOWN.contains(&name.as_ref()) {
        return Err(name.into_owned());
    }
    if name == "no-writes" {
        flags.no_writes = true;
    } else {
        flags.allow_oom |= name == "allow-oom";
        flags.others = true;
    }
    Ok(())
}

/// The flags of an EVAL script and the length of its shebang line (0 without one), or Redis's
/// error text (without the `ERR ` code).
pub(super) fn parse_script_shebang(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((ScriptFlags::default(), 0));
    }
    let Some(end) = body.iter().position(|&c| c == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let parts = crate::cmdline::split_args(&line).unwrap_or_default();
    let Some(engine) = parts.first() else {
        return Err("Invalid engine in script shebang".into());
    };
    if engine.as_slice() != b"#!lua" {
        return Err(format!(
            "Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(engine)
        ));
    }
    let mut flags = ScriptFlags {
        shebang: true,
        ..ScriptFlags::default()
    };
    for part in &parts[1..] {
        match part.strip_prefix(b"flags=") {
            Some(list) => {
                if !list.is_empty() {
                    for f in list.split(|&c| c == b',') {
                        parse_flag(&mut flags, f)
                            .map_err(|f| format!("Unexpected flag in script shebang: {f}"))?;
                    }
                }
            }
            None => {
                return Err(format!(
                    "Unknown lua shebang option: {}",
                    String::from_utf8_lossy(part)
                ))
            }
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_flags_and_errors() {
        let (f, n) = parse_script_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.no_writes && f.shebang);
        assert_eq!(n, 31);
        assert_eq!(parse_script_shebang(b"return 1").unwrap().1, 0);
        assert_eq!(
            parse_script_shebang(b"#!lua flags=bogus\n").unwrap_err(),
            "Unexpected flag in script shebang: bogus"
        );
        assert_eq!(
            parse_script_shebang(b"#!lux\n").unwrap_err(),
            "Unexpected engine in script shebang: #!lux"
        );
        assert_eq!(
            parse_script_shebang(b"#!lua name=x\n").unwrap_err(),
            "Unknown lua shebang option: name=x"
        );
    }
}

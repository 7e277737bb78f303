//! EVAL, EVALSHA, SCRIPT, FUNCTION and FCALL from a client: argument checks, then the engine.

use crate::commands::{arity_ok, int_arg, is, wrong_arity};
use crate::reply::Reply;
use crate::script::{Engine, Entry};

fn err(m: impl Into<String>) -> Reply {
    Reply::Error(m.into())
}

/// Splits `numkeys key... arg...` at `argv[2..]`, with Redis's errors.
/// Keys and arguments of a script call.
type KeysArgs<'a> = (&'a [Vec<u8>], &'a [Vec<u8>]);

fn split_keys(argv: &[Vec<u8>]) -> Result<KeysArgs<'_>, Reply> {
    let n = int_arg(&argv[2])?;
    split_at(argv, n)
}

fn split_at(argv: &[Vec<u8>], n: i64) -> Result<KeysArgs<'_>, Reply> {
    if n > (argv.len() - 3) as i64 {
        return Err(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(err("ERR Number of keys can't be negative"));
    }
    let rest = &argv[3..];
    Ok(rest.split_at(n as usize))
}

fn unknown_subcommand(sub: &[u8], cmd: &str) -> Reply {
    err(format!(
        "ERR unknown subcommand '{}'. Try {cmd} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)])
    ))
}

/// Runs a scripting command `name` (already resolved, arity checked).
pub(crate) fn dispatch(engine: &mut Engine, name: &str, argv: &[Vec<u8>]) -> Reply {
    let r = match name {
        "eval" | "eval_ro" => split_keys(argv).and_then(|(keys, args)| {
            let sha = engine.load(&argv[1])?;
            let entry = if name == "eval" {
                Entry::Eval
            } else {
                Entry::EvalRo
            };
            Ok(engine.run(sha.as_bytes(), keys, args, entry))
        }),
        "evalsha" | "evalsha_ro" => split_keys(argv).map(|(keys, args)| {
            let entry = if name == "evalsha" {
                Entry::Eval
            } else {
                Entry::EvalRo
            };
            engine.run(&argv[1], keys, args, entry)
        }),
        "fcall" | "fcall_ro" => (|| {
            let n = crate::number::parse_i64(&argv[2])
                .ok_or_else(|| err("ERR Bad number of keys provided"))?;
            let (keys, args) = split_at(argv, n)?;
            Ok(engine.fcall(&argv[1], keys, args, name == "fcall_ro"))
        })(),
        "script" => Ok(script(engine, argv)),
        "function" => Ok(function(engine, argv)),
        other => Err(err(format!(
            "ERR harness: '{other}' is not a scripting command"
        ))),
    };
    r.unwrap_or_else(|e| e)
}

fn script(engine: &mut Engine, argv: &[Vec<u8>]) -> Reply {
    let sub = &argv[1];
    let lower = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let arity = match lower.as_str() {
        "load" => 3,
        "exists" => -3,
        "flush" => -2,
        "kill" | "help" => 2,
        "debug" => 3,
        _ => return unknown_subcommand(sub, "SCRIPT"),
    };
    if !arity_ok(arity, argv.len()) {
        return wrong_arity(&format!("script|{lower}"));
    }
    match lower.as_str() {
        "load" => match engine.load(&argv[2]) {
            Ok(sha) => Reply::Bulk(sha.into_bytes()),
            Err(e) => e,
        },
        "exists" => Reply::Array(
            argv[2..]
                .iter()
                .map(|s| Reply::Int(i64::from(engine.exists(s))))
                .collect(),
        ),
        "flush" => match &argv[2..] {
            [] => {
                engine.flush();
                Reply::ok()
            }
            [opt] if is(opt, "sync") || is(opt, "async") => {
                engine.flush();
                Reply::ok()
            }
            _ => err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        },
        "kill" => err("NOTBUSY No scripts in execution right now."),
        _ => err(format!(
            "ERR harness: SCRIPT {} is not emulated",
            lower.to_uppercase()
        )),
    }
}

fn function(engine: &mut Engine, argv: &[Vec<u8>]) -> Reply {
    let sub = &argv[1];
    let lower = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let arity = match lower.as_str() {
        "load" | "restore" => -3,
        "delete" => 3,
        "flush" | "list" => -2,
        "kill" | "dump" | "stats" | "help" => 2,
        _ => return unknown_subcommand(sub, "FUNCTION"),
    };
    if !arity_ok(arity, argv.len()) {
        return wrong_arity(&format!("function|{lower}"));
    }
    match lower.as_str() {
        "load" => {
            let mut replace = false;
            let mut pos = 2;
            while pos < argv.len() - 1 {
                if is(&argv[pos], "replace") {
                    replace = true;
                    pos += 1;
                    continue;
                }
                return err(format!(
                    "ERR Unknown option given: {}",
                    String::from_utf8_lossy(&argv[pos])
                ));
            }
            engine.function_load(&argv[pos], replace)
        }
        "delete" => engine.function_delete(&argv[2]),
        "flush" => match &argv[2..] {
            [] => {
                engine.function_flush();
                Reply::ok()
            }
            [opt] if is(opt, "sync") || is(opt, "async") => {
                engine.function_flush();
                Reply::ok()
            }
            [_] => err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
            _ => err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(sub)
            )),
        },
        "kill" => err("NOTBUSY No scripts in execution right now."),
        "list" => crate::function_admin::list(engine, argv),
        "dump" => crate::function_admin::dump(engine),
        "restore" => crate::function_admin::restore(engine, argv),
        "stats" => crate::function_admin::stats(engine),
        _ => err(format!(
            "ERR harness: FUNCTION {} is not emulated",
            lower.to_uppercase()
        )),
    }
}

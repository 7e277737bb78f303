//! What a target supports, asked of the target itself: `lockkit probe --url URL`.

use std::time::{Duration, Instant};

use redis::Value;

use crate::connection::pool::script_cmd;
use crate::connection::{self as conn, Conn, Topology};
use crate::error::Result;
use crate::lock::new_token;
use crate::options::{ClientOptions, ScriptMode};
use crate::scripts;

/// Whether one capability works on the target, and if not, what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// It works.
    Yes,
    /// It does not; the reason (the error, or "connection closed").
    No(String),
}

impl Support {
    /// `true` for [`Support::Yes`].
    pub fn is_yes(&self) -> bool {
        matches!(self, Support::Yes)
    }
}

impl std::fmt::Display for Support {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Support::Yes => f.write_str("yes"),
            Support::No(why) => write!(f, "no ({why})"),
        }
    }
}

/// The answers of [`probe`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProbeReport {
    /// The URL probed, password redacted.
    pub target: String,
    /// One server, a proxy, or a cluster.
    pub topology: Topology,
    /// `redis_version` from `INFO server`, when the target answers `INFO`.
    pub server_version: Option<String>,
    /// `SET key token NX PX ttl` (the acquire).
    pub set_nx_px: Support,
    /// `SCRIPT LOAD`.
    pub script_load: Support,
    /// `EVAL` with a key.
    pub eval: Support,
    /// `EVALSHA` with a key (after the script was cached by `EVAL`).
    pub evalsha: Support,
    /// `FUNCTION LOAD` / `FCALL` (Redis 7+).
    pub functions: Support,
    /// Round-trip times of sequential `PING`s: min, median, max.
    pub rtt: [Duration; 3],
    /// The script mode lockkit would pick here.
    pub recommended_mode: &'static str,
    /// Whether waiters can be woken by releases (`SUBSCRIBE`/`PUBLISH` on
    /// `lockkit:released:*`, and `PTTL`); when not, acquires with retries poll, and why.
    pub release_notify: Support,
}

/// Asks `url` what it supports. Each check that a proxy might answer by closing the connection
/// runs on a connection of its own; keys used are `lockkit:probe:<uuid>` and are deleted.
///
/// ```no_run
/// # async fn demo() -> lockkit::Result<()> {
/// let report = lockkit::probe("redis://127.0.0.1:6379", lockkit::ClientOptions::new()).await?;
/// println!("{:?}, scripts by {}", report.topology, report.recommended_mode);
/// # Ok(()) }
/// ```
///
/// # Errors
/// A malformed URL, bad options, or a target that cannot be connected to at all (what it
/// refuses once connected is reported, not raised).
pub async fn probe(url: &str, options: ClientOptions) -> Result<ProbeReport> {
    let (conns, topology) = conn::open(url, &options).await?;
    let mut main = conns[0].clone();
    let proxy = topology == Topology::Proxy;
    let opts = options.proxy(Some(proxy)).connections(1);
    let key = format!("lockkit:probe:{}", new_token());

    let server_version = if proxy {
        None
    } else {
        // A cluster answers with one INFO text per node; any node's version will do.
        let info: Value = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut main)
            .await?;
        first_text(&info)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_string())
    };

    let mut rtts = Vec::with_capacity(20);
    for _ in 0..20 {
        let t = Instant::now();
        redis::cmd("PING").query_async::<Value>(&mut main).await?;
        rtts.push(t.elapsed());
    }
    rtts.sort();
    let rtt = [rtts[0], rtts[rtts.len() / 2], rtts[rtts.len() - 1]];

    let set_nx_px = check(
        url,
        &opts,
        |mut c, key| async move {
            let token = new_token();
            let v: Value = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await?;
            if v != Value::Okay {
                return Ok(Support::No(format!("unexpected reply {v:?}")));
            }
            cleanup(&mut c, &key, &token).await
        },
        &key,
    )
    .await;

    let script_load = check(
        url,
        &opts,
        |mut c, _| async move {
            let sha: String = scripts::RELEASE.load_cmd().query_async(&mut c).await?;
            Ok(if sha == scripts::RELEASE.sha() {
                Support::Yes
            } else {
                Support::No(format!("returned {sha}"))
            })
        },
        &key,
    )
    .await;

    let eval = check_release_script(url, &opts, ScriptMode::Eval, &key).await;
    let evalsha = check_release_script(url, &opts, ScriptMode::EvalSha, &key).await;

    let functions = check(
        url,
        &opts,
        |mut c, key| async move {
            let _: String = scripts::function_load_cmd().query_async(&mut c).await?;
            expect_not_held(c, ScriptMode::Function, &key).await
        },
        &key,
    )
    .await;

    let recommended_mode = if script_load.is_yes() && evalsha.is_yes() {
        "evalsha"
    } else if evalsha.is_yes() && eval.is_yes() {
        "evalsha (no preload: each backend is seeded by one EVAL)"
    } else if eval.is_yes() {
        "eval"
    } else if functions.is_yes() {
        "fcall"
    } else {
        "none: this target cannot run lockkit's scripts"
    };

    let release_notify =
        match crate::connection::hub::open_hub(url, &opts, topology, main.clone()).await? {
            Ok(hub) if hub.alive() => Support::Yes,
            Ok(_) => Support::No(format!(
                "the subscribed connection did not answer within {:?}",
                opts.connect_timeout
            )),
            Err(why) => Support::No(why),
        };

    Ok(ProbeReport {
        target: crate::redact_url(url),
        topology,
        server_version,
        set_nx_px,
        script_load,
        eval,
        evalsha,
        functions,
        rtt,
        recommended_mode,
        release_notify,
    })
}

/// Runs release.lua the way `mode` calls it, for a free key and a made-up token: a working
/// target answers `0` (not held) and changes nothing.
async fn expect_not_held(mut c: Conn, mode: ScriptMode, key: &str) -> redis::RedisResult<Support> {
    let cmd = script_cmd(mode, &scripts::RELEASE, &[key], &[b"probe"]);
    let v: i64 = cmd.query_async(&mut c).await?;
    Ok(if v == 0 {
        Support::Yes
    } else {
        Support::No(format!("returned {v}"))
    })
}

fn first_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Map(pairs) => pairs.iter().find_map(|(_, v)| first_text(v)),
        Value::Array(items) => items.iter().find_map(first_text),
        _ => None,
    }
}

async fn cleanup(c: &mut Conn, key: &str, token: &str) -> redis::RedisResult<Support> {
    let cmd = script_cmd(
        ScriptMode::Eval,
        &scripts::RELEASE,
        &[key],
        &[token.as_bytes()],
    );
    let _: Value = cmd.query_async(c).await?;
    Ok(Support::Yes)
}

/// Runs one check on a fresh connection, so a proxy closing it cannot disturb the next check.
async fn check<F, Fut>(url: &str, opts: &ClientOptions, f: F, key: &str) -> Support
where
    F: FnOnce(Conn, String) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<Support>>,
{
    let conns = match conn::open(url, opts).await {
        Ok((conns, _)) => conns,
        Err(e) => return Support::No(format!("cannot connect: {e}")),
    };
    match tokio::time::timeout(Duration::from_secs(5), f(conns[0].clone(), key.to_string())).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.is_connection_dropped() || e.is_io_error() => {
            Support::No("the target closed the connection".into())
        }
        Ok(Err(e)) => Support::No(e.to_string()),
        Err(_) => Support::No("no answer within 5 s".into()),
    }
}
/// Runs the release script by `EVAL` (its source) or `EVALSHA` (its SHA) on a connection of its
/// own; supported when it answers "not held" for a key nobody holds.
async fn check_release_script(
    url: &str,
    opts: &ClientOptions,
    mode: ScriptMode,
    key: &str,
) -> Support {
    check(
        url,
        opts,
        move |c, key| async move { expect_not_held(c, mode, &key).await },
        key,
    )
    .await
}

//! `lockkit lua serve --cluster N`: N masters on N ports over one keyspace, as cluster clients
//! see a real Redis Cluster: the topology (CLUSTER SLOTS/SHARDS/NODES/INFO/KEYSLOT, `INFO
//! cluster`), `-MOVED` on a port that does not own a key's slot, `-CROSSSLOT` across slots,
//! and `--strict-keys` on by default.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::serve::{ok, Client, Reply};
use lockkit::{key_slot, LockClient, Locker, ReleaseOutcome, Topology};
use lockkit_test_support::{python_with_redis, RedisCluster};

/// `lockkit lua serve --port 0 --cluster N [extra]`: its ports (one line each), killed and
/// reaped on drop.
struct ClusterServe {
    child: Child,
    ports: Vec<u16>,
}

impl ClusterServe {
    fn start(masters: usize, extra: &[&str]) -> ClusterServe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockkit"))
            .args(["lua", "serve", "--port", "0", "--cluster"])
            .arg(masters.to_string())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("lockkit starts");
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let ports = (0..masters)
            .map(|_| {
                let mut line = String::new();
                out.read_line(&mut line).expect("lockkit prints its ports");
                line.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("a port per line, got {line:?}"))
            })
            .collect();
        ClusterServe { child, ports }
    }
}

impl Drop for ClusterServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_of(r: Reply) -> String {
    match r {
        Reply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn text_of(r: Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8(b).expect("utf-8"),
        other => panic!("expected a bulk string, got {other:?}"),
    }
}

/// Runs cli/tests/libraries/redis_py_cluster.py against the cluster with a master on `port`.
fn redis_py_cluster(port: u16) -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/libraries/redis_py_cluster.py");
    // redis-py is installed when missing; a hang fails the test after 2 minutes.
    drop(python_with_redis());
    let out = Command::new("timeout")
        .args(["120", "python3"])
        .arg(&path)
        .arg(port.to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "redis_py_cluster.py against port {port} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// redis-py's `RedisCluster` reads the whole command table with `COMMAND` when it starts
/// (and routes by its key specs and tips), then sets and reads keys over every master, runs a
/// script, a pipeline, transactions, and meets `MOVED` and `CROSSSLOT`.
#[test]
fn redis_py_cluster_observes_the_same_as_on_a_real_cluster() {
    let real = RedisCluster::start(3);
    let want = redis_py_cluster(real.nodes()[0].port());
    drop(real);
    let serve = ClusterServe::start(3, &[]);
    let got = redis_py_cluster(serve.ports[1]);
    eprintln!("real cluster:\n{want}");
    assert!(want.contains("owners [0, 1, 2]") && want.contains("moved MovedError 12182"));
    assert_eq!(
        got, want,
        "lua serve --cluster 3 observed otherwise than a real cluster"
    );
}

#[test]
fn a_port_answers_moved_for_another_ports_slot_and_crossslot_across_slots() {
    let serve = ClusterServe::start(3, &[]);
    let ports = &serve.ports;
    // foo is in slot 12182: the third master's (10923-16383).
    let mut first = Client::to(ports[0]);
    assert_eq!(
        error_of(first.call(&[b"GET", b"foo"])),
        format!("MOVED 12182 127.0.0.1:{}", ports[2])
    );
    let mut owner = Client::to(ports[2]);
    assert_eq!(owner.call(&[b"SET", b"foo", b"1"]), ok());
    assert_eq!(owner.call(&[b"GET", b"foo"]), Reply::Bulk(b"1".to_vec()));
    let crossslot = "CROSSSLOT Keys in request don't hash to the same slot";
    assert_eq!(
        error_of(owner.call(&[b"MSET", b"foo", b"1", b"bar", b"2"])),
        crossslot
    );
    assert_eq!(owner.call(&[b"MSET", b"{foo}a", b"1", b"foo", b"2"]), ok());
    // A script goes where its KEYS are; over several slots it is refused before it runs.
    let script: &[u8] = b"return redis.call('incr', KEYS[1]) + redis.call('incr', KEYS[2])";
    assert_eq!(
        owner.call(&[b"EVAL", script, b"2", b"{foo}x", b"{foo}y"]),
        Reply::Int(2)
    );
    assert_eq!(
        error_of(owner.call(&[b"EVAL", script, b"2", b"foo", b"bar"])),
        crossslot
    );
    assert_eq!(
        error_of(first.call(&[b"EVAL", script, b"2", b"{foo}x", b"{foo}y"])),
        format!("MOVED 12182 127.0.0.1:{}", ports[2])
    );
    // Keyless commands run on any port, over the one keyspace.
    assert_eq!(first.call(&[b"EVAL", b"return 7", b"0"]), Reply::Int(7));
    // --strict-keys is on: a script touching an undeclared key fails naming it.
    let e = error_of(owner.call(&[b"EVAL", b"return redis.call('get', 'other')", b"1", b"foo"]));
    assert!(e.contains("'other'"), "{e}");
    // A transaction over two slots of one port: EXEC answers CROSSSLOT and runs nothing.
    let near = (0..1000)
        .map(|i| format!("k:{i}"))
        .find(|k| key_slot(k.as_bytes()) >= 10923 && key_slot(k.as_bytes()) != 12182)
        .expect("a key of the third master");
    assert_eq!(owner.call(&[b"MULTI"]), ok());
    owner.call(&[b"SET", b"foo", b"tx"]);
    owner.call(&[b"SET", near.as_bytes(), b"tx"]);
    assert_eq!(error_of(owner.call(&[b"EXEC"])), crossslot);
    assert_eq!(owner.call(&[b"GET", b"foo"]), Reply::Bulk(b"2".to_vec()));
    // The topology.
    assert_eq!(
        owner.call(&[b"CLUSTER", b"KEYSLOT", b"foo"]),
        Reply::Int(12182)
    );
    let info = text_of(owner.call(&[b"CLUSTER", b"INFO"]));
    assert!(
        info.starts_with("cluster_state:ok\r\n") && info.contains("cluster_known_nodes:3\r\n"),
        "{info}"
    );
    assert!(text_of(owner.call(&[b"INFO", b"cluster"])).contains("cluster_enabled:1"));
    let nodes = text_of(owner.call(&[b"CLUSTER", b"NODES"]));
    let line = format!(
        "127.0.0.1:{}@{} myself,master - 0 0 3 connected 10923-16383\n",
        ports[2],
        u32::from(ports[2]) + 10000
    );
    assert!(nodes.contains(&line), "{nodes}");
    assert_eq!(nodes.lines().count(), 3, "{nodes}");
    let Reply::Array(slots) = owner.call(&[b"CLUSTER", b"SLOTS"]) else {
        panic!("CLUSTER SLOTS")
    };
    assert_eq!(slots.len(), 3);
    assert_eq!(
        error_of(owner.call(&[b"CLUSTER", b"NOPE"])),
        "ERR unknown subcommand 'NOPE'. Try CLUSTER HELP."
    );
    assert_eq!(owner.call(&[b"READONLY"]), ok());
}

#[test]
fn strict_keys_can_be_turned_off_and_a_standalone_server_says_cluster_disabled() {
    let serve = ClusterServe::start(1, &["--no-strict-keys"]);
    let mut c = Client::to(serve.ports[0]);
    assert_eq!(
        c.call(&[b"EVAL", b"return redis.call('set', 'a', 1)", b"0"]),
        ok()
    );
    assert_eq!(c.call(&[b"MSET", b"foo", b"1", b"{foo}2", b"2"]), ok());
    let standalone = common::serve::Serve::start(&[]);
    let mut s = standalone.connect();
    assert!(text_of(s.call(&[b"INFO", b"cluster"])).contains("cluster_enabled:0"));
    assert_eq!(
        error_of(s.call(&[b"CLUSTER", b"SLOTS"])),
        "ERR This instance has cluster support disabled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkit_cluster_mode_locks_against_it() {
    let serve = ClusterServe::start(3, &[]);
    let url = format!("redis://127.0.0.1:{}", serve.ports[2]);
    let client = LockClient::connect(&url).await.expect("connects");
    assert_eq!(client.topology(), Topology::Cluster);
    for i in 0..30 {
        let key = format!("lock:cl:{i}");
        let lock = client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("free");
        assert!(client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let keys: Vec<String> = (0..20).map(|i| format!("sku:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let got = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(got.iter().all(Option::is_some));
    let held: Vec<_> = got.into_iter().flatten().collect();
    let outcomes = client.release_many(&held).await.unwrap();
    assert!(outcomes.iter().all(|o| o.is_released()), "{outcomes:?}");
}

/// The masters' ports in slot order, from CLUSTER SLOTS on `port`.
fn ports_in_slot_order(port: u16) -> Vec<u16> {
    let Reply::Array(ranges) = Client::to(port).call(&[b"CLUSTER", b"SLOTS"]) else {
        panic!("CLUSTER SLOTS")
    };
    let mut owners: Vec<(i64, u16)> = ranges
        .into_iter()
        .map(|r| match r {
            Reply::Array(f) => match (&f[0], &f[2]) {
                (Reply::Int(first), Reply::Array(node)) => match node[1] {
                    Reply::Int(p) => (*first, p as u16),
                    _ => panic!("a port"),
                },
                _ => panic!("a range"),
            },
            _ => panic!("a range"),
        })
        .collect();
    owners.sort();
    owners.into_iter().map(|(_, p)| p).collect()
}

/// A reply as text, bulk strings as strings.
fn render(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Reply::Array(items) => {
            let items: Vec<String> = items.iter().map(render).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("{other:?}"),
    }
}

/// An array reply with its items in order.
fn sorted(r: Reply) -> Reply {
    match r {
        Reply::Array(mut items) => {
            items.sort_by_key(render);
            Reply::Array(items)
        }
        other => other,
    }
}

/// Sharded pub/sub over the masters on `ports` (slot order): what each step answered, with
/// ports replaced by the master's index. Channel `s` is in slot 3828 (the first master's),
/// `foo` in 12182 (the third's).
fn sharded_pubsub_steps(ports: &[u16]) -> Vec<String> {
    let show = |r: Reply| {
        let mut t = render(&r);
        for (i, p) in ports.iter().enumerate() {
            t = t.replace(&p.to_string(), &format!("port{i}"));
        }
        t
    };
    let mut out = Vec::new();
    let mut sub = Client::to(ports[0]);
    let mut publisher = Client::to(ports[0]);
    let mut other = Client::to(ports[1]);
    out.push(show(sub.call(&[b"SSUBSCRIBE", b"s", b"{s}x"])));
    out.push(show(sub.reply()));
    out.push(show(sub.call(&[b"SSUBSCRIBE", b"foo"])));
    out.push(show(sub.call(&[b"SSUBSCRIBE", b"s", b"foo"])));
    out.push(show(sub.call(&[b"SUBSCRIBE", b"plain"])));
    out.push(show(publisher.call(&[b"SPUBLISH", b"s", b"hi"])));
    out.push(show(sub.reply()));
    out.push(show(publisher.call(&[b"PUBLISH", b"s", b"not sharded"])));
    out.push(show(publisher.call(&[b"PUBLISH", b"plain", b"sharded"])));
    out.push(show(sub.reply()));
    out.push(show(other.call(&[b"SPUBLISH", b"s", b"hi"])));
    // In name order: Redis lists them in its hash table's.
    out.push(show(sorted(publisher.call(&[b"PUBSUB", b"SHARDCHANNELS"]))));
    out.push(show(publisher.call(&[
        b"PUBSUB",
        b"SHARDNUMSUB",
        b"s",
        b"foo",
    ])));
    out.push(show(other.call(&[b"PUBSUB", b"SHARDCHANNELS"])));
    out.push(show(other.call(&[b"PUBSUB", b"SHARDNUMSUB", b"s"])));
    out.push(show(sub.call(&[b"GET", b"s"])));
    out.push(show(sub.call(&[b"SUNSUBSCRIBE", b"s"])));
    out.push(show(sub.call(&[b"SUNSUBSCRIBE", b"{s}x"])));
    out.push(show(sub.call(&[b"SUNSUBSCRIBE"])));
    out.push(show(sub.call(&[b"SUNSUBSCRIBE", b"foo"])));
    out.push(show(sub.call(&[b"UNSUBSCRIBE"])));
    out.push(show(sub.call(&[b"GET", b"s"])));
    out.push(show(publisher.call(&[b"SPUBLISH", b"s", b"nobody"])));
    out
}

#[test]
fn sharded_pubsub_is_served_by_the_port_owning_the_channels_slot() {
    let real = RedisCluster::start(3);
    let want = sharded_pubsub_steps(&ports_in_slot_order(real.nodes()[0].port()));
    drop(real);
    let serve = ClusterServe::start(3, &[]);
    let got = sharded_pubsub_steps(&ports_in_slot_order(serve.ports[0]));
    eprintln!("real cluster: {want:#?}");
    assert!(want[0].contains("ssubscribe") && want[2].contains("MOVED 12182 127.0.0.1:port2"));
    assert_eq!(got, want, "lua serve --cluster 3 answered otherwise");
}

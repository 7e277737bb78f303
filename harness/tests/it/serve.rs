//! `lockkit_harness::serve`: the harness as a RESP server, driven over loopback TCP with
//! redis-rs (a client as users have one) and with raw bytes where the protocol itself is tested.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lockkit_harness::serve::{ServeOptions, Server};

/// A server on a free loopback port, stopped on drop.
struct Running {
    rt: tokio::runtime::Runtime,
    server: Option<Server>,
    addr: SocketAddr,
}

impl Running {
    fn start(options: ServeOptions) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = rt
            .block_on(Server::start(options.listen("127.0.0.1:0")))
            .unwrap();
        let addr = server.addr();
        Running {
            rt,
            server: Some(server),
            addr,
        }
    }

    fn client(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://{}/", self.addr)).unwrap();
        let conn = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn
    }

    /// Sends `bytes` on a fresh connection and reads until the server closes it (at most 5 s).
    fn raw(&self, bytes: &[u8]) -> String {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(bytes).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            self.rt.block_on(s.stop());
        }
    }
}

fn cmd(name: &str, args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(name);
    for a in args {
        c.arg(*a);
    }
    c
}

fn query<T: redis::FromRedisValue>(c: &mut redis::Connection, name: &str, args: &[&str]) -> T {
    cmd(name, args).query(c).unwrap()
}

fn text(e: &redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
}

fn error_of(c: &mut redis::Connection, name: &str, args: &[&str]) -> String {
    text(
        &cmd(name, args)
            .query::<redis::Value>(c)
            .expect_err("an error reply"),
    )
}

#[test]
fn connections_share_one_keyspace_script_cache_and_clock() {
    let s = Running::start(ServeOptions::new());
    let (mut a, mut b) = (s.client(), s.client());
    let _: () = query(&mut a, "SET", &["lock:a", "tok", "PX", "1000"]);
    let sha: String = query(
        &mut a,
        "SCRIPT",
        &["LOAD", "return redis.call('GET', KEYS[1])"],
    );
    let got: String = query(&mut b, "EVALSHA", &[&sha, "1", "lock:a"]);
    assert_eq!(got, "tok");
    // DEBUG SLEEP moves the one virtual clock for everybody, without sleeping.
    let _: () = query(&mut b, "DEBUG", &["SLEEP", "2"]);
    let gone: Option<String> = query(&mut a, "GET", &["lock:a"]);
    assert_eq!(gone, None);
    let t0: i64 = query(&mut a, "LOCKKIT.CLOCK", &["GET"]);
    let t1: i64 = query(&mut b, "LOCKKIT.CLOCK", &["ADVANCE", "1500"]);
    assert_eq!(t1 - t0, 1500);
    let time: Vec<String> = query(&mut a, "TIME", &[]);
    assert_eq!(time[0].parse::<i64>().unwrap(), t1 / 1000);
}

#[test]
fn a_script_past_the_threshold_answers_busy_until_script_kill() {
    let s = Running::start(ServeOptions::new().busy_threshold(Duration::from_millis(50)));
    let mut other = s.client();
    let addr = s.addr;
    let runner = std::thread::spawn(move || {
        let c = redis::Client::open(format!("redis://{addr}/")).unwrap();
        let mut conn = c.get_connection().unwrap();
        cmd("EVAL", &["while true do end", "0"])
            .query::<redis::Value>(&mut conn)
            .unwrap_err()
            .to_string()
    });
    let mut busy = String::new();
    for _ in 0..100 {
        busy = match cmd("PING", &[]).query::<String>(&mut other) {
            Ok(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => text(&e),
        };
        break;
    }
    assert!(busy.starts_with("BUSY"), "{busy}");
    assert!(
        error_of(&mut other, "FUNCTION", &["KILL"]).starts_with("BUSY"),
        "FUNCTION KILL does not kill an EVAL"
    );
    let _: () = query(&mut other, "SCRIPT", &["KILL"]);
    let killed = runner.join().unwrap();
    assert!(
        killed.contains("Script killed by user with SCRIPT KILL"),
        "{killed}"
    );
    let pong: String = query(&mut other, "PING", &[]);
    assert_eq!(pong, "PONG");
    assert_eq!(
        error_of(&mut other, "SCRIPT", &["KILL"]),
        "NOTBUSY No scripts in execution right now."
    );
}

#[test]
fn a_script_that_wrote_cannot_be_killed() {
    let s = Running::start(
        ServeOptions::new()
            .busy_threshold(Duration::from_millis(50))
            .time_limit(Duration::from_secs(2)),
    );
    let mut other = s.client();
    let addr = s.addr;
    let runner = std::thread::spawn(move || {
        let c = redis::Client::open(format!("redis://{addr}/")).unwrap();
        let mut conn = c.get_connection().unwrap();
        cmd(
            "EVAL",
            &["redis.call('SET', 'x', 1) while true do end", "0"],
        )
        .query::<redis::Value>(&mut conn)
        .unwrap_err()
        .to_string()
    });
    let mut refused = String::new();
    for _ in 0..100 {
        refused = error_of(&mut other, "SCRIPT", &["KILL"]);
        if !refused.starts_with("NOTBUSY") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(refused.starts_with("UNKILLABLE"), "{refused}");
    // The harness's own limit ends it (Redis would run it until SHUTDOWN NOSAVE).
    let stopped = runner.join().unwrap();
    assert!(stopped.contains("time limit"), "{stopped}");
}

#[test]
fn multi_exec_runs_scripts_and_refuses_a_transaction_with_a_bad_command() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let (a, b): (i64, String) = redis::pipe()
        .atomic()
        .cmd("EVAL")
        .arg("return redis.call('INCR', KEYS[1])")
        .arg(1)
        .arg("n")
        .cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b.as_str()), (1, "OK"));
    let _: () = query(&mut c, "MULTI", &[]);
    let e = error_of(&mut c, "NOSUCHCOMMAND", &[]);
    assert!(e.starts_with("ERR unknown command 'NOSUCHCOMMAND'"), "{e}");
    assert_eq!(
        error_of(&mut c, "EXEC", &[]),
        "EXECABORT Transaction discarded because of previous errors."
    );
}

#[test]
fn connection_commands_answer_as_redis_does() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let _: () = query(&mut c, "CLIENT", &["SETNAME", "fixture"]);
    let name: String = query(&mut c, "CLIENT", &["GETNAME"]);
    assert_eq!(name, "fixture");
    let id: i64 = query(&mut c, "CLIENT", &["ID"]);
    assert!(id > 0);
    let _: () = query(&mut c, "SELECT", &["0"]);
    assert_eq!(
        error_of(&mut c, "SELECT", &["1"]),
        "ERR DB index is out of range"
    );
    let _: () = query(&mut c, "CONFIG", &["SET", "lua-time-limit", "250"]);
    let got: Vec<String> = query(&mut c, "CONFIG", &["GET", "busy-reply-threshold"]);
    assert_eq!(got, ["busy-reply-threshold", "250"]);
    let e = error_of(&mut c, "CONFIG", &["SET", "appendonly", "yes"]);
    assert!(e.contains("CONFIG SET 'appendonly' is not emulated"), "{e}");
    let e = error_of(&mut c, "CLIENT", &["PAUSE", "10"]);
    assert!(e.contains("'client|pause' is not emulated"), "{e}");
    let hello: redis::Value = query(&mut c, "HELLO", &["2"]);
    assert!(format!("{hello:?}").contains("7.0.15"), "{hello:?}");
    assert_eq!(
        error_of(&mut c, "HELLO", &["4"]),
        "NOPROTO unsupported protocol version"
    );
}

#[test]
fn hello_3_switches_the_connection_to_resp3() {
    let s = Running::start(ServeOptions::new());
    let out = s.raw(b"HELLO 3\r\nCONFIG GET lua-time-limit\r\nGET missing\r\nQUIT\r\n");
    assert!(
        out.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{out}"
    );
    assert!(
        out.contains("%1\r\n$14\r\nlua-time-limit\r\n$4\r\n5000\r\n_\r\n+OK\r\n"),
        "{out}"
    );
}

#[test]
fn protocol_errors_are_answered_then_the_connection_is_closed() {
    let s = Running::start(ServeOptions::new());
    assert_eq!(
        s.raw(b"PING\r\n*1\r\n$x\r\nPING\r\n"),
        "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
    );
    assert_eq!(
        s.raw(b"*1\r\n+PING\r\n"),
        "-ERR Protocol error: expected '$', got '+'\r\n"
    );
    assert_eq!(
        s.raw(b"SET a \"b\r\n"),
        "-ERR Protocol error: unbalanced quotes in request\r\n"
    );
}

#[test]
fn requirepass_refuses_commands_before_auth() {
    let s = Running::start(ServeOptions::new().requirepass(Some("pw".into())));
    let out = s.raw(b"PING\r\nAUTH nope\r\nAUTH pw\r\nPING\r\nQUIT\r\n");
    assert_eq!(
        out,
        "-NOAUTH Authentication required.\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+PONG\r\n+OK\r\n"
    );
}

#[test]
fn functions_list_dump_and_restore_over_the_wire() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let lib = "#!lua name=lib\nredis.register_function{function_name='f', callback=function() return 7 end, flags={'no-writes'}, description='seven'}";
    let _: String = query(&mut c, "FUNCTION", &["LOAD", lib]);
    let list: redis::Value = query(&mut c, "FUNCTION", &["LIST"]);
    let text = format!("{list:?}");
    assert!(
        text.contains("seven") && text.contains("no-writes"),
        "{text}"
    );
    let dump: Vec<u8> = query(&mut c, "FUNCTION", &["DUMP"]);
    let _: () = query(&mut c, "FUNCTION", &["FLUSH"]);
    let _: () = cmd("FUNCTION", &["RESTORE"])
        .arg(&dump)
        .query(&mut c)
        .unwrap();
    let seven: i64 = query(&mut c, "FCALL", &["f", "0"]);
    assert_eq!(seven, 7);
    let e = cmd("FUNCTION", &["RESTORE"])
        .arg(&dump)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("Library lib already exists"), "{e}");
    let e = error_of(&mut c, "FUNCTION", &["RESTORE", "bad_payload"]);
    assert_eq!(e, "ERR payload version or checksum are wrong");
}

#[test]
fn debug_reload_keeps_the_libraries_and_info_reports_the_script_cache() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let lib = "#!lua name=lib\nredis.register_function('f', function() return 1 end)";
    let _: String = query(&mut c, "FUNCTION", &["LOAD", lib]);
    let _: () = query(&mut c, "DEBUG", &["RELOAD"]);
    let one: i64 = query(&mut c, "FCALL", &["f", "0"]);
    assert_eq!(one, 1);
    // Loading the saved libraries over themselves fails, as in Redis, unless MERGE.
    let e = error_of(&mut c, "DEBUG", &["RELOAD", "NOFLUSH"]);
    assert!(e.contains("Error trying to load the RDB"), "{e}");
    let _: () = query(&mut c, "DEBUG", &["RELOAD", "NOFLUSH", "MERGE"]);
    let _: String = query(&mut c, "SCRIPT", &["LOAD", "return 1"]);
    let memory: String = query(&mut c, "INFO", &["memory"]);
    assert!(
        memory.contains("number_of_cached_scripts:1\r\n"),
        "{memory}"
    );
    let e = error_of(&mut c, "INFO", &["latencystats"]);
    assert!(e.contains("INFO latencystats is not emulated"), "{e}");
}

/// The same commands, with errors of every kind, to a real redis-server and to the harness's
/// server: INFO errorstats and `total_error_replies` must read the same.
#[test]
fn info_errorstats_counts_error_replies_as_redis_does() {
    let real = lockkit_test_support::RedisServer::start();
    let s = Running::start(ServeOptions::new());
    let mut conns = [
        redis::Client::open(real.url())
            .unwrap()
            .get_connection()
            .unwrap(),
        s.client(),
    ];
    let scripts = [
        "return redis.error_reply('MY_ERR_CODE custom msg')",
        "return redis.error_reply('')",
        "return redis.status_reply('MY_OK_CODE custom msg')",
        "return {redis.error_reply('A x'), 1, {redis.error_reply('B y')}}",
        "return redis.call('select', 99)",
        "return {err = 'abcdefghijabcdefghijabcdefghijabcdefghij rest'}",
        "return {err = 'abcdefghijabcdefghijabcdefghija rest'}",
        "return {err = '-x'}",
        "error('boom')",
        "return 1",
    ];
    let mut stats = Vec::new();
    for c in &mut conns {
        let _: () = query(c, "CONFIG", &["RESETSTAT"]);
        let _: () = query(c, "SET", &["k", "v"]);
        for script in scripts {
            let _ = cmd("EVAL", &[script, "0"]).query::<redis::Value>(c);
        }
        let _ = cmd("LPUSH", &["k", "x"]).query::<redis::Value>(c);
        let _ = cmd("NOSUCHCOMMAND", &[]).query::<redis::Value>(c);
        let _ = redis::pipe()
            .cmd("MULTI")
            .cmd("LPUSH")
            .arg("k")
            .arg("x")
            .cmd("EVAL")
            .arg("return redis.error_reply('C z')")
            .arg(0)
            .cmd("EXEC")
            .query::<redis::Value>(c);
        let _ = redis::pipe()
            .cmd("MULTI")
            .cmd("NOSUCHCOMMAND")
            .cmd("EXEC")
            .query::<redis::Value>(c);
        let errors: String = query(c, "INFO", &["errorstats"]);
        let total = query::<String>(c, "INFO", &["stats"])
            .lines()
            .find(|l| l.starts_with("total_error_replies:"))
            .map(str::to_string);
        let _: () = query(c, "CONFIG", &["RESETSTAT"]);
        let reset: String = query(c, "INFO", &["errorstats"]);
        stats.push((errors, total, reset));
    }
    assert!(
        stats[0].0.contains("errorstat_MY_ERR_CODE:count=1"),
        "{stats:?}"
    );
    assert_eq!(stats[0], stats[1], "redis-server, then the harness");
}

#[test]
fn resp3_clients_get_maps_and_doubles_and_resp2_clients_arrays() {
    let s = Running::start(ServeOptions::new());
    let script = b"EVAL \"redis.setresp(3) return redis.call('HGETALL', KEYS[1])\" 1 h\r\n";
    let mut three =
        b"HELLO 3\r\nHSET h f v\r\nHGETALL h\r\nZADD z 1.5 m\r\nZSCORE z m\r\n".to_vec();
    three.extend_from_slice(script);
    three.extend_from_slice(b"QUIT\r\n");
    let out = s.raw(&three);
    let map = "%1\r\n$1\r\nf\r\n$1\r\nv\r\n";
    assert_eq!(out.matches(map).count(), 2, "{out}");
    assert!(out.contains(",1.5\r\n"), "{out}");
    let mut two = b"HGETALL h\r\nZSCORE z m\r\n".to_vec();
    two.extend_from_slice(script);
    two.extend_from_slice(b"QUIT\r\n");
    let out = s.raw(&two);
    let array = "*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
    assert_eq!(out.matches(array).count(), 2, "{out}");
    assert!(out.contains("$3\r\n1.5\r\n"), "{out}");
}

/// The encoding thresholds Redis 7.0 has (Redis's list unit sets them first): stored and read
/// back as redis-server 7.0.15 answers (checked by hand), aliases included, out-of-range values
/// refused without changing anything.
#[test]
fn config_set_stores_the_encoding_thresholds_as_redis_does() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let _: () = query(&mut c, "CONFIG", &["SET", "list-compress-depth", "1"]);
    let _: () = query(&mut c, "CONFIG", &["SET", "list-max-ziplist-size", "-3"]);
    let got: Vec<String> = query(&mut c, "CONFIG", &["GET", "list-*"]);
    let mut got: Vec<_> = got.chunks(2).map(|p| p.join("=")).collect();
    got.sort();
    assert_eq!(
        got,
        [
            "list-compress-depth=1",
            "list-max-listpack-size=-3",
            "list-max-ziplist-size=-3"
        ]
    );
    assert_eq!(
        error_of(&mut c, "CONFIG", &["SET", "list-compress-depth", "-1"]),
        "ERR CONFIG SET failed (possibly related to argument 'list-compress-depth') - argument must be between 0 and 2147483647 inclusive"
    );
    assert_eq!(
        error_of(
            &mut c,
            "CONFIG",
            &["SET", "list-compress-depth", "2", "hash-max-ziplist-entries", "1k"]
        ),
        "ERR CONFIG SET failed (possibly related to argument 'hash-max-ziplist-entries') - argument couldn't be parsed into an integer"
    );
    let got: Vec<String> = query(&mut c, "CONFIG", &["GET", "list-compress-depth"]);
    assert_eq!(got, ["list-compress-depth", "1"]);
    let _: () = query(&mut c, "CONFIG", &["SET", "stream-node-max-bytes", "1kb"]);
    let got: Vec<String> = query(&mut c, "CONFIG", &["GET", "stream-node-max-bytes"]);
    assert_eq!(got, ["stream-node-max-bytes", "1024"]);
    for (name, default) in [
        ("hash-max-listpack-entries", "512"),
        ("hash-max-ziplist-value", "64"),
        ("set-max-intset-entries", "512"),
        ("zset-max-listpack-entries", "128"),
        ("zset-max-ziplist-value", "64"),
        ("stream-node-max-entries", "100"),
        ("hll-sparse-max-bytes", "3000"),
    ] {
        let got: Vec<String> = query(&mut c, "CONFIG", &["GET", name]);
        assert_eq!(got, [name, default]);
    }
    let ok: String = query(&mut c, "DEBUG", &["QUICKLIST-PACKED-THRESHOLD", "1K"]);
    assert_eq!(ok, "OK");
    assert_eq!(
        error_of(&mut c, "DEBUG", &["quicklist-packed-threshold", "x"]),
        "ERR argument must be a memory value bigger than 1 and smaller than 4gb"
    );
}

/// In RESP2, LPOP/RPOP with a count, LMPOP and ZMPOP answer a missing key with a null array,
/// as redis-server 7.0.15 does (its bytes, checked by hand); LPOP without a count a null bulk.
#[test]
fn pops_with_a_count_answer_a_null_array_in_resp2() {
    let s = Running::start(ServeOptions::new());
    let out = s.raw(
        b"LPOP missing 1\r\nRPOP missing 1\r\nLPOP missing\r\nLMPOP 1 missing LEFT\r\nZMPOP 1 missing MIN\r\nSPOP missing 1\r\nRPUSH l a\r\nLPOP l 0\r\nQUIT\r\n",
    );
    assert_eq!(
        out,
        "*-1\r\n*-1\r\n$-1\r\n*-1\r\n*-1\r\n*0\r\n:1\r\n*0\r\n+OK\r\n"
    );
}

/// A client blocked in BRPOPLPUSH whose destination holds a string is answered WRONGTYPE once
/// its source gets an element, which stays there, as redis-server 7.0.15 answers (checked by
/// hand); it was left blocked.
#[test]
fn a_blocked_move_to_a_wrong_type_answers_wrongtype() {
    let s = Running::start(ServeOptions::new());
    let mut c = s.client();
    let _: () = query(&mut c, "SET", &["target", "nolist"]);
    let mut b = TcpStream::connect(s.addr).unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    b.write_all(b"BRPOPLPUSH blist target 0\r\n").unwrap();
    for _ in 0..100 {
        let info: String = query(&mut c, "INFO", &["clients"]);
        if info.contains("blocked_clients:1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let n: i64 = query(&mut c, "RPUSH", &["blist", "foo"]);
    assert_eq!(n, 1);
    let mut got = [0u8; 128];
    let n = b.read(&mut got).unwrap_or(0);
    assert_eq!(
        String::from_utf8_lossy(&got[..n]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    let left: Vec<String> = query(&mut c, "LRANGE", &["blist", "0", "-1"]);
    assert_eq!(left, ["foo"]);
}

/// CLIENT REPLY OFF silences replies until ON, SKIP the next one, as redis-server 7.0.15
/// answers (checked by hand: these bytes).
#[test]
fn client_reply_off_and_skip_silence_replies() {
    let s = Running::start(ServeOptions::new());
    let out = s.raw(
        b"CLIENT REPLY OFF\r\nSET a 1\r\nCLIENT REPLY ON\r\nGET a\r\nCLIENT REPLY SKIP\r\nGET a\r\nINCR a\r\nCLIENT REPLY x\r\nQUIT\r\n",
    );
    assert_eq!(out, "+OK\r\n$1\r\n1\r\n:2\r\n-ERR syntax error\r\n+OK\r\n");
}

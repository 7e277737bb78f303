//! `lockkit lua serve`'s cost per command, counted rather than timed: what a busy test suite
//! pays for each of its Redis calls.

use crate::common;

use common::serve::{ok, Client, Reply, Serve};

/// Context switches of every thread of process `pid` so far (`/proc/PID/task/*/status`).
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("status")).unwrap_or_default())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches:")
                        || l.starts_with("nonvoluntary_ctxt_switches:")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn command(argv: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// 1,000 pipelined SET, GET and EVALSHA sent in one write are answered without handing each
/// command to another thread and back: before, every command was run on a blocking thread
/// (two context switches at least each, 2,000 and more for the burst); now the connection's
/// own thread runs it, and the burst costs the server a few switches.
#[test]
#[cfg(target_os = "linux")]
fn a_pipelined_burst_runs_without_a_thread_hop_per_command() {
    let serve = Serve::start(&[]);
    let mut c = Client::to(serve.port);
    let sha = match c.call(&[
        b"SCRIPT",
        b"LOAD",
        b"return redis.call('SET', KEYS[1], ARGV[1])",
    ]) {
        Reply::Bulk(s) => s,
        other => panic!("SCRIPT LOAD answered {other:?}"),
    };
    assert_eq!(c.call(&[b"SET", b"warm", b"up"]), ok());
    let mut burst = Vec::new();
    for i in 0..334 {
        let key = format!("k{i}");
        command(&[b"SET", key.as_bytes(), b"v"], &mut burst);
        command(&[b"GET", key.as_bytes()], &mut burst);
        command(&[b"EVALSHA", &sha, b"1", key.as_bytes(), b"w"], &mut burst);
    }
    let before = context_switches(serve.pid());
    c.send_raw(&burst).expect("send the burst");
    for i in 0..334 {
        assert_eq!(c.reply(), ok(), "SET {i}");
        assert_eq!(c.reply(), Reply::Bulk(b"v".to_vec()), "GET {i}");
        assert_eq!(c.reply(), ok(), "EVALSHA {i}");
    }
    let switches = context_switches(serve.pid()) - before;
    println!("1,002 pipelined commands: {switches} context switches in the server");
    assert!(
        switches < 300,
        "1,002 pipelined commands cost the server {switches} context switches (a thread hop per command?)"
    );
}

/// A script that never ends runs on the server's one worker thread, and the other connections
/// are still served: answered BUSY past the threshold, SCRIPT KILL stops it, and the server
/// answers again afterwards.
#[test]
fn a_looping_script_leaves_the_other_connections_served() {
    let serve = Serve::start(&["--busy-reply-threshold", "100ms"]);
    let mut looping = Client::to(serve.port);
    looping.send(&[b"EVAL", b"local a = 0 while true do a = a + 1 end", b"0"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut other = Client::to(serve.port);
    match other.call(&[b"PING"]) {
        Reply::Error(e) => assert!(e.starts_with("BUSY"), "{e}"),
        r => panic!("PING during a busy script answered {r:?}"),
    }
    assert_eq!(other.call(&[b"SCRIPT", b"KILL"]), ok());
    match looping.reply() {
        Reply::Error(e) => assert!(e.contains("Script killed by user"), "{e}"),
        r => panic!("the killed script answered {r:?}"),
    }
    assert_eq!(other.call(&[b"PING"]), Reply::Status("PONG".into()));
    assert_eq!(looping.call(&[b"PING"]), Reply::Status("PONG".into()));
}

//! `lockkit proxy` as users run it: observe through the built binary, SIGTERM writes the
//! report, `lockkit ttl --observed` reads it; bad input and an unreachable upstream exit with
//! their codes and never show the password.

use crate::common;

use std::time::Duration;

use common::{files_in, redis_cli, Lockkit, ProxyRun, RELEASE};
use lockkit_test_support::{free_port, RedisServer};

#[test]
fn observe_report_on_sigterm_then_ttl_observed_reads_it() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(&server.url(), &["--plugin", "observe"], dir.path());
    let port = proxy.port;
    for i in 0..3 {
        let key = format!("order:{i}:lock");
        assert_eq!(
            redis_cli(port, &["SET", &key, "t", "NX", "PX", "3000"]),
            "OK\n"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(redis_cli(port, &["EVAL", RELEASE, "1", &key, "t"]), "1\n");
    }
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    let files = files_in(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("observe-") && name.ends_with(".json"),
        "{name}"
    );
    assert!(run.stdout.contains(&name), "{}", run.all());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(report["schema"], "lockkit.observe/1");
    assert_eq!(report["locks"][0]["pattern"], "order:{id}:lock");
    assert_eq!(report["locks"][0]["acquired"], 3);
    assert_eq!(report["locks"][0]["released"], 3);
    assert!(report["locks"][0]["hold_us"]["p50"].as_u64().unwrap() >= 20_000);

    let ttl = Lockkit::new(&["ttl", "--observed"]).arg(&files[0]).run();
    assert!(ttl.success(), "{}", ttl.all());
    assert!(ttl.stdout.contains("order:{id}:lock"), "{}", ttl.all());
    assert!(ttl.stdout.contains("3000 ms"), "{}", ttl.all());
    let json = Lockkit::new(&["ttl", "--json", "--observed"])
        .arg(&files[0])
        .run();
    let rows: serde_json::Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|_| panic!("{}", json.all()));
    assert_eq!(
        rows[0]["ttl"]["recommended_ms"], report["locks"][0]["recommended_ttl_ms"],
        "the proxy and `lockkit ttl --observed` use the same formula"
    );
    // `lockkit report` renders it beside the JSON, the pattern's row and spectrum in it.
    let page = Lockkit::new(&["report"]).arg(&files[0]).run();
    assert!(page.success(), "{}", page.all());
    let html = std::fs::read_to_string(files[0].with_extension("html")).unwrap();
    assert!(html.contains("order:{id}:lock hold time by percentile"));
    assert!(
        html.contains("class=\"mark\""),
        "the recommended TTL is drawn"
    );
    // A bench report is refused with a hint.
    let bench = dir.path().join("bench.json");
    std::fs::write(&bench, r#"{"schema": "lockkit.bench/1"}"#).unwrap();
    let bad = Lockkit::new(&["ttl", "--observed"]).arg(&bench).run();
    assert_eq!(bad.code, Some(1), "{}", bad.all());
    assert!(
        bad.stderr.contains("not an observe report"),
        "{}",
        bad.all()
    );
}

#[test]
fn faults_report_names_its_seed_and_counts_what_it_did() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--plugin", "faults:delay=10ms~5ms,seed=77"],
        dir.path(),
    );
    let port = proxy.port;
    for i in 1..=5 {
        assert_eq!(redis_cli(port, &["INCR", "n"]), format!("{i}\n"));
    }
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    let files = files_in(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(report["schema"], "lockkit.faults/1");
    assert_eq!(report["config"], "delay=10ms~5ms,seed=77");
    // redis-cli sends COMMAND DOCS too when it starts: at least the five INCRs went through.
    assert!(report["delayed"].as_u64().unwrap() >= 5, "{report}");
    assert_eq!(report["delayed"], report["commands"]);
}

#[test]
fn bad_input_and_unreachable_upstream_exit_with_their_codes_without_the_password() {
    let port = free_port().unwrap().to_string();
    let dead = format!("redis://user:Pw-9xq7@127.0.0.1:{port}");
    let cases: [(&[&str], i32, &str); 7] = [
        (
            &["--upstream", &dead, "--plugin", "faults:drop=150%"],
            2,
            "--plugin faults:drop=150%: drop=150%: a percentage from 0 to 100",
        ),
        (
            &["--upstream", &dead, "--plugin", "faults"],
            2,
            "not KEY=VALUE",
        ),
        (
            &["--upstream", &dead, "--plugin", "no/such/plugin.lua"],
            2,
            "reading no/such/plugin.lua",
        ),
        (
            &["--upstream", &dead, "--plugin", "nope"],
            2,
            "unknown plugin `nope`",
        ),
        (
            &["--upstream", "http://user:Pw-9xq7@h"],
            2,
            "is not a valid Redis URL",
        ),
        (
            &[
                "--upstream",
                &dead,
                "--duration",
                "1s",
                "--require-upstream",
            ],
            3,
            "upstream redis://user:***@127.0.0.1:",
        ),
        (
            &["--upstream", "redis://h", "--duration", "soon"],
            2,
            "soon",
        ),
    ];
    for (args, code, says) in cases {
        let run = Lockkit::new(&["proxy", "--listen", "127.0.0.1:0"])
            .arg("--quiet")
            .args(args)
            .run();
        assert_eq!(run.code, Some(code), "{args:?}: {}", run.all());
        assert!(run.stderr.contains(says), "{args:?}: {}", run.all());
        assert!(!run.all().contains("Pw-9xq7"), "{args:?}: {}", run.all());
    }
}

#[test]
fn protected_mode_refuses_other_hosts_without_client_passwords() {
    let port = free_port().unwrap().to_string();
    let dead = format!("redis://:Pw-9xq7@127.0.0.1:{port}");
    let open = |extra: &[&str]| {
        Lockkit::new(&[
            "proxy",
            "--quiet",
            "--listen",
            "0.0.0.0:0",
            "--upstream",
            &dead,
            "--require-upstream",
        ])
        .args(extra)
        .run()
    };
    let refused = open(&[]);
    assert_eq!(refused.code, Some(2), "{}", refused.all());
    for flag in ["--requirepass", "--user", "--no-protected-mode"] {
        assert!(refused.stderr.contains(flag), "{}", refused.all());
    }
    // With a client password (or the opt-out) it goes on, to the dead upstream (exit 3).
    for extra in [
        &["--user", "app:Cl-5ecret"][..],
        &["--requirepass", "Cl-5ecret"],
        &["--no-protected-mode"],
    ] {
        let run = open(extra);
        assert_eq!(run.code, Some(3), "{extra:?}: {}", run.all());
    }
    let bad = Lockkit::new(&["proxy", "--quiet", "--upstream", &dead])
        .args(&["--user", "app:Cl-5ecret", "--user", "app:Cl-5ecret2"])
        .run();
    assert_eq!(bad.code, Some(2), "{}", bad.all());
    assert!(
        bad.stderr.contains("user `app` is given twice"),
        "{}",
        bad.all()
    );
    assert!(!bad.all().contains("Cl-5ecret") && !bad.all().contains("Pw-9xq7"));
}

#[test]
fn clients_log_in_at_the_proxy_with_a_users_file() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        "# one per application\norders:Or-5ecret\n\ncron:Cr-5ecret\n",
    )
    .unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--users-file", users.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(
        redis_cli(proxy.port, &["PING"]),
        "NOAUTH Authentication required.\n\n"
    );
    assert_eq!(
        redis_cli(
            proxy.port,
            &[
                "--no-auth-warning",
                "--user",
                "cron",
                "--pass",
                "Cr-5ecret",
                "PING"
            ]
        ),
        "PONG\n"
    );
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(!run.all().contains("5ecret"), "{}", run.all());
}

#[test]
fn tls_flags_come_together_and_bad_files_are_named() {
    let port = free_port().unwrap().to_string();
    let dead = format!("redis://127.0.0.1:{port}");
    let alone = Lockkit::new(&[
        "proxy",
        "--quiet",
        "--upstream",
        &dead,
        "--tls-cert",
        "c.pem",
    ])
    .run();
    assert_eq!(alone.code, Some(2), "{}", alone.all());
    assert!(alone.stderr.contains("--tls-key"), "{}", alone.all());
    let missing = Lockkit::new(&["proxy", "--quiet", "--upstream", &dead])
        .args(&[
            "--tls-cert",
            "no/such/cert.pem",
            "--tls-key",
            "no/such/key.pem",
        ])
        .run();
    assert_eq!(missing.code, Some(2), "{}", missing.all());
    assert!(
        missing.stderr.contains("no/such/cert.pem"),
        "{}",
        missing.all()
    );
}

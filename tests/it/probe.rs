//! `lockkit::probe` against a plain server, twemproxy and a cluster.

use lockkit::{probe, ClientOptions, Topology};
use lockkit_test_support::{Nutcracker, RedisCluster, RedisServer};

#[tokio::test]
async fn probe_standalone_supports_everything() {
    let server = RedisServer::start();
    let report = probe(&server.url(), ClientOptions::new()).await.unwrap();
    assert_eq!(report.topology, Topology::Standalone);
    assert!(report.server_version.as_deref().unwrap().starts_with('7'));
    for s in [
        &report.set_nx_px,
        &report.script_load,
        &report.eval,
        &report.evalsha,
        &report.functions,
        &report.release_notify,
    ] {
        assert!(s.is_yes(), "{report:?}");
    }
    assert_eq!(report.recommended_mode, "evalsha");
    assert!(report.rtt[0] <= report.rtt[1] && report.rtt[1] <= report.rtt[2]);
    // Probe keys are cleaned up.
    assert_eq!(server.inline("DBSIZE").unwrap().trim(), ":0");
}

#[tokio::test]
async fn probe_twemproxy_reports_refused_script_load_and_functions() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Nutcracker::start(&[&a, &b]);
    let report = probe(&proxy.url(), ClientOptions::new()).await.unwrap();
    assert_eq!(report.topology, Topology::Proxy);
    assert_eq!(report.server_version, None);
    assert!(report.set_nx_px.is_yes(), "{report:?}");
    assert!(report.eval.is_yes(), "{report:?}");
    assert!(report.evalsha.is_yes(), "{report:?}");
    assert!(!report.script_load.is_yes(), "{report:?}");
    assert!(!report.functions.is_yes(), "{report:?}");
    assert!(report.recommended_mode.starts_with("evalsha (no preload"));
    // Behind twemproxy waiters fall back to polling, and the probe says so.
    assert!(!report.release_notify.is_yes(), "{report:?}");
}

#[tokio::test]
async fn probe_detects_cluster() {
    let cluster = RedisCluster::start(3);
    let report = probe(&cluster.url(), ClientOptions::new()).await.unwrap();
    assert_eq!(report.topology, Topology::Cluster);
    assert!(
        report.script_load.is_yes() && report.evalsha.is_yes(),
        "{report:?}"
    );
}

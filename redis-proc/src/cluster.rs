//! A real Redis Cluster on loopback: N primaries (and their replicas) started with `--cluster-enabled yes` and joined
//! with `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{RedisServer, ServerOptions, StartError};

/// A running cluster of primaries (with replicas if asked); the nodes die on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (at least 3) primaries and creates the cluster, waiting for `cluster_state:ok`.
    pub fn try_start(n: usize) -> Result<RedisCluster, StartError> {
        Self::try_start_with_replicas(n, 0)
    }

    /// Starts `masters` (at least 3) primaries with `replicas` replicas each
    /// (`cluster-node-timeout` 2 s) and creates the cluster, waiting for `cluster_state:ok`.
    pub fn try_start_with_replicas(
        masters: usize,
        replicas: usize,
    ) -> Result<RedisCluster, StartError> {
        let n = masters * (1 + replicas);
        let opts = ServerOptions {
            extra_args: vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-node-timeout".into(),
                "2000".into(),
            ],
            ..ServerOptions::default()
        };
        let nodes = (0..n)
            .map(|_| RedisServer::try_start(opts.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for node in &nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port()));
        }
        let replicas = replicas.to_string();
        cmd.args(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let out = cmd.output().map_err(|source| StartError::NotFound {
            bin: "redis-cli".into(),
            source,
        })?;
        if !out.status.success() {
            return Err(StartError::NotReady {
                bin: "redis-cli --cluster create".into(),
                reason: format!("exit {}", out.status),
                log: String::from_utf8_lossy(&out.stdout).into_owned(),
            });
        }
        RedisCluster { nodes }.wait_ok()
    }

    /// Starts one cluster-enabled primary that owns all 16384 slots (the reference a cluster
    /// of several masters is compared with), waiting for `cluster_state:ok`.
    pub fn try_start_single() -> Result<RedisCluster, StartError> {
        let opts = ServerOptions {
            extra_args: vec!["--cluster-enabled".into(), "yes".into()],
            ..ServerOptions::default()
        };
        let node = RedisServer::try_start(opts)?;
        let reply = node
            .inline("CLUSTER ADDSLOTSRANGE 0 16383")
            .map_err(StartError::Io)?;
        if !reply.starts_with("+OK") {
            return Err(StartError::NotReady {
                bin: "redis-server --cluster-enabled yes".into(),
                reason: format!(
                    "CLUSTER ADDSLOTSRANGE 0 16383 answered {}",
                    reply.trim_end()
                ),
                log: node.log(),
            });
        }
        RedisCluster { nodes: vec![node] }.wait_ok()
    }

    /// [`RedisCluster::try_start_single`] or panics with the reason (for tests).
    pub fn start_single() -> RedisCluster {
        Self::try_start_single().unwrap_or_else(|e| panic!("redis-proc: {e}"))
    }

    /// Waits up to 20 s for every node to say `cluster_state:ok`.
    fn wait_ok(self) -> Result<RedisCluster, StartError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.is_ok() {
            if Instant::now() > deadline {
                return Err(StartError::NotReady {
                    bin: "redis-server --cluster-enabled yes".into(),
                    reason: "cluster_state never became ok".into(),
                    log: self.nodes[0].log(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(self)
    }

    /// Starts a cluster or panics with the reason (for tests).
    pub fn start(n: usize) -> RedisCluster {
        Self::try_start(n).unwrap_or_else(|e| panic!("redis-proc: {e}"))
    }

    fn is_ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.inline("CLUSTER INFO")
                .map(|r| r.contains("cluster_state:ok"))
                .unwrap_or(false)
        })
    }

    /// The nodes (all primaries unless started with replicas).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to kill or restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// [`RedisCluster::try_start_with_replicas`] or panics with the reason (for tests).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> RedisCluster {
        Self::try_start_with_replicas(masters, replicas)
            .unwrap_or_else(|e| panic!("redis-proc: {e}"))
    }

    /// The URL of one node; any node's URL reaches the whole cluster.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }
}

#!/usr/bin/env bash
# Usage: bash results/2026-12-06-2345-proxy-cluster-failover/run.sh [ROUNDS]   (from the repository root)
# Runs proxy/tests/it/cluster_failover.rs ROUNDS times (default 3): a real cluster of 3 masters with
# a replica each (cluster-node-timeout 2 s), a client writing through the proxy every 5 ms; a manual
# CLUSTER FAILOVER, then the new master killed. Prints the FAILOVER lines of each round.
set -euo pipefail
rounds=${1:-3}
cargo=${CARGO:-cargo}
for r in $(seq 1 "$rounds"); do
  echo "round $r ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
  $cargo test -q -p lockkit-proxy --all-features --test it cluster_failover:: -- --nocapture 2>&1 | grep -E '^FAILOVER|test result'
done

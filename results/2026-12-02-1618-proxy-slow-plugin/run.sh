#!/usr/bin/env bash
# Repeats this folder's measurement: the test prints one RESULT line per run (a slow plugin hook on
# client a, client b's PING p99 with the plugin idle and busy). Bounded by the test itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
for run in 1 2 3; do
  cargo test -p lockkit-proxy --test it slow_plugin::a_slow -- --nocapture 2>&1 | grep RESULT
done

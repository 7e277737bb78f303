#!/usr/bin/env bash
# Repeats this folder's run on today's code (a debug build, as the original): four clients on one
# hot key, a holder paused 600 ms every 2 s under a 200 ms TTL, watchdog and fencing on. About 10 s
# against a throwaway local redis-server. Exit code 4 is expected: the checker counts the overlaps
# the pauses cause (the point of the run). The new report goes to a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -p lockkit-cli
out=$(mktemp -d)
"${CARGO_TARGET_DIR:-target}"/debug/lockkit bench --duration 10s --clients 4 --key-dist hot \
  --ttl 200ms --hold 20ms --watchdog --fencing --faults holder-pause=600ms/2s --seed 7 \
  --json "$out/holder-pause-fencing.json" || [ $? -eq 4 ]
echo "report in $out"

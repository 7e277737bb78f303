#!/usr/bin/env bash
# Usage: bash run.sh ROUNDS BIN...   (each BIN a lockkit binary; prints one line per server per round)
# The runner of ../2026-12-07-0240-lua-serve-speed/ (per round a fresh redis-server, first in odd
# rounds and last in even ones, and a fresh `BIN lua serve` per BIN; redis-benchmark -c 50 -n $N
# SET, GET and EVALSHA of a one-line SET NX PX script), with machine.txt written first.
# Then `python3 summary.py FILE` for the medians and the ratios to redis-server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
export N=${N:-100000}
write_machine "$here/machine.txt" "bash run.sh $* (N=$N)"
bash "$here/../2026-12-07-0240-lua-serve-speed/run.sh" "$@"

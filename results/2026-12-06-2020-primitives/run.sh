#!/usr/bin/env bash
# Semaphores and read-write locks under `lockkit bench --primitive`: the issue's done-when runs
# (a semaphore of 3 permits, an rwlock with 90% readers, and the mutex with the same flags for
# comparison), then a holder paused past its lease with and without --fencing, and a paused
# holder with dropped replies (the faults plugin of an in-process proxy) with --fencing. Short
# runs, each on a throwaway server the tool starts; about 50 s of load in all.
# usage: bash run.sh LOCKKIT_BIN   (a release build of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
source "$(dirname "$0")/../lib.sh"
write_machine "$here/machine.txt" "see run.sh (one lockkit bench per file)"
run() { # label args...
  local label=$1; shift
  echo "\$ lockkit bench $*" > "$here/$label.txt"
  "$bin" bench "$@" --json "$here/$label.json" >> "$here/$label.txt" 2>&1 \
    && echo "exit 0" >> "$here/$label.txt" || echo "exit $?" >> "$here/$label.txt"
  echo "$label: $(grep -m1 'cycles/s' "$here/$label.txt" | sed 's/^ *//') | $(tail -1 "$here/$label.txt")"
}
run semaphore --primitive semaphore --permits 3 --clients 30 --keys 10 --hold 2ms --duration 5s
run rwlock --primitive rwlock --read-ratio 0.9 --clients 30 --keys 10 --hold 1ms --duration 5s
run mutex --clients 30 --keys 10 --hold 1ms --duration 5s
pause=(--key-dist hot --ttl 200ms --hold 20ms --seed 7 --duration 5s)
run semaphore-pause --primitive semaphore --permits 3 --clients 6 "${pause[@]}" \
  --faults holder-pause=600ms/1s
run semaphore-pause-fencing --primitive semaphore --permits 3 --clients 6 "${pause[@]}" \
  --fencing --faults holder-pause=600ms/1s
run rwlock-pause --primitive rwlock --read-ratio 0.5 --clients 4 "${pause[@]}" \
  --faults holder-pause=600ms/1s
run rwlock-pause-fencing --primitive rwlock --read-ratio 0.5 --clients 4 "${pause[@]}" \
  --fencing --faults holder-pause=600ms/1s
run semaphore-pause-drop-fencing --primitive semaphore --permits 3 --clients 6 "${pause[@]}" \
  --retry --fencing --faults drop=2%,holder-pause=600ms/1s
run rwlock-pause-drop-fencing --primitive rwlock --read-ratio 0.5 --clients 4 "${pause[@]}" \
  --retry --fencing --faults drop=2%,holder-pause=600ms/1s
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"

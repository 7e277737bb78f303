#!/usr/bin/env bash
# Celery's flow (cli/tests/libraries/celery_flow.py) against redis-server, `lua serve --clock
# wall`, `lua serve` on the frozen clock, and the frozen clock moved 1 s every 50 ms by a thread
# of the flow (celery_fast_clock.py): does anything but a clock that moves by itself let the
# flow run, and do its countdown and ETA follow the server's clock?
#   celery_clock.sh LOCKKIT_BINARY OUTDIR
# Needs redis-server and python3 with celery 5.5.3, kombu 5.5.4, redis 8.2.0 importable
# (PYDEPS=DIR: a `pip install --target DIR celery==5.5.3 kombu==5.5.4 redis==8.2.0`).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="$1"; out="$2"; flow="$repo/cli/tests/libraries/celery_flow.py"
mkdir -p "$out"
[ -n "${PYDEPS:-}" ] && export PYTHONPATH="$PYDEPS"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p=$(port); redis-server --port "$p" --save "" --appendonly no --logfile /dev/null & rpid=$!; sleep 0.5
s=$SECONDS; timeout 90 python3 "$flow" "$p" > "$out/redis.txt" 2>"$out/redis.err"
echo "redis-server rc $? secs $((SECONDS-s))"
kill $rpid
for mode in wall frozen fast; do
  args=(); [ $mode = wall ] && args=(--clock wall)
  coproc S { exec "$bin" lua serve --port 0 "${args[@]}" 2>/dev/null; }
  spid=$S_PID; read -r -t 10 p <&"${S[0]}"
  s=$SECONDS
  if [ $mode = fast ]; then
    timeout 90 python3 "$here/celery_fast_clock.py" "$p" "$flow" > "$out/$mode.txt" 2>"$out/$mode.err"
  else
    timeout 90 python3 "$flow" "$p" > "$out/$mode.txt" 2>"$out/$mode.err"
  fi
  rc=$?
  same=differs; cmp -s "$out/redis.txt" "$out/$mode.txt" && same="same as redis-server"
  echo "lua serve $mode rc $rc secs $((SECONDS-s)) observations: $same"
  kill $spid; wait $spid 2>/dev/null
done

#!/usr/bin/env bash
# The observe report page in README.md: the same redis-py application run twice through
# `lockkit proxy --plugin observe` (holds at full length, then halved), both reports on one page
# by `lockkit report`, and the page's screenshot (docs/report-observe.png).
# Usage: bash run.sh [LOCKKIT_BINARY]   (from this folder; needs redis-server, redis-py, chromium)
set -euo pipefail
lockkit=${1:-lockkit}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'redis-cli -p 6391 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
redis-server --port 6391 --save "" --appendonly no --daemonize yes >/dev/null
until redis-cli -p 6391 ping >/dev/null 2>&1; do sleep 0.1; done
observe() {   # NAME SLOW
  mkdir -p "$work/$1"
  "$lockkit" proxy --listen 127.0.0.1:7091 --upstream redis://127.0.0.1:6391 --plugin observe --out "$work/$1" --quiet & proxy=$!
  until redis-cli -p 7091 ping >/dev/null 2>&1; do sleep 0.1; done
  python3 "$here/app.py" 7091 7 "$2"
  kill "$proxy"; wait "$proxy"
  mv "$work/$1"/observe-*.json "$here/$1.json"
}
observe before 1.0
observe after 0.5
"$lockkit" report "$here/before.json" "$here/after.json" -o "$here/observe-compare.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1280,1900 --screenshot="$here/../../docs/report-observe.png" \
  "file://$here/observe-compare.html" 2>/dev/null

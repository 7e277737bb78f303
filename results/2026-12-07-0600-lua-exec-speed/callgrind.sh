#!/usr/bin/env bash
# Usage: bash callgrind.sh BIN   (a lockkit binary built with debug info, as the release profile is)
# Instructions of `BIN lua exec` on the input's first 10,001 lines (SCRIPT LOAD and 5,000 pairs),
# under valgrind's callgrind: the whole run and the inclusive counts of its main parts.
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/../2026-12-06-2115-harness-speed/gen.py" "$here/../../lua/release.lua" > "$work/input.txt"
head -10001 "$work/input.txt" > "$work/small.txt"
timeout 600 valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$bin" lua exec "$work/small.txt" >/dev/null 2>"$work/log"
grep "refs:" "$work/log"
callgrind_annotate --inclusive=yes "$work/cg.out" 2>/dev/null \
  | grep -E "Engine::run \[|packed_call \[|fast_call \[|dispatch_from_script \[|Table::raw_get \[|Engine::sequence \[|Table::raw_set \[|Lua::exec_raw \[|parse_command_in \[|format_reply \[|lgc.c:luaC_step \[" \
  | sed -E 's#^ *([0-9,]+) \( *[0-9.]+%\) +.*/([^/ ]+) \[.*#\1 \2#'

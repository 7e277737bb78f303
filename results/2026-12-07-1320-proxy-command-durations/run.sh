#!/usr/bin/env bash
# Issue 42: the proxy in its production shape before and after the command durations left the
# Prometheus exporter's histogram (proxy/src/durations.rs). Two parts:
#   1. throughput and CPU per request against twemproxy: the script of
#      ../2026-12-07-0600-proxy-metrics-batched (BEFORE as prod-before, AFTER as prod-after and
#      plain-after), writing raw.csv, cpu.csv, summary.txt and machine.txt here;
#   2. the proxy's resident memory under 4M pipelined GETs, each build alone: rss.sh -> rss.txt.
# usage: bash run.sh BEFORE_BIN AFTER_BIN [ROUNDS]   (release builds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT="$here" bash "$here/../2026-12-07-0600-proxy-metrics-batched/run.sh" "$1" "$2" "${3:-3}"
bash "$here/rss.sh" "$1" "$2" > "$here/rss.txt.tmp" && mv "$here/rss.txt.tmp" "$here/rss.txt"
cat "$here/rss.txt"

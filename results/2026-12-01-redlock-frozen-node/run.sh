#!/usr/bin/env bash
# Redlock over 3 local redis-servers, 50 clients: healthy vs one node frozen with SIGSTOP, for
# two lockkit builds side by side in the same run. The script of
# ../2026-12-02-0500-redlock-frozen-link/ (its defaults), writing here.
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here} exec bash "$here/../2026-12-02-0500-redlock-frozen-link/run.sh" "$@"

#!/usr/bin/env bash
# Repeats this folder's run on the code it ran on (commit 5a64772): the tool and the script of that
# time, in a temporary checkout, so the figures compare with the files here. Bounded like the
# original (about 100 s of load at most, loopback only). The new files land in the checkout;
# this folder is left as it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
git worktree add --detach "$tmp" 5a64772
( cd "$tmp" && "${CARGO_TARGET_DIR:-target}"/release/lockkit --version >/dev/null 2>&1 || cargo build --release -p lockkit-cli; "${CARGO_TARGET_DIR:-target}"/release/lockkit bench --clients 50 --keys 100k --hold 0 --ttl 5s --duration 10s --ceiling --connections 1 )
echo "new files in $tmp (remove the checkout with: git worktree remove --force $tmp)"

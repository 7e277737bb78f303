#!/usr/bin/env bash
# Repeats this folder's run on the code it ran on (commit 7d1da06): the tool and the script of that
# time, in a temporary checkout, so the figures compare with the files here. Bounded like the
# original (about 100 s of load at most, loopback only). The new files land in the checkout;
# this folder is left as it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
git worktree add --detach "$tmp" 7d1da06
( cd "$tmp" && bash results/run.sh )
echo "new files in $tmp (remove the checkout with: git worktree remove --force $tmp)"

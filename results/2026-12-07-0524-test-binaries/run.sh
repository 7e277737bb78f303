#!/usr/bin/env bash
# Usage: bash run.sh [BEFORE] [AFTER] [ROUNDS]
# Build cost of the workspace's test targets at two commits (default: a6eabda, 103 test binaries,
# and issue-43g's head, one binary per crate). Two detached worktrees of this repository share
# one target directory ($CARGO_TARGET_DIR, else ./target); under $LOCK (default
# /tmp/lcargo.lock, the shared machine's build lock) each measurement touches one source file per
# crate, then times `cargo test --workspace --all-features --no-run`:
#   scratch  CARGO_INCREMENTAL=0: the workspace's own crates and every test target compiled from
#            scratch (registry dependencies stay built), as in a CI run; order before, after,
#            after, before.
#   touch    incremental, right after a build of the same tree (a developer's loop), twice per tree.
# Prints one line per measurement with the load average before and after it, and the number of
# test binaries per commit.
set -euo pipefail
before=${1:-a6eabda}
after=${2:-issue-43g}
rounds=${3:-1}
repo=$(git rev-parse --show-toplevel)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
lock=${LOCK:-/tmp/lcargo.lock}
tmp=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$tmp/before" 2>/dev/null; git -C "$repo" worktree remove --force "$tmp/after" 2>/dev/null; rm -rf "$tmp"' EXIT
git -C "$repo" worktree add -q --detach "$tmp/before" "$before"
git -C "$repo" worktree add -q --detach "$tmp/after" "$after"
touch_crates() {
  (cd "$1" && touch src/lib.rs resp/src/lib.rs harness/src/lib.rs report/src/lib.rs \
    loadgen/src/lib.rs proxy/src/lib.rs redis-proc/src/lib.rs tests/support/src/lib.rs cli/src/main.rs)
}
timed() { # TREE LABEL [ENV=VALUE]
  local tree=$1 label=$2 l s e
  shift 2
  touch_crates "$tmp/$tree"
  l=$(cut -d' ' -f1 /proc/loadavg)
  s=$(date +%s.%N)
  (cd "$tmp/$tree" && env "$@" cargo test -q --workspace --all-features --no-run 2>/dev/null)
  e=$(date +%s.%N)
  echo "$label $tree $(echo "$e - $s" | bc) s  load $l -> $(cut -d' ' -f1 /proc/loadavg)"
}
binaries() { # TREE
  (cd "$tmp/$1" && cargo test -q --workspace --all-features --no-run --message-format=json 2>/dev/null) |
    grep -c '"kind":\["test"\].*"executable":"/' || true
}
exec 9>"$lock"
flock 9
for tree in before after; do
  (cd "$tmp/$tree" && cargo test -q --workspace --all-features --no-run 2>/dev/null)
  echo "$tree: $(binaries $tree) test binaries"
done
for r in $(seq "$rounds"); do
  for tree in before after after before; do timed $tree scratch CARGO_INCREMENTAL=0; done
  for tree in before after; do
    (cd "$tmp/$tree" && cargo test -q --workspace --all-features --no-run 2>/dev/null)
    timed $tree touch
    timed $tree touch
  done
done

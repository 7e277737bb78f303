#!/usr/bin/env bash
# The runner of ../2026-12-07-0345-lua-serve-suite-lists-pubsub-multi/ (Redis 7.0.15's units
# against redis-server and `lockkit lua serve --clock wall`, `--singledb`, nothing skipped),
# for the three units measured here:
#   run.sh [LOCKKIT_BINARY] [OUTDIR]
# Needs tclsh, redis-server and Redis's suite (REDIS_TESTS=DIR, default ../shared/redis-tests
# beside the checkout). celery_clock.sh is the Celery clock experiment.
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../2026-12-07-0345-lua-serve-suite-lists-pubsub-multi/run.sh" "${1:-}" "${2:-}" \
  unit/type/list unit/pubsub unit/multi

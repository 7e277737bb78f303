# Sourced by run.sh and floor.sh: start the servers on loopback, each started process's pid in
# `pids` (killed on exit), wait until each answers.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
work=$(mktemp -d)

# start_redis PORT: sets redis_pid
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null &
  redis_pid=$!; pids+=($redis_pid)
  until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.1; done
}

# start_twemproxy PORT REDIS_PORT STATS_PORT: one server in its pool; sets twem_pid
start_twemproxy() {
  cat > "$work/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$1
  hash: fnv1a_64
  distribution: modula
  redis: true
  auto_eject_hosts: false
  timeout: 2000
  servers:
   - 127.0.0.1:$2:1
YML
  nutcracker -c "$work/nutcracker.yml" -o "$work/nutcracker.log" -s "$3" &
  twem_pid=$!; pids+=($twem_pid)
  until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.1; done
}

# start_lockkit BIN PORT REDIS_PORT: `lockkit proxy --plugin observe`; sets lockkit_pid
start_lockkit() {
  "$1" proxy --listen "127.0.0.1:$2" --upstream "redis://127.0.0.1:$3" \
    --plugin observe --out "$work" --quiet > "$work/proxy-$2.txt" 2>&1 &
  lockkit_pid=$!; pids+=($lockkit_pid)
  until redis-cli -p "$2" ping >/dev/null 2>&1; do sleep 0.1; done
}

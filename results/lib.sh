# Shared by the before/after scripts under results/: `source "$(dirname "$0")/../lib.sh"`.

# start_server PORT: a throwaway redis-server on 127.0.0.1:PORT (no persistence), stopped when
# the script exits; its pid in $server. Returns once it answers PING.
start_server() {
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --logfile /dev/null & server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.1; done
}

# write_machine FILE COMMAND: the date, the machine, its load, the server's version and COMMAND.
write_machine() {
  { echo "date: $(date -u +%FT%TZ)"
    echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "server: $(redis-server --version)"; echo "command: $2"; } > "$1"
}

# out_dir SCRIPT_DIR [OUT_DIR]: where a script writes: OUT_DIR (created) if given, else its own folder.
out_dir() {
  if [ -n "${2:-}" ]; then mkdir -p "$2"; (cd "$2" && pwd); else (cd "$1" && pwd); fi
}

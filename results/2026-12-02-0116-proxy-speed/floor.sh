#!/usr/bin/env bash
# What one unpipelined request costs on the wire and in system calls, twemproxy vs lockkit
# proxy (and the server direct): TCP segments sent per request (/proc/net/snmp OutSegs, counted
# machine-wide, so a neighbour's loopback traffic adds a little) and the proxy process's socket
# system calls per request (perf stat on the syscalls tracepoints).
# usage: bash floor.sh LOCKKIT_BIN   (writes floor.txt)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lockkit=$1
redis_port=7611 twem_port=7612 proxy_port=7613
. "$here/servers.sh"
start_redis $redis_port
start_twemproxy $twem_port $redis_port 7615
start_lockkit "$lockkit" $proxy_port $redis_port; proxy_pid=$lockkit_pid
n=100000
segs() { awk '/^Tcp:/ { getline; print $12 }' /proc/net/snmp; }
{
  echo "date: $(date -u +%FT%TZ); redis-benchmark -t get -c 50 -r 100000 -n $n (no pipelining)"
  for t in direct:$redis_port:0 twemproxy:$twem_port:$twem_pid lockkit-proxy:$proxy_port:$proxy_pid; do
    IFS=: read -r name port pid <<< "$t"
    ps_=""
    if [ "$pid" != 0 ]; then
      perf stat -x, -e 'syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_readv,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex' \
        -p "$pid" -o "$work/sys.perf" & ps_=$!
      sleep 0.2
    fi
    a=$(segs)
    rps=$(redis-benchmark -p "$port" -t get -c 50 -r 100000 -n $n --csv -q | grep -v '^"test"' | cut -d, -f2 | tr -d '"')
    b=$(segs)
    [ -n "$ps_" ] && { kill -INT $ps_; wait $ps_ 2>/dev/null || true; }
    printf '%-14s %8.0f req/s  TCP segments sent per request %.2f' "$name" "$rps" "$(echo "($b - $a) / $n" | bc -l)"
    if [ -n "$ps_" ]; then
      printf '  proxy system calls per request:'
      awk -F, -v n=$n '$1 > 0 { sub("syscalls:sys_enter_", "", $3); printf " %s %.2f", $3, $1 / n }' "$work/sys.perf"
    fi
    echo
  done
} | tee "$here/floor.txt"

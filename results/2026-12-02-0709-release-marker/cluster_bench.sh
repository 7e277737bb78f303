#!/bin/bash
# Before/after lockkit bench against one throwaway 3-primary cluster, runs interleaved.
set -e
OUT=$1; ROUNDS=${2:-3}; DUR=${3:-8s}
mkdir -p $OUT
ports="7401 7402 7403"
for p in $ports; do
  mkdir -p ${TMPDIR:-/tmp}/cl-$p
  (cd ${TMPDIR:-/tmp}/cl-$p && rm -f nodes.conf && redis-server --port $p --cluster-enabled yes --cluster-config-file nodes.conf --save "" --appendonly no --daemonize yes --logfile ${TMPDIR:-/tmp}/cl-$p/log)
done
sleep 0.5
redis-cli --cluster create 127.0.0.1:7401 127.0.0.1:7402 127.0.0.1:7403 --cluster-replicas 0 --cluster-yes > $OUT/cluster-create.log
for i in $(seq 1 50); do
  ok=1; for p in $ports; do redis-cli -p $p cluster info | grep -q cluster_state:ok || ok=0; done
  [ $ok = 1 ] && break; sleep 0.2
done
for r in $(seq 1 $ROUNDS); do
  for v in old new; do
    for p in $ports; do redis-cli -p $p config resetstat >/dev/null; redis-cli -p $p flushall >/dev/null; done
    ${LOCKKIT_DIR:-.}/lockkit-$v bench --url redis://127.0.0.1:7401 --duration $DUR --warmup 1s --clients 16 --keys 10k --hold 0ms --ttl 5s --quiet --json $OUT/$v-$r.json --out $OUT/$v-$r > $OUT/$v-$r.txt 2>&1
    for p in $ports; do echo "$p $(redis-cli -p $p info commandstats | grep -E 'cmdstat_(evalsha|set):' | tr '\r\n' '  ')"; done > $OUT/$v-$r.commandstats
    echo "$v round $r: $(grep -o '"cycles_per_s":[0-9.]*' $OUT/$v-$r.json | head -1)"
  done
done
for p in $ports; do redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true; done

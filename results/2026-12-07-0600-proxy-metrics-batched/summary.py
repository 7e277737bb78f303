"""Medians of raw.csv against twemproxy, CPU per request of every process from cpu.csv, and
the bound two shared cores put on each target's rate (see README.md)."""
import csv, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for r in rows:
    med.setdefault((r['pipeline'], r['test'], r['target']), []).append(float(r['rps']))
for (p, t, name), v in sorted(med.items()):
    tw = statistics.median(med[(p, t, 'twemproxy')])
    m = statistics.median(v)
    print(f"-P {p:>2} {t:<4} {name:<12} median {m:>10,.0f} req/s  {m / tw:.2f}x twemproxy  "
          f"(rounds: {', '.join(f'{x:,.0f}' for x in v)})")
print()
cpu = {}
for r in csv.DictReader(open(sys.argv[2])):
    n = float(r['requests'])
    k = (r['pipeline'], r['target'])
    cpu.setdefault(k, []).append({
        'rate': n / float(r['wall_s']),
        'bench': 1e6 * float(r['bench_cpu_s']) / n,
        'server': 1e6 * float(r['server_cpu_s']) / n,
        'target': 1e6 * float(r['target_cpu_s']) / n,
    })
print("CPU µs per request (medians over rounds; SET and GET together), and the bounds:")
print("  2-core bound = 2 s / (sum of the three) ; single-thread bound = 1 s / max(one process)")
print("  target-free bound = the 2-core bound with the target's CPU at zero")
for (p, name), v in sorted(cpu.items()):
    m = {k: statistics.median(x[k] for x in v) for k in v[0]}
    total = m['bench'] + m['server'] + m['target']
    two = 2e6 / total
    single = 1e6 / max(m['bench'], m['server'], m['target'])
    free = 2e6 / (m['bench'] + m['server'])
    print(f"-P {p:>2} {name:<12} bench {m['bench']:5.2f}  server {m['server']:5.2f}  target {m['target']:5.2f}  "
          f"sum {total:5.2f} | measured {m['rate']:>9,.0f}/s  2-core bound {two:>9,.0f}/s  "
          f"single-thread bound {single:>9,.0f}/s  target-free bound {free:>9,.0f}/s")

#!/usr/bin/env python3
"""summary.py FILE: per server the medians of SET, GET, EVALSHA over the rounds of a run.sh
output, each ratio to redis-server of the same run, their geometric mean, and per round the
geometric mean of each binary's ratios to that round's redis-server."""
import math, re, statistics, sys

rounds, loads = [], []
for line in open(sys.argv[1]):
    if line.startswith("round"):
        rounds.append({})
        loads.append(line.split("load ")[1].split()[0])
        continue
    m = re.match(r"(\S+) set=([\d.]+) get=([\d.]+) evalsha=([\d.]+)", line)
    if m and rounds:
        rounds[-1][m[1]] = [float(m[i]) for i in (2, 3, 4)]
names = list(dict.fromkeys(n for r in rounds for n in r))
med = {n: [statistics.median(r[n][i] for r in rounds if n in r) for i in range(3)] for n in names}
ref = med["redis-server"]
print(f"{len(rounds)} rounds, load (1 min) {min(loads)}-{max(loads)}")
print("server              SET       GET   EVALSHA   ratios (SET/GET/EVALSHA)  geomean")
for n in names:
    ratios = [med[n][i] / ref[i] for i in range(3)]
    g = math.prod(ratios) ** (1 / 3)
    print(f"{n:16} {med[n][0]:8.0f}  {med[n][1]:8.0f}  {med[n][2]:8.0f}   "
          + " / ".join(f"{x:.2f}" for x in ratios) + f"   {g:.2f}")
print("per round, geometric mean of the ratios to that round's redis-server:")
for n in names:
    if n == "redis-server":
        continue
    per = [math.prod(r[n][i] / r["redis-server"][i] for i in range(3)) ** (1 / 3) for r in rounds]
    print(f"  {n:16} " + " ".join(f"{x:.2f}" for x in per)
          + f"   (min {min(per):.2f}, median {statistics.median(per):.2f})")

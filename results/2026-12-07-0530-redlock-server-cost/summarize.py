#!/usr/bin/env python3
"""Per lock attempt (one round: a SET to every node, then the release), from run.sh's files:
the client's and the three servers' CPU, syscalls, requests and bytes. usage: summarize.py DIR"""
import glob, os, re, statistics, sys

NESTED = {"get", "del", "exists", "publish", "pexpire"}  # run inside scripts, not requests


def perf(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0] and f[0][0].isdigit():
            out[f[2].split(":")[-1]] = float(f[0])
    return out


def info(path):
    cmds, stats = {}, {}
    for line in open(path):
        m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
        if m:
            cmds[m.group(1)] = int(m.group(2))
        elif ":" in line and not line.startswith("#"):
            k, v = line.strip().split(":", 1)
            stats[k] = v
    return cmds, stats


def run(d, name):
    txt = open(os.path.join(d, name + ".txt")).read()
    m = re.search(r"([\d,]+(?:\.\d+)?)\s*cycles/s", txt) or re.search(r"cycles/s\s+([\d,]+)", txt)
    rate = float(m.group(1).replace(",", "")) if m else float("nan")
    client = perf(os.path.join(d, name + ".client.perf"))
    nodes = []
    for i in (1, 2, 3):
        cmds, stats = info(os.path.join(d, f"{name}.node{i}.info"))
        p = perf(os.path.join(d, f"{name}.node{i}.perf"))
        set_nested = name.endswith("node-redlock")
        requests = sum(
            c for k, c in cmds.items()
            if k not in NESTED and not (k == "set" and set_nested)
            and not k.startswith("config") and k not in ("flushall", "info"))
        nodes.append(dict(attempts=cmds.get("set", 0), requests=requests, cmds=cmds,
                          reads=int(stats.get("total_reads_processed", 0)),
                          writes=int(stats.get("total_writes_processed", 0)),
                          inb=int(stats.get("total_net_input_bytes", 0)),
                          outb=int(stats.get("total_net_output_bytes", 0)), perf=p))
    attempts = statistics.mean(n["attempts"] for n in nodes)
    per = lambda x: x / attempts if attempts else float("nan")
    srv_cpu = sum(n["perf"].get("task-clock", 0) for n in nodes)  # msec
    return dict(
        name=name, rate=rate, attempts=attempts,
        client_us=per(client.get("task-clock", 0) * 1000),
        server_us=per(srv_cpu * 1000),
        client_sys=per(client.get("sys_enter", 0)),
        server_sys=per(sum(n["perf"].get("sys_enter", 0) for n in nodes)),
        server_rd=per(sum(n["perf"].get("sys_enter_read", 0) for n in nodes)),
        server_wr=per(sum(n["perf"].get("sys_enter_write", 0) + n["perf"].get("sys_enter_writev", 0) for n in nodes)),
        server_epoll=per(sum(n["perf"].get("sys_enter_epoll_wait", 0) for n in nodes)),
        requests=per(sum(n["requests"] for n in nodes)),
        req_per_read=sum(n["requests"] for n in nodes) / max(1, sum(n["reads"] for n in nodes)),
        bytes_in=per(sum(n["inb"] for n in nodes)), bytes_out=per(sum(n["outb"] for n in nodes)),
        cs=per(sum(n["perf"].get("context-switches", 0) for n in nodes)),
        cmds={k: round(per(sum(n["cmds"].get(k, 0) for n in nodes)), 2)
              for k in sorted(set().union(*(n["cmds"] for n in nodes)))},
    )


def main(d):
    names = sorted({os.path.basename(p)[:-len(".client.perf")] for p in glob.glob(os.path.join(d, "*.client.perf"))},
                   key=lambda s: (s.split("-", 1)[1], s))
    rows = [run(d, n) for n in names]
    cols = [("cycles/s", "rate", "{:,.0f}"), ("client CPU µs", "client_us", "{:.2f}"),
            ("servers CPU µs", "server_us", "{:.2f}"), ("total µs", None, "{:.2f}"),
            ("requests", "requests", "{:.2f}"), ("req/read", "req_per_read", "{:.1f}"),
            ("srv read()", "server_rd", "{:.3f}"), ("srv write()", "server_wr", "{:.3f}"),
            ("srv epoll_wait", "server_epoll", "{:.3f}"), ("srv syscalls", "server_sys", "{:.3f}"),
            ("srv ctx sw", "cs", "{:.3f}"), ("client syscalls", "client_sys", "{:.3f}"),
            ("bytes in", "bytes_in", "{:.0f}"), ("bytes out", "bytes_out", "{:.0f}")]
    print("Per attempt (one Redlock round over 3 nodes: acquire + release), all three servers summed.\n")
    print("| run | " + " | ".join(c[0] for c in cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    for r in rows:
        vals = []
        for _, k, f in cols:
            v = r["client_us"] + r["server_us"] if k is None else r[k]
            vals.append(f.format(v))
        print(f"| {r['name']} | " + " | ".join(vals) + " |")
    print("\nCommands per attempt (three nodes summed; script-internal calls included):\n")
    for r in rows:
        print(f"- {r['name']}: " + ", ".join(f"{k} {v}" for k, v in r["cmds"].items() if v >= 0.001))


main(sys.argv[1])

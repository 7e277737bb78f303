#!/usr/bin/env python3
"""Writes the 100k-line input: SCRIPT LOAD of lua/release.lua, then 50,000 pairs of
`SET lock:N tok NX PX 30000` and `EVALSHA <release> 1 lock:N tok`.
Usage: python3 gen.py lua/release.lua > input.txt"""
import hashlib
import sys

body = open(sys.argv[1], "rb").read()
sha = hashlib.sha1(body).hexdigest()
quoted = "".join(
    {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, c)
    for c in body.decode()
)
out = sys.stdout
out.write(f'SCRIPT LOAD "{quoted}"\n')
for i in range(50_000):
    out.write(f"SET lock:{i} tok{i} NX PX 30000\n")
    out.write(f"EVALSHA {sha} 1 lock:{i} tok{i}\n")

"""The same uncontended workload through redis-py's asyncio Lock, for comparison.

50 tasks, uniform over 100k keys, hold 0, TTL 5 s, closed loop, 10 s; prints cycles/s.
redis-py's Lock acquires with SET NX PX and releases with a registered Lua script (EVALSHA),
the same commands lockkit sends. Usage:
    python3 -m venv /tmp/v && /tmp/v/bin/pip install redis
    /tmp/v/bin/python results/other-clients/redis_py_lock.py redis://127.0.0.1:PORT
"""
import asyncio
import random
import sys
import time

import redis.asyncio as aioredis

CLIENTS, KEYS, TTL_S, DURATION_S = 50, 100_000, 5.0, 10.0


async def worker(r, stop_at, counts, i):
    n = 0
    while time.monotonic() < stop_at:
        lock = r.lock(f"pylock:{random.randrange(KEYS)}", timeout=TTL_S, blocking=False)
        if await lock.acquire():
            await lock.release()
            n += 1
    counts[i] = n


async def main(url):
    r = aioredis.from_url(url, max_connections=CLIENTS)
    start = time.monotonic()
    counts = [0] * CLIENTS
    await asyncio.gather(*(worker(r, start + DURATION_S, counts, i) for i in range(CLIENTS)))
    took = time.monotonic() - start
    print(f"redis-py {aioredis.__name__} Lock: {sum(counts) / took:,.0f} cycles/s over {took:.1f}s")
    await r.aclose()


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"))

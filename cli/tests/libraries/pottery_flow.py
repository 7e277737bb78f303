# pottery against a server on the port given: Redlock (acquire, a second holder refused,
# extend, release, expiry, the context manager, synchronize), RedisDict, RedisCounter,
# AIORedlock (redis.asyncio), RedisList, RedisSet, RedisDeque, RedisSimpleQueue, BloomFilter,
# HyperLogLog, NextID and redis_cache. Prints what the library observed, for
# cli/tests/it/lua_serve_python_apps.rs to compare. With `virtual` as second argument the server
# is `lockkit lua serve` on its frozen clock: a lock's expiry comes with LOCKKIT.CLOCK ADVANCE
# instead of a sleep (pottery's Redlock leaves expiry to the server's PX; the client reads its
# own clock only to take the time spent acquiring off the validity it reports).
import asyncio, sys, time, warnings
import redis
import refusals  # noqa: F401 (reports "not emulated" errors the library swallows)
from redis.asyncio import Redis as AIORedis
from pottery import (AIORedlock, BloomFilter, HyperLogLog, NextID, Redlock, RedisCounter,
                     RedisDeque, RedisDict, RedisList, RedisSet, RedisSimpleQueue, redis_cache,
                     synchronize)

warnings.simplefilter("ignore")  # pottery warns of O(n) operations
port = int(sys.argv[1])
r = redis.Redis(port=port)
virtual = len(sys.argv) > 2 and sys.argv[2] == "virtual"
r.flushall()
out = []


def later(ms):
    """Lets `ms` milliseconds pass on the server."""
    if virtual:
        r.execute_command("LOCKKIT.CLOCK", "ADVANCE", ms)
    else:
        time.sleep(ms / 1000)


def raises(f):
    try:
        f()
        return "no error"
    except Exception as e:  # the class is what the flow observes
        return type(e).__name__


a = Redlock(key="printer", masters={r}, auto_release_time=10, num_extensions=2)
b = Redlock(key="printer", masters={r}, auto_release_time=10)
out.append(("acquire", a.acquire(blocking=False)))
out.append(("second non-blocking", b.acquire(blocking=False)))
out.append(("second timeout 0.3", b.acquire(timeout=0.3)))
out.append(("locked", a.locked() > 0, b.locked()))
out.append(("key", r.exists("redlock:printer"), 9000 < r.pttl("redlock:printer") <= 10000))
a.extend()
a.extend()
out.append(("third extend", raises(a.extend)))
a.release()
out.append(("released", a.locked(), r.exists("redlock:printer")))
out.append(("release again", raises(a.release)))
out.append(("second after release", b.acquire(blocking=False)))
b.release()

short = Redlock(key="short", masters={r}, auto_release_time=1)
out.append(("short acquire", short.acquire(blocking=False)))
other = Redlock(key="short", masters={r}, auto_release_time=1)
out.append(("other before expiry", other.acquire(blocking=False)))
later(1100)
out.append(("after expiry", short.locked(), r.exists("redlock:short")))
out.append(("extend expired", raises(short.extend)))
out.append(("other after expiry", other.acquire(blocking=False)))
out.append(("release expired", raises(short.release)))
other.release()

with Redlock(key="ctx", masters={r}, auto_release_time=5) as held:
    out.append(("context", held.locked() > 0, r.exists("redlock:ctx")))
out.append(("context after", r.exists("redlock:ctx")))


@synchronize(key="once", masters={r}, auto_release_time=5)
def once():
    return r.exists("redlock:once")


out.append(("synchronize", once(), r.exists("redlock:once")))



async def aio():
    ar = AIORedis(port=port)
    a = AIORedlock(key="aio", masters={ar}, auto_release_time=1)
    b = AIORedlock(key="aio", masters={ar}, auto_release_time=1)
    seen = [await a.acquire(blocking=False), await b.acquire(blocking=False)]
    seen.append(await a.locked() > 0)
    await a.extend()
    later(1100)
    seen += [await a.locked(), await b.acquire(blocking=False)]
    await b.release()
    seen.append(await ar.exists("redlock:aio"))
    await ar.aclose()
    return seen


out.append(("aioredlock", asyncio.run(aio())))

d = RedisDict({"a": 1, "b": [1, 2]}, redis=r, key="dict")
d["c"] = {"x": None}
d.update(e=2.5, a="one")
del d["b"]
out.append(("dict", len(d), "a" in d, "b" in d, sorted(d.items())))
out.append(("dict get", d.get("zzz", "default"), d.setdefault("f", 6), d.pop("f")))
out.append(("dict raw", sorted(r.hgetall("dict").items())))
out.append(("dict missing", raises(lambda: d["nope"])))
out.append(("dict to_dict", sorted(d.to_dict().items())))

c = RedisCounter("abracadabra", redis=r, key="counter")
c.update({"a": 2, "z": 1})
c.subtract("bb")
out.append(("counter", c["a"], c["b"], c["missing"], c.most_common(2)))
out.append(("counter elements", sorted(c.elements())))
out.append(("counter total", sum(c.values()), sorted(c.to_counter().items())))
out.append(("counter raw", sorted(r.hgetall("counter").items())))

lst = RedisList([1, 4, 9], redis=r, key="list")
lst.append(16)
lst.insert(1, 2)
lst.extend([25, 36])
out.append(("list", list(lst), lst[1], lst[-1], lst[1:3], len(lst)))
lst[0] = 0
out.append(("list pop", lst.pop(), lst.pop(0), lst.index(9), 4 in lst, list(lst)))
del lst[1]
out.append(("list del", list(lst), raises(lambda: lst[99])))

s = RedisSet({"x", "y"}, redis=r, key="set")
s.add("z")
s.discard("x")
t = RedisSet({"z", "w"}, redis=r, key="set2")
out.append(("set", sorted(s), "y" in s, len(s), sorted(set(s) | set(t)), sorted(set(s) & set(t)), s.isdisjoint(t)))
out.append(("set ops", sorted(s.union({"q"})), s.issubset({"y", "z", "k"}), raises(lambda: s.remove("nope"))))

dq = RedisDeque([1, 2, 3], redis=r, key="deque", maxlen=4)
dq.appendleft(0)
dq.append(4)
dq.rotate(1)
out.append(("deque", list(dq), dq.popleft(), dq.pop(), list(dq)))

q = RedisSimpleQueue(redis=r, key="queue")
for n in (1, "two", [3]):
    q.put(n)
out.append(("queue", q.qsize(), q.get(), q.get(), q.get(), q.empty()))
out.append(("queue empty get", raises(lambda: q.get(timeout=0.1))))

bf = BloomFilter({"a", "b"}, num_elements=100, false_positives=0.01, redis=r, key="bloom")
bf.add("c")
out.append(("bloom", "a" in bf, "c" in bf, "zzz" in bf, len(bf), list(bf.contains_many("a", "q"))))
h = HyperLogLog({"x", "y"}, redis=r, key="hll")
h.update({"z"})
out.append(("hyperloglog", len(h), "x" in h, "q" in h))
ids = NextID(key="ids", masters={r})
out.append(("nextid", next(ids), next(ids), next(ids)))
calls = []


@redis_cache(redis=r, key="cache")
def square(n):
    calls.append(n)
    return n * n


out.append(("redis_cache", square(3), square(3), square(4), calls, square.cache_info().hits))
out.append(("keys", sorted(r.keys())))
print(repr(out))

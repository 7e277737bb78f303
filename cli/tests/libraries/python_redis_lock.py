# python-redis-lock (redis_lock) against a server on the port given: locks, a blocked waiter
# woken by a release (BLPOP on the signal key), timeouts, reset, the context manager. Prints
# what the library observed, for cli/tests/it/lua_serve_libraries.rs to compare.
import sys, threading, time
import redis, redis_lock
r = redis.Redis(port=int(sys.argv[1]))
r.flushall()
out = []
a = redis_lock.Lock(r, "job", expire=60, id=b"owner-a")
out.append(("acquire", a.acquire(blocking=False)))
b = redis_lock.Lock(r, "job", expire=60, id=b"owner-b")
out.append(("second non-blocking", b.acquire(blocking=False)))
out.append(("second timeout 1", b.acquire(timeout=1)))
got = []
def waiter():
    c = redis_lock.Lock(r, "job", expire=60, id=b"owner-c")
    got.append(c.acquire(timeout=10))
    got.append(c.get_owner_id())
    c.release()
t = threading.Thread(target=waiter); t.start()
time.sleep(0.3)
out.append(("owner", a.get_owner_id()))
a.release()
t.join()
out.append(("waiter", got))
out.append(("locked after", a.locked()))
d = redis_lock.Lock(r, "job", expire=60, id=b"owner-d")
d.acquire(); d.reset()
out.append(("after reset", d.locked()))
with redis_lock.Lock(r, "ctx", expire=5):
    out.append(("ctx", r.exists("lock:ctx")))
out.append(("keys", sorted(k for k in r.keys() if not k.startswith(b"lock-signal:"))))
print(repr(out))

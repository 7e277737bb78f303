"""The application behind the observe report page: redis-py's Lock on four key patterns.

python3 app.py PORT SEED SLOW: 4 threads take order locks (6 ids, so they contend), then carts,
a nightly job and invoices whose 200 ms TTL is shorter than some holds. SLOW scales every hold.
"""
import random, sys, threading, time
import redis
from redis.exceptions import LockNotOwnedError, LockError
port = int(sys.argv[1]); seed = int(sys.argv[2]); slow = float(sys.argv[3])
random.seed(seed)
r = redis.Redis(port=port)
def hold(name, timeout, secs):
    l = r.lock(name, timeout=timeout, blocking_timeout=2)
    if not l.acquire():
        return
    time.sleep(secs)
    try:
        l.release()
    except (LockNotOwnedError, LockError):
        pass
def orders():
    for _ in range(25):
        hold(f"order:{random.randint(1,6)}:lock", 30, random.uniform(0.01, 0.06) * slow)
ts = [threading.Thread(target=orders) for _ in range(4)]
for t in ts: t.start()
for i in range(60):
    hold(f"cart:{random.randint(1000,9999)}", 5, random.uniform(0.001, 0.008) * slow)
for _ in range(4):
    hold("job:nightly-report", 2, random.uniform(0.3, 0.5) * slow)
for i in range(10):
    hold(f"invoice:{i}:lock", 0.2, random.uniform(0.08, 0.28) * slow)
for t in ts: t.join()

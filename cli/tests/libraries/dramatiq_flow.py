# dramatiq's RedisBroker against a server on the port given: a worker in this process runs an
# actor whose result comes back through the Redis result backend, one that fails once and is
# retried 60 seconds later, a message sent with a 60-second delay, one that fails every time
# and lands in the dead-letter queue, and a result kept 5 seconds (gone once the server's
# clock has passed them: LOCKKIT.CLOCK ADVANCE on lua serve, a bounded real wait on
# redis-server's side). Prints what the library observed, for
# cli/tests/it/lua_serve_python_queues.rs to compare.
# dramatiq reads the time on the client (a delayed message's eta and the broker's heartbeats
# are this process's milliseconds): delays are passed by moving this process's clock, never
# by sleeping. With `virtual` as second argument the server is `lockkit lua serve`, and its
# clock is moved by as much with LOCKKIT.CLOCK ADVANCE, so that the TTLs it keeps age alike.
import sys
import time

import dramatiq
import refusals  # noqa: F401 (reports "not emulated" errors the library swallows)
import dramatiq.common
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import ResultFailure, ResultMissing, Results
from dramatiq.results.backends.redis import RedisBackend

port, virtual = int(sys.argv[1]), sys.argv[2:] == ["virtual"]
shift = [0]
real_millis = dramatiq.common.current_millis


def shifted_millis():
    return real_millis() + shift[0]


# Every dramatiq module reads the time through current_millis: each has its own name for it.
for module in [m for n, m in list(sys.modules.items()) if n.startswith("dramatiq")]:
    if getattr(module, "current_millis", None) is real_millis:
        module.current_millis = shifted_millis

broker = RedisBroker(host="127.0.0.1", port=port)
broker.add_middleware(Results(backend=RedisBackend(host="127.0.0.1", port=port)))
dramatiq.set_broker(broker)
calls = []


@dramatiq.actor(store_results=True, max_retries=0)
def double(n):
    calls.append(("double", n))
    return n * 2


# Its result is kept 5 seconds: the server's clock decides when it is gone.
@dramatiq.actor(store_results=True, max_retries=0, result_ttl=5_000)
def brief(n):
    calls.append(("brief", n))
    return -n


@dramatiq.actor(store_results=True, max_retries=1, min_backoff=60_000, max_backoff=60_000)
def flaky(n):
    calls.append(("flaky", n))
    if len([c for c in calls if c[0] == "flaky"]) == 1:
        raise RuntimeError("first try fails")
    return n + 1


@dramatiq.actor(store_results=True, max_retries=0)
def boom(n):
    calls.append(("boom", n))
    raise ValueError(f"boom {n}")


def result(message, block=True):
    try:
        return ("returned", message.get_result(block=block, timeout=20_000))
    except ResultMissing:
        return ("missing",)
    except ResultFailure as e:
        return ("failed", str(e))


def advance(ms):
    shift[0] += ms
    if virtual:
        broker.client.execute_command("LOCKKIT.CLOCK", "ADVANCE", str(ms))
    else:
        # redis-server's clock is the wall clock: the brief result's 5 seconds pass for real
        # (a bounded wait on this side only).
        for _ in range(100):
            if result(kept, block=False) == ("missing",):
                break
            time.sleep(0.1)


broker.flush_all()
out = []
worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
worker.start()

out.append(("double", result(double.send(21))))
kept = brief.send(3)
out.append(("brief", result(kept)))
bad = boom.send(7)
out.append(("boom", result(bad)))
retried = flaky.send(1)
later = double.send_with_options(args=(50,), delay=60_000)
time.sleep(0.3)  # the retry's and the delayed message's time has not come: nothing runs
out.append(("before", result(retried, block=False), result(later, block=False)))
out.append(("calls before", list(calls)))

advance(61_000)
out.append(("brief after", result(kept, block=False)))
out.append(("flaky", result(retried)))
out.append(("later", result(later)))
out.append(("calls", calls))
# The worker acknowledges in its own time: the failed message reaches the dead-letter queue
# soon after its result (a bounded wait on the real clock).
for _ in range(100):
    dead = broker.client.zrange("dramatiq:default.XQ", 0, -1)
    if dead:
        break
    time.sleep(0.05)
out.append(("dead letters", len(dead)))
dead_msgs = broker.client.hgetall("dramatiq:default.XQ.msgs")
out.append(("dead actors", sorted(dramatiq.Message.decode(m).actor_name for m in dead_msgs.values())))
out.append(("queue", broker.client.llen("dramatiq:default"), broker.client.zcard("dramatiq:default.DQ")))
worker.stop()
broker.close()
print("\n".join(repr(o) for o in out))

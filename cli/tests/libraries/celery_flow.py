# Celery with the Redis broker and the Redis result backend against a server on the port
# given: a worker (the solo pool, in a thread of this process, as celery.contrib.testing
# starts it; late acks, task events) runs a task, a task retried until it succeeds, one
# failing its retries, one raising, a countdown task, an ETA task, a revoked countdown task, a
# prioritised task, a group (saved and restored) and a chord; the results are read back
# through the result backend, the worker answers a broadcast ping and `inspect registered`,
# and an event receiver sees the task events. Prints what Celery observed (task ids and times
# left out), for cli/tests/it/lua_serve_python_apps.rs to compare.
# Countdowns and ETAs are timers of the worker (it holds the message until then): the
# server's clock plays no part. But kombu's consumers wait in `BRPOP ... 1` and count on it
# timing out every second (to take up a new reply queue for `ping` and `inspect`, and to
# stop): `lockkit lua serve` runs this flow with `--clock wall`.
import datetime, json, re, sys, threading, time, warnings
import redis
import refusals  # noqa: F401 (reports "not emulated" errors the library swallows)
from celery import Celery, chord, group
from celery.contrib.testing.worker import start_worker
from celery.result import GroupResult

warnings.simplefilter("ignore")
port = int(sys.argv[1])
url = f"redis://127.0.0.1:{port}/0"
app = Celery("lk", broker=url, backend=url)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_acks_late=True,
    worker_send_task_events=True,
    task_send_sent_event=True,
    result_extended=True,
)
import celery.contrib.testing.tasks  # noqa: E402,F401 (celery.ping, start_worker's check)


@app.task
def add(x, y):
    return x + y


@app.task
def total(values):
    return sum(values)


@app.task(bind=True, max_retries=3)
def flaky(self, failures):
    if self.request.retries < failures:
        raise self.retry(exc=ValueError(f"attempt {self.request.retries + 1} fails"), countdown=0)
    return f"succeeded after {self.request.retries} retries"


@app.task(bind=True, max_retries=1)
def hopeless(self):
    raise self.retry(exc=RuntimeError(f"attempt {self.request.retries + 1} fails"), countdown=0)


@app.task
def boom():
    raise KeyError("missing")


def outcome(result):
    try:
        value = result.get(timeout=30)
    except Exception as e:  # the class and message are what the flow observes
        value = f"{type(e).__name__}: {e}"
    return (result.state, value)


def until(check, what):
    """Waits (at most 30 s) until `check()` is true."""
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


r = redis.Redis(port=port)
r.flushall()
out = []
ids = {}
events = []


def receive_events():
    with app.connection() as conn:
        handlers = {"*": lambda e: events.append(e["type"])}
        app.events.Receiver(conn, handlers=handlers).capture(limit=None, timeout=120)


threading.Thread(target=receive_events, daemon=True).start()
until(lambda: r.pubsub_numpat() + len(r.pubsub_channels()) > 0, "the event receiver")

with start_worker(app, pool="solo", loglevel="WARNING", shutdown_timeout=30):
    res = add.delay(2, 3)
    ids[res.id] = "add"
    out.append(("add", outcome(res)))
    res = flaky.delay(2)
    ids[res.id] = "flaky"
    out.append(("flaky", outcome(res)))
    res = hopeless.delay()
    ids[res.id] = "hopeless"
    out.append(("hopeless", outcome(res)))
    res = boom.delay()
    ids[res.id] = "boom"
    out.append(("boom", outcome(res), res.traceback is not None))
    started = time.monotonic()
    res = add.apply_async((20, 1), countdown=1)
    ids[res.id] = "countdown"
    out.append(("countdown", outcome(res), time.monotonic() - started > 0.5))
    eta = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    started = time.monotonic()
    res = add.apply_async((30, 1), eta=eta)
    ids[res.id] = "eta"
    out.append(("eta", outcome(res), time.monotonic() - started > 0.5))
    res = add.apply_async((5, 5), countdown=2)
    res.revoke()
    until(res.ready, "the revoked task")
    out.append(("revoked", res.state))
    res = add.apply_async((1, 2), priority=5)
    out.append(("priority", outcome(res)))
    res = group(add.s(i, i) for i in range(4))()
    res.save()
    out.append(("group", res.get(timeout=30), res.successful()))
    back = GroupResult.restore(res.id)
    out.append(("group restored", back.ready(), [x.result for x in back.results]))
    first = app.AsyncResult(back.results[0].id)
    out.append(("extended result", first.name, first.args, first.queue))
    back.results[1].forget()
    out.append(("forgotten", r.exists(f"celery-task-meta-{back.results[1].id}")))
    res = chord(add.s(i, 10) for i in range(3))(total.s())
    out.append(("chord", outcome(res)))
    out.append(("ping", [list(reply.values()) for reply in app.control.ping(timeout=2)]))
    registered = app.control.inspect(timeout=2).registered() or {}
    out.append(("registered", sorted(t for tasks in registered.values() for t in tasks)))

# What the result backend holds, read back with a new AsyncResult and as raw JSON.
for task_id, name in sorted(ids.items(), key=lambda kv: kv[1]):
    meta = json.loads(r.get(f"celery-task-meta-{task_id}"))
    out.append((name, app.AsyncResult(task_id).state, meta["status"], meta["result"],
                0 < r.ttl(f"celery-task-meta-{task_id}") <= 86400))
out.append(("keys", sorted({re.sub(r"[0-9a-f-]{36}$", "<id>", k.decode()) for k in r.keys()})))
wanted = {"task-sent", "task-received", "task-started", "task-succeeded", "task-failed",
          "task-retried", "task-revoked"}
out.append(("events", sorted(wanted & set(events))))
print(repr(out))

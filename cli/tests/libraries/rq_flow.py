# rq against a server on the port given: a burst worker runs a job that succeeds, one that
# fails (it lands in the failed registry), one retried once, and a job enqueued to run 60
# seconds later, which the worker's scheduler moves to the queue once its time has come.
# A job kept 5 seconds expires on the server's clock. Prints what the library observed, for cli/tests/it/lua_serve_python_queues.rs to compare.
# rq reads the time on the client (the scheduled registry's scores are this process's
# timestamps): the delay is passed by moving this process's clock, never by sleeping. With
# `virtual` as second argument the server is `lockkit lua serve`, and its clock is moved by
# as much with LOCKKIT.CLOCK ADVANCE, so that the TTLs it keeps age alike.
import datetime, sys, time, warnings
import redis
import refusals  # noqa: F401 (reports "not emulated" errors the library swallows)
import rq.utils
from rq import Queue, Retry, Worker
from rq.job import Job
from rq.registry import FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry

# rq warns (and goes on) when the server refuses a CLIENT command it sends: fail instead.
warnings.filterwarnings("error", message="CLIENT")

# The worker listens for commands on pub/sub in a thread that waits up to `sleep_time` (60 s
# in rq) for a message. On a fast server the thread reads its UNSUBSCRIBE reply first and
# waits again, and redis-py 8.2's stop() joins it: a burst worker's exit takes 60 s. The
# thread polls every 0.2 s here instead, on both servers.
real_run_in_thread = redis.client.PubSub.run_in_thread


def run_in_thread(self, sleep_time=0.0, **kwargs):
    return real_run_in_thread(self, sleep_time=min(sleep_time, 0.2), **kwargs)


if __name__ == "__main__":
    redis.client.PubSub.run_in_thread = run_in_thread


def double(n):
    return n * 2


def boom(n):
    raise ValueError(f"boom {n}")


def flaky(n):
    # The work horse is a fresh process each time: the count of tries is kept in Redis.
    tries = rq.get_current_job().connection.incr("flaky-tries")
    if tries == 1:
        raise RuntimeError("first try fails")
    return n + tries


def main(port, virtual):
    # The worker imports the jobs by module name: this file as `rq_flow`, not `__main__`.
    import rq_flow as jobs

    # Every rq module reads the time through rq.utils.now (current_timestamp calls it too).
    shift = datetime.timedelta(0)
    real_now = rq.utils.now

    def shifted_now():
        return real_now() + shift

    for module in [m for n, m in sys.modules.items() if n == "rq.utils" or n.startswith("rq.")]:
        if getattr(module, "now", None) is real_now:
            module.now = shifted_now

    r = redis.Redis(port=port)
    r.flushall()
    out = []
    q = Queue("lk", connection=r)
    ok = q.enqueue(jobs.double, 21, job_id="ok")
    bad = q.enqueue(jobs.boom, 7, job_id="bad")
    retried = q.enqueue(jobs.flaky, 1, job_id="retried", retry=Retry(max=1))
    # Kept 5 seconds after it ran: the server's clock decides when it is gone.
    short = q.enqueue(jobs.double, 4, job_id="short", result_ttl=5)
    later = q.enqueue_in(datetime.timedelta(seconds=60), jobs.double, 50, job_id="later")
    out.append(("queued", q.count, later.get_status()))

    worker = Worker([q], connection=r, name="w1")
    out.append(("worked", worker.work(burst=True, with_scheduler=True, logging_level="WARNING")))
    for job in (ok, bad, retried, short, later):
        job.refresh()
        res = job.latest_result()
        last = res and (res.type.name, res.return_value, (res.exc_string or "").splitlines()[-1:])
        out.append((job.id, job.get_status(), last))
    out.append(("failed registry", FailedJobRegistry(queue=q).get_job_ids()))
    out.append(("finished registry", sorted(FinishedJobRegistry(queue=q).get_job_ids())))
    out.append(("scheduled registry", ScheduledJobRegistry(queue=q).get_job_ids()))
    out.append(("short kept", 0 < r.ttl("rq:job:short") <= 5))
    out.append(("flaky tries", r.get("flaky-tries")))

    # The delayed job's time comes: the clock moves on 61 seconds without sleeping.
    shift += datetime.timedelta(seconds=61)
    if virtual:
        r.execute_command("LOCKKIT.CLOCK", "ADVANCE", "61000")
    else:
        # redis-server's clock is the wall clock: the short job's 5 seconds pass for real
        # (a bounded wait on this side only).
        for _ in range(100):
            if not r.exists("rq:job:short"):
                break
            time.sleep(0.1)
    out.append(("short gone", r.exists("rq:job:short"), Job.exists("short", connection=r)))
    worker = Worker([q], connection=r, name="w2")
    out.append(("worked later", worker.work(burst=True, with_scheduler=True, logging_level="WARNING")))
    later.refresh()
    out.append((later.id, later.get_status(), later.return_value()))
    out.append(("scheduled registry", ScheduledJobRegistry(queue=q).get_job_ids()))
    out.append(("finished registry", sorted(FinishedJobRegistry(queue=q).get_job_ids())))
    out.append(("workers", sorted(w.name for w in Worker.all(connection=r))))
    out.append(("result ttl", 0 < r.ttl("rq:job:ok") <= 500))
    print("\n".join(repr(o) for o in out))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:] == ["virtual"])

# The celery flow on lua serve's frozen clock, with a side thread that moves the server's
# clock 1000 ms every 50 ms of wall time (the server clock running 20x faster than the wall).
import runpy, sys, threading, time, redis
port = int(sys.argv[1])
r = redis.Redis(port=port)
stop = False
def tick():
    while not stop:
        r.execute_command("LOCKKIT.CLOCK", "ADVANCE", 1000)
        time.sleep(0.05)
threading.Thread(target=tick, daemon=True).start()
started = time.monotonic()
sys.argv = [sys.argv[2], str(port)]
import os; sys.path.insert(0, os.path.dirname(sys.argv[0]))
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    stop = True
    print("flow seconds", round(time.monotonic() - started, 1), file=sys.stderr)

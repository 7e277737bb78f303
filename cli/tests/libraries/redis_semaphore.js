// redis-semaphore (with ioredis) against the servers on the ports given (the first alone, then
// all three for the Redlock kinds): Mutex (acquire, a second owner refused, refresh, release,
// expiry), Semaphore with a limit of 3, MultiSemaphore, RedlockMutex, RedlockSemaphore and
// RedlockMultiSemaphore over 3 servers. Prints what the library observed, for
// cli/tests/it/lua_serve_node_locks.rs to compare. With `virtual` among the arguments the servers
// are `lockkit lua serve` on their frozen clock: a lock's expiry comes with LOCKKIT.CLOCK
// ADVANCE where the flow sleeps against redis-server (the semaphores also score their holders
// with this process's clock, which is moved on by as much). The refresh timer is the library's
// (`setInterval` on this process's clock): the flow really waits 0.7 s for it, the servers'
// clocks advanced step by step with it.
require("./refusals");
const IORedis = require("ioredis");
const {
  Mutex,
  Semaphore,
  MultiSemaphore,
  RedlockMutex,
  RedlockSemaphore,
  RedlockMultiSemaphore,
} = require("redis-semaphore");

const args = process.argv.slice(2);
const virtual = args.includes("virtual");
const clients = args
  .filter((a) => /^\d+$/.test(a))
  .map((port) => new IORedis({ host: "127.0.0.1", port: Number(port) }));
const [r] = clients;
let shift = 0;
const realNow = Date.now;
Date.now = () => realNow() + shift;
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const out = [];
const lost = [];
// No refresh unless asked for, a refused acquire given up after 3 attempts, a lost lock noted.
const options = (more) => ({
  lockTimeout: 1000,
  refreshInterval: 0,
  acquireAttemptsLimit: 3,
  retryInterval: 50,
  onLockLost: (e) => lost.push(e.message),
  ...more,
});

/** Lets `ms` milliseconds pass on every server (and on this process's clock). */
async function later(ms) {
  if (virtual) {
    shift += ms;
    await Promise.all(clients.map((c) => c.call("LOCKKIT.CLOCK", "ADVANCE", String(ms))));
  } else {
    await sleep(ms);
  }
}

async function outcome(promise) {
  try {
    return await promise;
  } catch (e) {
    return `${e.constructor.name}: ${e.message}`;
  }
}

async function mutex() {
  const first = new Mutex(r, "lk:m", options());
  await first.acquire();
  out.push(["mutex", first.isAcquired, (await r.get("mutex:lk:m")) === first.identifier]);
  const second = new Mutex(r, "lk:m", options());
  out.push(["mutex second", await second.tryAcquire(), second.isAcquired]);
  const timed = new Mutex(r, "lk:m", options({ acquireAttemptsLimit: Infinity, acquireTimeout: 300 }));
  out.push(["mutex second, timed", await outcome(timed.acquire())]);
  await first.release();
  out.push(["mutex released", first.isAcquired, await r.exists("mutex:lk:m")]);
  out.push(["mutex second after release", await second.tryAcquire()]);
  await second.release();

  // Refreshed every 0.2 s, a lock of 1 s outlives 0.7 s with most of its TTL left.
  const refreshed = new Mutex(r, "lk:r", options({ refreshInterval: 200 }));
  await refreshed.acquire();
  for (let i = 0; i < 7; i++) {
    await sleep(100);
    if (virtual) await Promise.all(clients.map((c) => c.call("LOCKKIT.CLOCK", "ADVANCE", "100")));
  }
  const pttl = await r.pttl("mutex:lk:r");
  out.push(["mutex refreshed", refreshed.isAcquired, pttl > 500 ? "most of its TTL left" : `pttl ${pttl}`]);
  await refreshed.release();

  const brief = new Mutex(r, "lk:e", options());
  await brief.acquire();
  await later(1100);
  out.push(["mutex expired", await r.exists("mutex:lk:e")]);
  const next = new Mutex(r, "lk:e", options());
  out.push(["mutex taken after expiry", await next.tryAcquire()]);
  await brief.release();
  out.push(["mutex expired owner's release", (await r.get("mutex:lk:e")) === next.identifier]);
  await next.release();
}

async function semaphore() {
  const holders = [1, 2, 3].map(() => new Semaphore(r, "lk:s", 3, options()));
  for (const h of holders) await h.acquire();
  const fourth = new Semaphore(r, "lk:s", 3, options());
  out.push(["semaphore of 3, fourth", await fourth.tryAcquire(), await r.zcard("semaphore:lk:s")]);
  await holders[0].release();
  out.push(["semaphore, fourth after a release", await fourth.tryAcquire(), await r.zcard("semaphore:lk:s")]);
  for (const h of [...holders, fourth]) await h.release();
  out.push(["semaphore released", await r.exists("semaphore:lk:s")]);

  for (const h of holders) await h.acquire();
  await later(1100);
  out.push(["semaphore expired", await r.exists("semaphore:lk:s")]);
  const after = new Semaphore(r, "lk:s", 3, options());
  out.push(["semaphore after expiry", await after.tryAcquire(), await r.zcard("semaphore:lk:s")]);
  await after.release();

  const pair = new MultiSemaphore(r, "lk:ms", 3, 2, options());
  await pair.acquire();
  const otherPair = new MultiSemaphore(r, "lk:ms", 3, 2, options());
  const single = new MultiSemaphore(r, "lk:ms", 3, 1, options());
  out.push(["multi-semaphore, 2 of 3 held", await otherPair.tryAcquire(), await single.tryAcquire()]);
  out.push(["multi-semaphore holders", (await r.zrange("semaphore:lk:ms", 0, -1)).length]);
  await pair.release();
  out.push(["multi-semaphore after a release", await otherPair.tryAcquire()]);
  await otherPair.release();
  await single.release();
  out.push(["multi-semaphore released", await r.exists("semaphore:lk:ms")]);
}

async function redlocks() {
  const values = (key) => Promise.all(clients.map((c) => c.get(key)));
  const mutex = new RedlockMutex(clients, "lk:rm", options());
  await mutex.acquire();
  out.push(["redlock mutex", (await values("mutex:lk:rm")).map((v) => v === mutex.identifier)]);
  const rival = new RedlockMutex(clients, "lk:rm", options());
  out.push(["redlock mutex second", await rival.tryAcquire()]);
  await mutex.release();
  out.push(["redlock mutex released", await values("mutex:lk:rm")]);
  await clients[0].set("mutex:lk:rm2", "someone else's", "PX", 10000);
  const two = new RedlockMutex(clients, "lk:rm2", options());
  out.push(["redlock mutex on 2 of 3", await two.tryAcquire()]);
  await two.release();
  await clients[1].set("mutex:lk:rm2", "someone else's", "PX", 10000);
  out.push(["redlock mutex on 1 of 3", await new RedlockMutex(clients, "lk:rm2", options()).tryAcquire()]);
  out.push(["redlock mutex left behind", await values("mutex:lk:rm2")]);

  const holders = [1, 2].map(() => new RedlockSemaphore(clients, "lk:rs", 2, options()));
  for (const h of holders) await h.acquire();
  const third = new RedlockSemaphore(clients, "lk:rs", 2, options());
  out.push(["redlock semaphore of 2, third", await third.tryAcquire()]);
  out.push(["redlock semaphore holders", await Promise.all(clients.map((c) => c.zcard("semaphore:lk:rs")))]);
  await later(1100);
  out.push(["redlock semaphore expired", await Promise.all(clients.map((c) => c.exists("semaphore:lk:rs")))]);
  out.push(["redlock semaphore, third after expiry", await third.tryAcquire()]);
  for (const h of [...holders, third]) await h.release();

  const multi = new RedlockMultiSemaphore(clients, "lk:rms", 3, 2, options());
  await multi.acquire();
  const more = new RedlockMultiSemaphore(clients, "lk:rms", 3, 2, options());
  out.push(["redlock multi-semaphore, 2 of 3 held", await more.tryAcquire()]);
  await multi.release();
  out.push(["redlock multi-semaphore after a release", await more.tryAcquire()]);
  await more.release();
  out.push(["redlock multi-semaphore released", await Promise.all(clients.map((c) => c.exists("semaphore:lk:rms")))]);
}

async function main() {
  await Promise.all(clients.map((c) => c.flushall()));
  await mutex();
  await semaphore();
  if (clients.length === 3) await redlocks();
  out.push(["locks lost", lost]);
  await Promise.all(clients.map((c) => c.quit()));
  console.log(out.map((o) => JSON.stringify(o)).join("\n"));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);

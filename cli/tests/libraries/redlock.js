// node-redlock 5 (with ioredis) against the servers on the ports given (the first alone, then
// all three as the nodes of one Redlock): acquire, a second acquire refused after its retries,
// extend, release, `using()` extending its lock automatically over a routine that outlives the
// first TTL, a lock expiring, and quorum over 3 nodes. Prints what the library observed, for
// cli/tests/it/lua_serve_node_locks.rs to compare. With `virtual` among the arguments the servers
// are `lockkit lua serve` on their frozen clock: time passes on them with LOCKKIT.CLOCK ADVANCE
// where the flow waits on redis-server. node-redlock judges a lock's validity and times
// `using()`'s extensions on this process's clock: an expiry moves that clock on by as much
// (`Date.now`), and `using()`'s routine really waits 1.4 s (the extension timers are the
// library's), the servers' clocks advanced step by step with it.
require("./refusals");
const IORedis = require("ioredis");
const { default: Redlock, ExecutionError, ResourceLockedError } = require("redlock");

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
const unexpected = [];

/** Lets `ms` milliseconds pass on every server (and on this process's clock). */
async function later(ms) {
  if (virtual) {
    shift += ms;
    await Promise.all(clients.map((c) => c.call("LOCKKIT.CLOCK", "ADVANCE", String(ms))));
  } else {
    await sleep(ms);
  }
}

function redlock(nodes, settings) {
  const lock = new Redlock(nodes, { retryDelay: 100, retryJitter: 0, ...settings });
  // node-redlock emits every vote against; a refused lock is expected, anything else is not.
  lock.on("error", (e) => {
    if (!(e instanceof ResourceLockedError)) unexpected.push(e.message);
  });
  return lock;
}

async function refusal(promise) {
  try {
    await promise;
    return "no error";
  } catch (e) {
    if (!(e instanceof ExecutionError)) return `${e.constructor.name}: ${e.message}`;
    const votes = await Promise.all(e.attempts);
    return [e.message, e.attempts.length, votes.map(tally)];
  }
}

function tally(stats) {
  const against = [...stats.votesAgainst.values()].map((e) => e.message);
  return [stats.votesFor.size, against];
}

async function main() {
  await Promise.all(clients.map((c) => c.flushall()));
  const out = [];
  const one = redlock([r], { retryCount: 2 });
  const other = redlock([r], { retryCount: 2 });

  const lock = await one.acquire(["lk:a"], 1000);
  const pttl = await r.pttl("lk:a");
  out.push(["acquire", (await r.get("lk:a")) === lock.value, pttl > 0 && pttl <= 1000]);
  out.push(["acquire", "votes", tally(await lock.attempts[0])]);
  out.push(["second acquire", await refusal(other.acquire(["lk:a"], 1000))]);
  const longer = await lock.extend(3000);
  out.push(["extend", (await r.pttl("lk:a")) > 2000, longer.value === lock.value]);
  out.push(["extend the replaced lock", await refusal(lock.extend(3000))]);
  await longer.release();
  out.push(["release", await r.exists("lk:a")]);
  out.push(["release again", await refusal(one.release(longer, { retryCount: 0 }))]);
  await r.set("lk:c", "someone else's", "PX", 10000);
  out.push(["two resources, one taken", await refusal(one.acquire(["lk:b", "lk:c"], 1000))]);
  out.push(["left behind", await r.exists("lk:b"), await r.get("lk:c")]);

  // using(): the lock lives 1 s and is extended 0.5 s before it would expire, for as long as
  // the routine runs (1.4 s here, the servers' time moving with it).
  let extensions = 0;
  const extend = one.extend.bind(one);
  one.extend = (...a) => {
    extensions += 1;
    return extend(...a);
  };
  const used = await one.using(["lk:u"], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
    for (let i = 0; i < 7; i++) {
      await sleep(200);
      if (virtual) await Promise.all(clients.map((c) => c.call("LOCKKIT.CLOCK", "ADVANCE", "200")));
    }
    const held = await r.exists("lk:u");
    const refused = await refusal(other.acquire(["lk:u"], 1000, { retryCount: 0 }));
    return ["routine", held, refused, signal.aborted];
  });
  one.extend = extend;
  out.push(["using", used, extensions >= 1 ? "extended" : `extended ${extensions} times`]);
  out.push(["using released", await r.exists("lk:u")]);

  // A lock outliving its TTL: the server expires it, the client no longer extends it.
  const brief = await one.acquire(["lk:e"], 1000);
  await later(1100);
  out.push(["expired", await r.exists("lk:e"), await refusal(brief.extend(1000))]);
  const next = await other.acquire(["lk:e"], 1000);
  out.push(["taken after expiry", (await r.get("lk:e")) === next.value]);
  await next.release();

  if (clients.length === 3) {
    const three = redlock(clients, { retryCount: 0 });
    const values = (key) => Promise.all(clients.map((c) => c.get(key)));
    const all = await three.acquire(["lk:q"], 1000);
    out.push(["3 nodes", tally(await all.attempts[0]), (await values("lk:q")).map((v) => v === all.value)]);
    // A release resolves at a quorum: wait for every node's vote before reading them.
    await Promise.all((await all.release()).attempts);
    out.push(["3 nodes released", await values("lk:q")]);

    await clients[0].set("lk:q1", "someone else's", "PX", 10000);
    const two = await three.acquire(["lk:q1"], 1000);
    out.push(["2 of 3 nodes", tally(await two.attempts[0]), (await values("lk:q1")).map((v) => v === two.value)]);
    out.push(["release on 2 of 3", (await Promise.all((await two.release()).attempts)).map(tally)]);
    out.push(["2 of 3 released", await values("lk:q1")]);

    await clients[0].set("lk:q2", "someone else's", "PX", 10000);
    await clients[1].set("lk:q2", "someone else's", "PX", 10000);
    out.push(["1 of 3 nodes", await refusal(three.acquire(["lk:q2"], 1000))]);
    out.push(["1 of 3 left behind", await values("lk:q2")]);

    const expiring = await three.acquire(["lk:q3"], 1000);
    await later(1100);
    out.push(["3 nodes expired", await Promise.all(clients.map((c) => c.exists("lk:q3")))]);
    out.push(["3 nodes extend expired", await refusal(expiring.extend(1000))]);
    const again = await redlock(clients, { retryCount: 0 }).acquire(["lk:q3"], 1000);
    out.push(["3 nodes taken after expiry", tally(await again.attempts[0])]);
  }
  out.push(["unexpected errors", unexpected]);
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

// ioredis's Cluster against the cluster a master of which is on the port given: keys over every
// master, a pipeline and a transaction on one slot, EVAL and a defined command (EVALSHA, then
// EVAL on NOSCRIPT) on one slot's keys, MOVED and CROSSSLOT. Prints what the library observed,
// with ports replaced by the master's index in slot order, so that a real 3-master cluster and
// `lockkit lua serve --cluster 3` print the same (cli/tests/it/lua_serve_libraries.rs).
const IORedis = require("ioredis");
const calculateSlot = require("ioredis/built/utils/calculateSlot");

const port = Number(process.argv[2]);

/// An error's class and text with the ports replaced by the masters' indexes.
function text(e, index) {
  return `${e.name} ${e.message.replace(/\d{4,5}/g, (p) => (p in index ? `port${index[p]}` : p))}`;
}

async function attempt(name, call, index) {
  try {
    console.log(name, "answered", JSON.stringify(await call()));
  } catch (e) {
    console.log(name, text(e, index));
  }
}

async function main() {
  const seed = new IORedis({ host: "127.0.0.1", port, lazyConnect: true });
  await seed.connect();
  // The masters in slot order.
  const slots = (await seed.call("CLUSTER", "SLOTS")).sort((a, b) => a[0] - b[0]);
  const ports = slots.map((s) => s[2][1]);
  const index = Object.fromEntries(ports.map((p, i) => [p, i]));
  seed.disconnect();

  const cluster = new IORedis.Cluster([{ host: "127.0.0.1", port }], {
    redisOptions: { maxRetriesPerRequest: 1 },
  });
  cluster.on("error", (e) => console.error(`cluster error: ${e.message}`));
  await new Promise((resolve, reject) => {
    cluster.once("ready", resolve);
    cluster.once("end", () => reject(new Error("the cluster connection ended")));
  });
  console.log("masters", cluster.nodes("master").length);

  for (let i = 0; i < 200; i++) {
    await cluster.set(`k:${i}`, i);
  }
  let same = true;
  for (let i = 0; i < 200; i++) {
    same = same && (await cluster.get(`k:${i}`)) === String(i);
  }
  console.log("get", same);
  // Which master ioredis sent each key to, from the slot table it read.
  const owners = new Set();
  for (let i = 0; i < 200; i++) {
    const node = cluster.slots[calculateSlot(`k:${i}`)][0];
    owners.add(index[Number(node.split(":")[1])]);
  }
  console.log("owners", [...owners].sort());

  const pipe = cluster.pipeline();
  for (let i = 0; i < 20; i++) {
    pipe.incr(`{p}:${i}`);
  }
  pipe.get("{p}:3");
  console.log("pipeline", JSON.stringify(await pipe.exec()));

  const tx = await cluster.multi().set("{x}a", 1).incr("{x}a").get("{x}a").exec();
  console.log("multi", JSON.stringify(tx));

  const script = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[2])";
  console.log("eval", await cluster.eval(script, 2, "{t}a", "{t}b", "x"), await cluster.get("{t}a"));
  cluster.defineCommand("swap", {
    numberOfKeys: 2,
    lua: "local a = redis.call('get', KEYS[1]) redis.call('set', KEYS[1], redis.call('get', KEYS[2])) redis.call('set', KEYS[2], a) return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}",
  });
  await cluster.mset("{s}1", "one", "{s}2", "two");
  console.log("defined command", JSON.stringify(await cluster.swap("{s}1", "{s}2")));
  console.log("mget", JSON.stringify(await cluster.mget("{s}1", "{s}2")));

  await attempt("crossslot", () => cluster.mset("foo", 1, "bar", 2), index);
  await attempt("eval-crossslot", () => cluster.eval("return 1", 2, "foo", "bar"), index);
  // A plain connection to a master that does not own foo's slot.
  const owner = index[Number(cluster.slots[calculateSlot("foo")][0].split(":")[1])];
  const wrong = new IORedis({ host: "127.0.0.1", port: ports[(owner + 1) % ports.length], lazyConnect: true });
  await wrong.connect();
  await attempt("moved", () => wrong.get("foo"), index);
  await attempt("eval-moved", () => wrong.eval("return redis.call('get', KEYS[1])", 1, "foo"), index);
  wrong.disconnect();

  console.log("keyslot", await cluster.cluster("KEYSLOT", "foo"));
  await cluster.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

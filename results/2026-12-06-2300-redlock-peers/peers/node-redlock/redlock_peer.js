// node-redlock (npm `redlock` 4.2.0, on ioredis) over N Redis nodes: 50 concurrent holders,
// uniform over 100k keys, hold 0, TTL 5 s, closed loop, one try per cycle (retryCount 0),
// 1 s warm-up then DURATION s measured.
// Usage: npm install (package.json beside this file) && node redlock_peer.js DURATION_S PORT...
const Redis = require('ioredis');
const Redlock = require('redlock');

const CLIENTS = 50, KEYS = 100000, TTL_MS = 5000;
const secs = Number(process.argv[2] || 5);
const ports = process.argv.slice(3).map(Number);

async function main() {
  const nodes = ports.map((port) => new Redis({ port, host: '127.0.0.1' }));
  const redlock = new Redlock(nodes, { retryCount: 0, driftFactor: 0.01 });
  redlock.on('clientError', () => {});
  let counting = false, stop = false, cycles = 0, failed = 0;
  const workers = Array.from({ length: CLIENTS }, async () => {
    while (!stop) {
      try {
        const lock = await redlock.lock(`nodelock:${Math.floor(Math.random() * KEYS)}`, TTL_MS);
        await lock.unlock();
        if (counting) cycles++;
      } catch (e) {
        failed++;
      }
    }
  });
  await new Promise((r) => setTimeout(r, 1000));
  counting = true;
  const start = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, secs * 1000));
  counting = false;
  const took = Number(process.hrtime.bigint() - start) / 1e9;
  stop = true;
  await Promise.all(workers);
  console.log(`node-redlock 4.2.0: ${Math.round(cycles / took)} cycles/s over ${took.toFixed(1)}s (${failed} failed acquires)`);
  nodes.forEach((n) => n.disconnect());
}
main();

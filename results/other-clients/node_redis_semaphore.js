// The same uncontended workload through Node's redis-semaphore Mutex (ioredis), for comparison.
// 50 concurrent holders, uniform over 100k keys, hold 0, TTL 5 s, closed loop, 10 s.
// redis-semaphore acquires with SET NX PX and releases with a Lua compare-and-delete.
// Usage: npm install redis-semaphore@5.8.0 ioredis && node results/other-clients/node_redis_semaphore.js PORT
const Redis = require('ioredis');
const { Mutex } = require('redis-semaphore');

const CLIENTS = 50, KEYS = 100000, TTL_MS = 5000, DURATION_MS = 10000;
const port = Number(process.argv[2] || 6379);

async function main() {
  const redis = new Redis({ port, host: '127.0.0.1' });
  const stopAt = Date.now() + DURATION_MS;
  let cycles = 0;
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (Date.now() < stopAt) {
      const m = new Mutex(redis, `nodelock:${Math.floor(Math.random() * KEYS)}`, {
        lockTimeout: TTL_MS, acquireAttemptsLimit: 1, refreshInterval: 0,
      });
      if (await m.tryAcquire()) {
        await m.release();
        cycles++;
      }
    }
  }));
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`node redis-semaphore Mutex: ${Math.round(cycles / secs).toLocaleString('en-US')} cycles/s over ${secs.toFixed(1)}s`);
  redis.disconnect();
}
main();

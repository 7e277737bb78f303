// BullMQ (with ioredis) against a server on the port given: jobs through a Worker, a job that
// fails once and is retried, one that fails every attempt, a delayed job, and what QueueEvents
// received. Prints what the library observed, for cli/tests/it/lua_serve_libraries.rs to compare.
// With `virtual` as second argument the server is `lockkit lua serve`: time is moved on with
// LOCKKIT.CLOCK ADVANCE there (BullMQ reads the time on the client, so this process's clock
// is moved by as much on both servers).
const { Queue, Worker, QueueEvents, Job } = require("bullmq");
const IORedis = require("ioredis");

const port = Number(process.argv[2]);
const virtual = process.argv[3] === "virtual";
const connection = { host: "127.0.0.1", port, maxRetriesPerRequest: null };
let shift = 0;
const realNow = Date.now;
Date.now = () => realNow() + shift;

function logErrors(what, emitter) {
  emitter.on("error", (e) => console.error(`${what} error: ${e.message}`));
}

async function settle(job, events) {
  try {
    return `returned ${await job.waitUntilFinished(events, 30000)}`;
  } catch (e) {
    return `failed: ${e.message}`;
  }
}

async function main() {
  const admin = new IORedis(connection);
  logErrors("admin", admin);
  await admin.flushall();
  const out = [];
  const seen = [];
  const events = new QueueEvents("lk", { connection });
  logErrors("QueueEvents", events);
  for (const name of ["added", "delayed", "completed", "failed", "retries-exhausted"]) {
    events.on(name, (e) => seen.push(`${name} ${e.jobId} ${e.returnvalue || e.failedReason || ""}`.trim()));
  }
  await events.waitUntilReady();
  const queue = new Queue("lk", { connection });
  logErrors("Queue", queue);
  const worker = new Worker(
    "lk",
    async (job) => {
      if (job.name === "flaky" && job.attemptsMade === 0) throw new Error("first try fails");
      if (job.name === "bad") throw new Error(`attempt ${job.attemptsMade + 1} fails`);
      return `${job.name}:${job.data.n * 2}`;
    },
    { connection, drainDelay: 1 },
  );
  logErrors("Worker", worker);
  await worker.waitUntilReady();

  const ok = await queue.add("double", { n: 21 });
  out.push(["double", await settle(ok, events)]);
  const flaky = await queue.add("flaky", { n: 1 }, { attempts: 2 });
  out.push(["flaky", await settle(flaky, events)]);
  const bad = await queue.add("bad", { n: 2 }, { attempts: 2 });
  out.push(["bad", await settle(bad, events)]);
  for (const id of [ok.id, flaky.id, bad.id]) {
    const j = await Job.fromId(queue, id);
    out.push([id, j.name, await j.getState(), j.attemptsMade, j.failedReason || "", j.returnvalue]);
  }

  // A delayed job waits for its time; the clock moves on without this process sleeping.
  const later = await queue.add("later", { n: 50 }, { delay: 2000 });
  await new Promise((r) => setTimeout(r, 300));
  out.push(["later before", await later.getState()]);
  shift += 2000;
  if (virtual) await admin.call("LOCKKIT.CLOCK", "ADVANCE", "2000");
  out.push(["later", await settle(later, events)]);
  out.push(["later after", await (await Job.fromId(queue, later.id)).getState()]);
  out.push(["counts", await queue.getJobCounts("completed", "failed", "delayed", "wait", "active")]);

  // QueueEvents reads its stream with XREAD BLOCK: wait until it has seen the last completion.
  for (let i = 0; i < 100 && !seen.some((s) => s.startsWith(`completed ${later.id}`)); i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  out.push(["events", seen]);
  await worker.close();
  await queue.close();
  await events.close();
  await admin.quit();
  console.log(out.map((o) => JSON.stringify(o)).join("\n"));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);

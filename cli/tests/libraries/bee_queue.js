// bee-queue against a server on the port given: jobs, a job that fails once and is retried,
// one that fails every attempt, a delayed job, and the events its job objects received (over
// pub/sub). Prints what the library observed, for cli/tests/it/lua_serve_libraries.rs to compare.
// bee-queue times delayed jobs with timers of this process, not with the server's clock.
const Queue = require("bee-queue");

const port = Number(process.argv[2]);
const redis = { host: "127.0.0.1", port };

function outcome(job, seen) {
  return new Promise((resolve) => {
    job.on("retrying", (e) => seen.push(`${job.id} retrying ${e.message}`));
    job.on("succeeded", (r) => {
      seen.push(`${job.id} succeeded ${r}`);
      resolve(`succeeded ${r}`);
    });
    job.on("failed", (e) => {
      seen.push(`${job.id} failed ${e.message}`);
      resolve(`failed ${e.message}`);
    });
  });
}

async function main() {
  const queue = new Queue("lk", { redis, activateDelayedJobs: true });
  queue.on("error", (e) => console.error(`queue error: ${e.message}`));
  await queue.ready();
  await queue.destroy();
  const out = [];
  const seen = [];
  queue.process(async (job) => {
    if (job.data.kind === "flaky" && job.options.retries > 0) throw new Error("first try fails");
    if (job.data.kind === "bad") throw new Error(`fails with ${job.options.retries} retries left`);
    return `${job.data.kind}:${job.data.n * 2}`;
  });
  const run = async (job) => {
    const done = outcome(job, seen);
    await job.save();
    return done;
  };
  out.push(["double", await run(queue.createJob({ kind: "double", n: 21 }))]);
  out.push(["flaky", await run(queue.createJob({ kind: "flaky", n: 1 }).retries(1))]);
  out.push(["bad", await run(queue.createJob({ kind: "bad", n: 2 }).retries(1))]);
  const later = queue.createJob({ kind: "later", n: 50 }).delayUntil(Date.now() + 300);
  const laterDone = outcome(later, seen);
  await later.save();
  out.push(["later before", (await queue.getJob(later.id)).status]);
  out.push(["later", await laterDone]);
  for (const id of ["1", "2", "3", "4"]) {
    const j = await queue.getJob(id);
    out.push([id, j.data.kind, j.status, j.options.retries, j.progress]);
  }
  const health = await queue.checkHealth();
  out.push(["health", health]);
  out.push(["events", seen]);
  await queue.close();
  console.log(out.map((o) => JSON.stringify(o)).join("\n"));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);

// The cluster issue's benchmark (quality.md bar 7): what sharing limits through Redis costs a request.
// One nginx mock upstream, one redis-server of our own (a free loopback port, a temp dir), and sluice twice
// with the same config — a token limit on the JSON upstream that is never reached, so that every request
// reserves and settles — alone ("single") and as a one-instance cluster on the Redis ("cluster"). In rounds,
// each side in turn:
//   - wrk, 64 connections: req/s (bar: cluster >= 0.8 x single);
//   - h2load at a fixed 2 000 req/s (10 connections): p50 / p99 latency (bar: cluster p50 <= single + 150 us);
//   - Redis commands per request (INFO commandstats around the wrk run, heartbeats included; a script's
//     own commands count too), by command, and redis-server's CPU per request (it shares the cores).
// Prints a table; asserts nothing but that every answer is a 200.
//
//   node bench/cluster.mjs [--rounds 3] [--seconds 5] [--rate 2000] [--quick]
//   (SLUICE_BIN: the binary, default build/sluice; --quick: one round of 2 s, the smoke test)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {
  CLK_TCK,
  CONTROL_KEY,
  GATEWAY_KEY,
  cell,
  cpuTicks,
  freePort,
  parseH2loadLog,
  parseWrk,
  requestBody,
  run,
  start,
  stopAll,
  summary,
  table,
  waitPort,
  which,
  wrkScript,
} from "./lib.mjs";
import { sluiceBin, startUpstream } from "./targets.mjs";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
function option(name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
}
const rounds = option("--rounds", quick ? 1 : 3);
const seconds = option("--seconds", quick ? 2 : 5);
const rate = option("--rate", 2000);

const dir = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), "sluice-bench-cluster-"));
let problems = 0;
const problem = (text) => {
  problems++;
  console.log(`PROBLEM: ${text}`);
};

for (const tool of ["nginx", "wrk", "h2load", "redis-server", "redis-cli"]) {
  if (!which(tool)) {
    console.error(`bench/cluster: ${tool} is not installed (scripts/setup installs it)`);
    process.exit(1);
  }
}

async function startRedis() {
  const port = await freePort();
  const rdir = path.join(dir, "redis");
  fs.mkdirSync(rdir);
  const p = start("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--dir", rdir, "--save", "",
                                   "--appendonly", "no", "--protected-mode", "no"]);
  await waitPort(port, 5000, "redis-server", p);
  return { port, proc: p };
}

// Redis's calls so far by command (INFO itself left out).
function redisCalls(redis) {
  return run("redis-cli", ["-p", String(redis.port), "INFO", "commandstats"]).then((r) => {
    const calls = {};
    for (const m of r.out.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      if (m[1] !== "info") calls[m[1]] = Number(m[2]);
      if (m[1] === "evalsha") redisScriptUsec = { calls: Number(m[2]), usec: Number(m[3]) };
    }
    return calls;
  });
}
let redisScriptUsec = null; // the claim script's time in Redis so far, from the last INFO
const total = (calls) => Object.values(calls).reduce((a, b) => a + b, 0);
const commandsPerRequest = {};

async function startSide(name, upstream, redis) {
  const sdir = path.join(dir, name);
  fs.mkdirSync(sdir);
  const lines = [
    "listen:",
    "  gateway: {bind: 127.0.0.1, port: 0}",
    `  control: {bind: 127.0.0.1, port: 0, key: "${CONTROL_KEY}"}`,
    "clients:",
    `  - {name: bench, key: "${GATEWAY_KEY}"}`,
    "providers:",
    `  - {name: json, protocol: openai-chat, base_url: "${upstream.base}/json/v1", key: sk-bench-upstream, ` +
      `models: ["bench-json"], limits: [{per: minute, tokens: 1000000000000}]}`,
    `store: {path: "${sdir}/sluice.db"}`,
  ];
  if (redis) lines.push(`cluster: {redis: "redis://127.0.0.1:${redis.port}/0", name: bench, instance: bench-a}`);
  const config = path.join(sdir, "sluice.yaml");
  fs.writeFileSync(config, lines.join("\n") + "\n");
  const port = await freePort();
  const p = start(sluiceBin(), ["--config", config, "--port", String(port), "--control-port", String(await freePort())]);
  await waitPort(port, 10000, `sluice (${name})`, p);
  return {
    key: name,
    port,
    proc: p,
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { "content-type": "application/json", authorization: `Bearer ${GATEWAY_KEY}` },
  };
}

const body = requestBody("bench-json", false);
const bodyFile = path.join(dir, "body.json");
fs.writeFileSync(bodyFile, body);

async function wrk(side, redis) {
  const script = wrkScript(path.join(dir, `wrk-${side.key}.lua`), body, side.headers);
  const calls0 = redis ? await redisCalls(redis) : {};
  const ticks0 = cpuTicks(side.proc.pid), redisTicks0 = redis ? cpuTicks(redis.proc.pid) : 0;
  const r = await run("wrk", ["-t2", "-c64", `-d${seconds}s`, "--latency", "--timeout", "5s", "-s", script, side.url],
                      { timeoutMs: (seconds + 30) * 1000 });
  const w = parseWrk(r.out);
  w.cpuUs = w.requests ? ((cpuTicks(side.proc.pid) - ticks0) * (1e6 / CLK_TCK)) / w.requests : null;
  if (redis && w.requests) {
    w.redisCpuUs = ((cpuTicks(redis.proc.pid) - redisTicks0) * (1e6 / CLK_TCK)) / w.requests;
    const calls = await redisCalls(redis);
    w.redisPerRequest = (total(calls) - total(calls0)) / w.requests;
    for (const [name, n] of Object.entries(calls))
      commandsPerRequest[name] = (commandsPerRequest[name] || []).concat([(n - (calls0[name] || 0)) / w.requests]);
  }
  if (r.code !== 0 || w.requests === null) problem(`wrk on ${side.key}: ${r.err || r.out}`);
  if (w.non2xx) problem(`wrk on ${side.key}: ${w.non2xx} answers other than 2xx`);
  return w;
}

async function fixedRate(side) {
  const log = path.join(dir, `h2load-${side.key}.log`);
  fs.rmSync(log, { force: true });
  const a = ["--h1", "-c", "10", "-t", "1", "-m", "1", "--rps", String(rate / 10), "-D", String(seconds), "-d", bodyFile,
             `--log-file=${log}`];
  for (const [k, v] of Object.entries(side.headers)) a.push("-H", `${k}: ${v}`);
  a.push(side.url);
  const r = await run("h2load", a, { timeoutMs: (seconds + 30) * 1000 });
  if (r.code !== 0 || !fs.existsSync(log)) {
    problem(`h2load on ${side.key}: ${r.err.slice(-300)}`);
    return { p50: null, p99: null };
  }
  const h = parseH2loadLog(log);
  if (h.bad) problem(`h2load on ${side.key}: ${h.bad} answers other than 200`);
  return h;
}

let code = 0;
try {
  const upstream = await startUpstream(dir);
  const redis = await startRedis();
  const sides = { single: await startSide("single", upstream, null), cluster: await startSide("cluster", upstream, redis) };
  console.log(`sluice cluster benchmark (bench/cluster.mjs${quick ? " --quick" : ""}), ${new Date().toISOString()}`);
  console.log(`binary ${sluiceBin()}; ${os.cpus().length} cores; ${rounds} round(s) of ${seconds} s; ` +
              `a token limit on the upstream, never reached; Redis ${redis.port} on loopback`);
  const res = { single: { wrk: [], rate: [] }, cluster: { wrk: [], rate: [] } };
  for (const k of ["single", "cluster"]) await wrk(sides[k], null); // warm-up
  for (let r = 0; r < rounds; r++) {
    for (const k of ["single", "cluster"]) res[k].wrk.push(await wrk(sides[k], k === "cluster" ? redis : null));
    for (const k of ["single", "cluster"]) res[k].rate.push(await fixedRate(sides[k]));
  }
  const col = (k, f, digits) => cell(summary(res[k].wrk.map(f).filter((x) => x != null)), digits);
  const colRate = (k, f, digits) => cell(summary(res[k].rate.map(f).filter((x) => x != null)), digits);
  console.log(table(["", "single process", "cluster (1 instance, loopback Redis)"], [
    ["wrk 64 conns: req/s", col("single", (w) => w.rps, 0), col("cluster", (w) => w.rps, 0)],
    ["wrk 64 conns: CPU us/request (sluice)", col("single", (w) => w.cpuUs, 1), col("cluster", (w) => w.cpuUs, 1)],
    ["wrk 64 conns: CPU us/request (redis-server)", "-", col("cluster", (w) => w.redisCpuUs, 1)],
    ["wrk 64 conns: Redis commands/request", "-", col("cluster", (w) => w.redisPerRequest, 2)],
    [`${rate} req/s: p50 us`, colRate("single", (h) => h.p50, 0), colRate("cluster", (h) => h.p50, 0)],
    [`${rate} req/s: p99 us`, colRate("single", (h) => h.p99, 0), colRate("cluster", (h) => h.p99, 0)],
  ]));
  const ratio = res.cluster.wrk.map((w, i) => w.rps / res.single.wrk[i].rps);
  const added = res.cluster.rate.map((h, i) => h.p50 - res.single.rate[i].p50);
  const added99 = res.cluster.rate.map((h, i) => h.p99 - res.single.rate[i].p99);
  console.log("Redis commands/request by command: " +
              Object.entries(commandsPerRequest).map(([name, v]) => `${name} ${cell(summary(v), 3)}`).join(", "));
  if (redisScriptUsec?.calls)
    console.log(`Redis time per EVALSHA (the claim script, its inner commands included): ` +
                `${(redisScriptUsec.usec / redisScriptUsec.calls).toFixed(1)} us`);
  console.log(`cluster / single req/s: ${cell(summary(ratio), 2)} [bar >= 0.8]; ` +
              `added at ${rate} req/s: p50 ${cell(summary(added), 0)} us [bar <= 150], p99 ${cell(summary(added99), 0)} us`);
} catch (e) {
  problem(e.stack || e.message);
} finally {
  await stopAll();
  fs.rmSync(dir, { recursive: true, force: true });
  if (problems) code = 1;
}
process.exit(code);

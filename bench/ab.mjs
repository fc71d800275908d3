#!/usr/bin/env node
// Two sluice binaries against each other, interleaved, for changes of a few per cent that one bench/run
// table cannot resolve on a noisy machine (issue 21: "measure each step"). Both run at once on the
// same mock upstream with the same config; each round measures A then B, the next B then A, so a
// busy moment and the order hit both alike. Per round, for each binary:
//   - closed loop, h2load --h1 -c64: req/s and CPU µs per request by thread (/proc schedstat);
//   - fixed rate, h2load --h1 -c10 --rps: p50 and p99, and what they add over the mock (measured too);
//   - SSE first byte: the median TTFB of --streams curl streams (a new connection each, the 1 000-event
//     mock stream, every one checked), and what it adds over the mock's.
// The verdict is per round, paired: B − A, its median, and in how many rounds B was the better.
//
//   bench/ab.mjs --b OTHER_BINARY [--a BINARY] [--rounds N] [--seconds S] [--rate R] [--streams N] [--quick]
//
// --a defaults to build/sluice (or SLUICE_BIN). --quick (one round of 1 s each) is the smoke test.
// Asserts correctness only: every answer a 200.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { curlPost, h2loadFixedRate, killAllSync, median, requestBody, run, sseStreams, stopAll, threadCpuNs } from "./lib.mjs";
import { SSE_EVENTS, sluiceBin, startSluice, startUpstream } from "./targets.mjs";

process.on("exit", () => killAllSync());
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(1));

function args(argv) {
  const o = { a: sluiceBin(), b: null, rounds: 6, seconds: 5, rate: 2000, streams: 10, quick: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === "--a") o.a = path.resolve(value());
    else if (k === "--b") o.b = path.resolve(value());
    else if (k === "--rounds") o.rounds = Number(value());
    else if (k === "--seconds") o.seconds = Number(value());
    else if (k === "--rate") o.rate = Number(value());
    else if (k === "--streams") o.streams = Number(value());
    else if (k === "--quick") o.quick = true;
    else throw new Error(`unknown option ${k}`);
  }
  if (o.quick) Object.assign(o, { rounds: 1, seconds: 1, streams: 2, b: o.b ?? o.a });
  if (!o.b) throw new Error("--b BINARY is required (the binary to compare with --a)");
  for (const n of ["rounds", "seconds", "rate", "streams"])
    if (!(o[n] > 0)) throw new Error(`--${n} must be a positive number`);
  for (const bin of [o.a, o.b]) if (!fs.existsSync(bin)) throw new Error(`${bin} does not exist`);
  return o;
}

const opt = args(process.argv.slice(2));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-ab-"));
const body = path.join(dir, "body.json");
fs.writeFileSync(body, requestBody("bench-json", false));
let failed = false;
const problem = (what) => {
  failed = true;
  console.log(`PROBLEM: ${what}`);
};

function h2loadArgs(t, extra) {
  const a = ["--h1", "-t", "1", "-m", "1", ...extra, "-d", body];
  for (const [k, v] of Object.entries(t.headers())) a.push("-H", `${k}: ${v}`);
  a.push(t.url());
  return a;
}

// Closed loop at 64 connections: req/s, and CPU µs per request of each thread kind (sluice only).
async function closedLoop(t) {
  const before = t.proc ? threadCpuNs(t.proc.pid) : null;
  const r = await run("h2load", h2loadArgs(t, ["-c", "64", "-D", String(opt.seconds)]), {
    timeoutMs: (opt.seconds + 30) * 1000,
  });
  const done = Number(/requests: \d+ total, \d+ started, (\d+) done/.exec(r.out)?.[1] ?? 0);
  const ok = Number(/status codes: (\d+) 2xx/.exec(r.out)?.[1] ?? 0);
  const rate = Number(/finished in [^,]+, ([0-9.]+) req\/s/.exec(r.out)?.[1] ?? 0);
  if (r.code !== 0 || done === 0) problem(`h2load -c64 on ${t.key} failed (${r.code}): ${r.err.slice(-300)}`);
  if (ok !== done) problem(`${t.key}, closed loop: ${done - ok} answers were not 2xx`);
  const cpu = {};
  if (before) {
    const after = threadCpuNs(t.proc.pid);
    for (const k of Object.keys(after)) cpu[k || "all"] = (after[k] - (before[k] ?? 0)) / 1000 / Math.max(done, 1);
  }
  return { rate, cpu };
}

async function fixedRate(t) {
  const h = await h2loadFixedRate({ url: t.url(), headers: t.headers(), bodyFile: body, rate: opt.rate,
                                    seconds: opt.seconds, log: path.join(dir, `h2load-${t.key}.log`) });
  if (h.failed) {
    problem(`h2load --rps on ${t.key} failed (${h.failed})`);
    return { p50: NaN, p99: NaN };
  }
  if (h.bad) problem(`${t.key}, fixed rate: ${h.bad} answers other than 200`);
  if (!h.count) problem(`${t.key}, fixed rate: no answer`);
  return h;
}

// The median first-byte time of opt.streams streams, each on a new connection and checked whole.
const sseBody = requestBody("bench-sse", true);
async function sseTtfb(key, url, headers) {
  const s = await sseStreams({ url, body: sseBody, headers, n: opt.streams, events: SSE_EVENTS,
                               outFile: path.join(dir, `sse-${key}.out`), problem: (what) => problem(`${key}, SSE ${what}`) });
  return s.ttfbUs;
}

const up = await startUpstream(dir);
const mock = { key: "direct", url: () => up.url("json"), headers: () => up.headers("json"), proc: null };
const sluices = {};
for (const [key, bin] of [["A", opt.a], ["B", opt.b]]) {
  const d = path.join(dir, key);
  fs.mkdirSync(d);
  process.env.SLUICE_BIN = bin;
  const t = await startSluice(d, up);
  sluices[key] = { ...t, key };
}

// Each sluice's first stream opens its connection to the mock's stream: not part of any round.
for (const k of ["A", "B"]) {
  const s = await curlPost(sluices[k].url(), sseBody, sluices[k].headers());
  if (s.status !== 200) problem(`${k}, the first stream: status ${s.status} ${s.error ?? ""}`);
}

const rows = [];
for (let round = 0; round < opt.rounds; round++) {
  const order = round % 2 === 0 ? ["A", "B"] : ["B", "A"];
  const row = { A: {}, B: {} };
  for (const k of order) row[k].closed = await closedLoop(sluices[k]);
  row.direct = await fixedRate(mock);
  for (const k of order) row[k].fixed = await fixedRate(sluices[k]);
  row.direct.sse = await sseTtfb("direct", up.url("sse"), up.headers("sse"));
  for (const k of order) row[k].sse = await sseTtfb(k, sluices[k].url(), sluices[k].headers());
  rows.push(row);
}
await stopAll();
fs.rmSync(dir, { recursive: true, force: true });

const f1 = (v) => (Number.isFinite(v) ? v.toFixed(2) : "-");
const f0 = (v) => (Number.isFinite(v) ? Math.round(v).toLocaleString("en-US").replace(/,/g, " ") : "-");
const measures = [
  ["req/s at 64 connections", (r) => r.closed.rate, f0, +1],
  ["CPU µs/req, all threads", (r) => r.closed.cpu.all, f1, -1],
  ["CPU µs/req, sl-worker", (r) => r.closed.cpu["sl-worker"], f1, -1],
  ["CPU µs/req, sl-writer", (r) => r.closed.cpu["sl-writer"], f1, -1],
  ["CPU µs/req, sl-control", (r) => r.closed.cpu["sl-control"], f1, -1],
  [`added p50 µs at ${opt.rate} req/s`, (r, d) => r.fixed.p50 - d.p50, f0, -1],
  [`added p99 µs at ${opt.rate} req/s`, (r, d) => r.fixed.p99 - d.p99, f0, -1],
  [`SSE first byte added µs (median of ${opt.streams})`, (r, d) => r.sse - d.sse, f0, -1],
];
console.log(`sluice A/B (bench/ab.mjs), ${new Date().toISOString()}`);
console.log(`A ${opt.a}\nB ${opt.b}`);
console.log(`${opt.rounds} round(s) of ${opt.seconds} s; A then B, then B then A; ${os.cpus().length} cores\n`);
const width = Math.max(...measures.map((m) => m[0].length));
for (const [name, get, fmt, better] of measures) {
  const a = rows.map((r) => get(r.A, r.direct)), b = rows.map((r) => get(r.B, r.direct));
  const diffs = a.map((v, i) => b[i] - v).filter(Number.isFinite);
  const wins = diffs.filter((d) => d * better > 0).length;
  console.log(`${name.padEnd(width)}  A ${a.map(fmt).join(" ")}  |  B ${b.map(fmt).join(" ")}  |  ` +
              `B − A median ${fmt(median(diffs))}, B better in ${wins} of ${diffs.length}`);
}
console.log(failed ? "\nsome answers were wrong (above)" : "\nall answers correct");
process.exit(failed ? 1 : 0);

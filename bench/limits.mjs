// Issue 7's scale check: an upstream with {per: minute, every: 5, tokens: N} is never sent more than N
// tokens in any 5-minute window, under a closed-loop load of many concurrent clients that would exceed the
// limit several-fold without it. Time is scaled (SLUICE_TEST_TIME_SCALE=0.01: the window is 3 s).
//
//   node bench/limits.mjs [--clients 64] [--seconds 15] [--tokens N] [--threads T] [--smoke]
//   (SLUICE_BIN: the binary; the request DB is read with the sqlite3 CLI)
//
// The fake upstream bills every request itself, differently from sluice's estimate (body bytes / 4 +
// max_tokens, or + 4096 without): input = the body's characters / 3.5 (part of it reported as cache
// reads), output = a random number up to max_tokens; it reports exactly that in `usage` (a JSON answer,
// or an SSE stream with usage in message_start and message_delta for a share of requests) and records
// (arrival time, tokens). Afterwards the maximum it saw in any window is computed exactly, over the
// windows (t - W, t] ending at each record's time. The limit "bound" once per request that sluice queued
// on window_full (attempts skipped 'window_full' in the request DB, read after sluice has stopped).
//
// Exit code 1 when the upstream saw more than N in some window, the limit bound fewer than 20 times
// (5 with --smoke), or a client got an answer other than 200 or 429 (or a broken 200).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";

import { GATEWAY_KEY, startGateway } from "../tests/sdk/harness.mjs";

const args = process.argv.slice(2);
const smoke = args.includes("--smoke");
function option(name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
}
const clients = option("--clients", 64);
const seconds = option("--seconds", smoke ? 5 : 15);
const N = option("--tokens", 200_000);
const threads = option("--threads", 2);
const minBinding = smoke ? 5 : 20;
const streamShare = 0.25;
const waitSecs = 600; // 6 s scaled: requests wait for the window rather than fail

// sluice inherits the environment (harness.mjs spawns it with ours): 5 minutes become 3 s.
const scale = 0.01;
process.env.SLUICE_TEST_TIME_SCALE = String(scale);
const windowMs = 5 * 60_000 * scale;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rand = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo + 1));

function rssKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  return { rss: Number(/VmRSS:\s+(\d+)/.exec(status)[1]), hwm: Number(/VmHWM:\s+(\d+)/.exec(status)[1]) };
}

// ---- the fake upstream: bills, records, answers ----------------------------------------------------

const records = []; // {t: arrival (performance.now() ms), tokens}
let billedTotal = 0, aboveEstimate = 0, maxAbove = 0, upstreamBad = 0;

function sse(res, event, data) {
  res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

const upstream = http.createServer((req, res) => {
  const t = performance.now(); // billed when the request reaches the upstream
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const raw = Buffer.concat(chunks);
    let body;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch {
      upstreamBad++;
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "bad json" } }));
      return;
    }
    // Its own count: characters (not bytes) / 3.5; output up to max_tokens (4096 when absent).
    const chars = raw.toString("utf8").length;
    const allInput = Math.ceil(chars / Number(process.env.DIV ?? 3.5));
    const maxTokens = body.max_tokens ?? 4096;
    const output = rand(1, maxTokens);
    const cacheRead = Math.random() < 0.3 ? Math.floor(allInput * 0.4) : 0;
    const input = allInput - cacheRead;
    const tokens = input + cacheRead + output;
    const estimate = Math.floor(raw.length / 4) + maxTokens;
    records.push({ t, tokens, estimate });
    billedTotal += tokens;
    if (tokens > estimate) {
      aboveEstimate++;
      maxAbove = Math.max(maxAbove, tokens - estimate);
    }
    const id = `msg_${records.length}`;
    await sleep(rand(2, 30)); // the model "thinks": estimates of requests in flight overlap
    if (body.stream) {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      sse(res, "message_start", {
        type: "message_start",
        message: { id, type: "message", role: "assistant", content: [], model: body.model, stop_reason: null,
                   stop_sequence: null,
                   usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: cacheRead,
                            output_tokens: 1 } },
      });
      sse(res, "ping", { type: "ping" });
      sse(res, "content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
      for (const word of ["Hello", " from", " the", " fake", " upstream"]) {
        sse(res, "content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: word } });
        await sleep(rand(0, 4));
      }
      sse(res, "content_block_stop", { type: "content_block_stop", index: 0 });
      sse(res, "message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null },
                                   usage: { output_tokens: output } });
      sse(res, "message_stop", { type: "message_stop" });
      res.end();
      return;
    }
    const answer = JSON.stringify({
      id, type: "message", role: "assistant", model: body.model, stop_reason: "end_turn", stop_sequence: null,
      content: [{ type: "text", text: "Hello from the fake upstream" }],
      usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: cacheRead,
               output_tokens: output },
    });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
    res.end(answer);
  });
});
upstream.keepAliveTimeout = 60_000;
await new Promise((r) => upstream.listen(0, "127.0.0.1", r));

// ---- sluice ---------------------------------------------------------------------------------------------

const dbDir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-bench-limits-"));
const dbPath = path.join(dbDir, "sluice.db");
const gw = await startGateway(
  [{ name: "only", protocol: "anthropic", port: upstream.address().port,
     fields: `, limits: [{per: minute, every: 5, tokens: ${N}}]` }],
  { waitSecs, threads, storePath: dbPath });

// ---- the clients: a closed loop each, for `seconds` -------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const ascii = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ 0123456789 .,;:";
const wide = "éßøü日本語の文章漢字中文한국어"; // 2- and 3-byte characters: fewer characters than bytes
function text(n, alphabet) {
  let s = "";
  while (s.length < n) s += alphabet[Math.floor(Math.random() * alphabet.length)];
  return s;
}

const counts = { sent: 0, ok: 0, rejected: 0, other: 0, streams: 0 };
const shown = [];
function note(what) {
  if (shown.length < 5) shown.push(what);
}

function send() {
  const stream = Math.random() < streamShare;
  const msg = { model: "claude-x", messages: [{ role: "user", content: text(rand(1_000, 12_000),
                                                Math.random() < 0.2 ? wide : ascii) }] };
  if (Math.random() < 0.9) msg.max_tokens = rand(256, 2048); // else sluice reserves 4096
  if (stream) msg.stream = true;
  const body = JSON.stringify(msg);
  counts.sent++;
  if (stream) counts.streams++;
  return new Promise((resolve) => {
    const req = http.request({
      agent, host: "127.0.0.1", port: gw.port, method: "POST", path: "/v1/messages",
      headers: { "x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01", "content-type": "application/json",
                 "content-length": Buffer.byteLength(body) },
    }, (res) => {
      let answer = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (answer += d));
      res.on("end", () => {
        if (res.statusCode === 200) {
          const whole = stream ? answer.includes("event: message_stop") : /"type":"message"/.test(answer);
          if (whole) counts.ok++;
          else {
            counts.other++;
            note(`broken 200 (${stream ? "stream" : "json"}): ${answer.slice(0, 300)}`);
          }
        } else if (res.statusCode === 429) {
          counts.rejected++;
          note(`429: ${answer.slice(0, 300)}`);
        } else {
          counts.other++;
          note(`status ${res.statusCode}: ${answer.slice(0, 300)}`);
        }
        resolve();
      });
      res.on("error", (e) => {
        counts.other++;
        note(`response: ${e.message}`);
        resolve();
      });
    });
    req.on("error", (e) => {
      counts.other++;
      note(`request: ${e.message}`);
      resolve();
    });
    req.end(body);
  });
}

// A hung run fails instead of waiting forever.
const guard = setTimeout(() => {
  console.log(`bench/limits: no end ${seconds + 60} s after the start; giving up`);
  process.exit(1);
}, (seconds + 60) * 1000);

const t0 = Date.now();
const endAt = t0 + seconds * 1000;
let rssMax = 0;
const sampler = setInterval(() => (rssMax = Math.max(rssMax, rssKiB(gw.pid).rss)), 250);
await Promise.all(Array.from({ length: clients }, async () => {
  while (Date.now() < endAt) await send();
}));
const loadMs = Date.now() - t0;
clearInterval(sampler);
const mem = rssKiB(gw.pid);
rssMax = Math.max(rssMax, mem.rss);
const code = await gw.stop();
upstream.close();
agent.destroy();

// ---- what the upstream saw ----------------------------------------------------------------------------

// Every window (t - W, t] that ends at a record's time: the heaviest one over the whole run.
let maxWindow = 0, maxAt = 0, maxCount = 0, sum = 0;
for (let j = 0, i = 0; j < records.length; j++) {
  sum += records[j].tokens;
  while (records[i].t <= records[j].t - windowMs) sum -= records[i++].tokens;
  if (sum > maxWindow) {
    maxWindow = sum;
    maxAt = records[j].t;
    maxCount = j - i + 1;
  }
}
// The same, each request counted at most at sluice's estimate of it: what sluice can be held to.
let maxCapped = 0;
for (let j = 0, i = 0, sum = 0; j < records.length; j++) {
  sum += Math.min(records[j].tokens, records[j].estimate);
  while (records[i].t <= records[j].t - windowMs) sum -= Math.min(records[i].tokens, records[i++].estimate);
  maxCapped = Math.max(maxCapped, sum);
}
if (process.env.SLUICE_BENCH_RECORDS)
  fs.writeFileSync(process.env.SLUICE_BENCH_RECORDS, records.map((r) => `${(performance.timeOrigin + r.t).toFixed(3)} ${r.tokens} ${r.estimate}`).join("\n"));
const runMs = records.length > 0 ? records[records.length - 1].t - records[0].t : 0;

// ---- what sluice recorded -----------------------------------------------------------------------------

function sql(query) {
  return execFileSync("sqlite3", [dbPath, query], { encoding: "utf8" }).trim();
}
let binding = -1, dbRows = "?", dbUsage = "?", dbBuckets = "?";
try {
  binding = Number(sql("SELECT COUNT(DISTINCT request_row) FROM attempts WHERE skipped = 'window_full'"));
  dbRows = sql("SELECT COUNT(*) || ' rows, ' || SUM(outcome = 'served') || ' served' FROM requests");
  dbUsage = sql("SELECT COALESCE(SUM(COALESCE(usage_input, 0) + COALESCE(usage_output, 0) + " +
                "COALESCE(usage_cache_read, 0) + COALESCE(usage_cache_write, 0)), 0) FROM requests");
  dbBuckets = sql("SELECT COALESCE(SUM(tokens), 0) FROM usage_buckets WHERE kind = 'provider' AND name = 'only'");
} catch (e) {
  console.log(`reading the request DB ${dbPath} with the sqlite3 CLI failed: ${e.message}`);
}
fs.rmSync(dbDir, { recursive: true, force: true });

const over = maxWindow > N;
console.log(`sluice --threads ${threads}, ${clients} clients in a closed loop for ${seconds} s ` +
            `(load ended after ${loadMs} ms), limit {per: minute, every: 5, tokens: ${N}} scaled to ${windowMs} ms, ` +
            `wait_secs ${waitSecs} (${(waitSecs * scale).toFixed(1)} s scaled); ${Math.round(streamShare * 100)}% streamed`);
console.log(`requests: ${counts.sent} sent, ${counts.ok} served, ${counts.rejected} answered 429, ${counts.other} other`);
for (const s of shown) console.log(`  ${s}`);
console.log(`upstream: ${records.length} requests, ${billedTotal} tokens billed over ${(runMs / 1000).toFixed(1)} s ` +
            `(${Math.round((billedTotal * windowMs) / Math.max(1, runMs))} per ${windowMs} ms on average); ` +
            `${aboveEstimate} billed above sluice's estimate (by up to ${maxAbove})`);
console.log(`max tokens the upstream saw in any ${windowMs} ms window: ${maxWindow} ` +
            `(${maxCount} requests, window ending at +${((maxAt - (records[0]?.t ?? 0)) / 1000).toFixed(2)} s) ` +
            `${over ? "OVER" : "OK"}: limit ${N} (${((100 * maxWindow) / N).toFixed(1)}%)`);
console.log(`capped at sluice's estimates: ${maxCapped} ${maxCapped > N ? "OVER" : "OK"}`);
console.log(`the limit bound ${binding} times (requests queued on window_full; need >= ${minBinding})`);
console.log(`request DB: ${dbRows}; usage recorded ${dbUsage} tokens, usage buckets ${dbBuckets} tokens ` +
            `(upstream billed ${billedTotal})`);
console.log(`sluice RSS: ${mem.rss} KiB at the end of the load, ${rssMax} KiB max sampled, VmHWM ${mem.hwm} KiB; ` +
            `exit code ${code}`);
if (upstreamBad > 0) console.log(`upstream: ${upstreamBad} bodies that were not JSON`);
if (process.env.SLUICE_BENCH_LOG) fs.writeFileSync(process.env.SLUICE_BENCH_LOG, gw.log());
clearTimeout(guard);
const pass = !over && binding >= minBinding && counts.other === 0 && counts.ok > 0;
console.log(pass ? "PASS" : "FAIL");
process.exit(pass ? 0 : 1);

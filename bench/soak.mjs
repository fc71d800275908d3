// The soak run of quality.md / issue 12: mixed traffic for a bounded time through four upstream candidates
// that fail at random and go through 429 storms, checked afterwards by a ledger. Nothing lost, nothing
// doubled, one DB row and one start + one end event per request, flat memory, no credential anywhere.
//
//   node bench/soak.mjs [SECONDS] [--smoke] [--clients N] [--threads T] [--session-share F] [--keep DIR]
//   (bench/soak [SECONDS] runs it on build/sluice; SLUICE_BIN: the binary; SLUICE_FIXTURES: the stream
//    fixtures; --smoke = 60 s with a lighter load; SLUICE_SOAK_KEEP=DIR or --keep DIR keeps the log, the
//    request DB, the ledger and the RSS samples there; on failure they are kept in a temp dir anyway.)
//
// The set-up. sluice runs on a config written here: four anthropic upstreams (up-a … up-d, each a node
// http server in its own worker thread, so the load's event loop never delays an upstream's answers), two
// routes over them for one model family (claude-soak-f-* fails over a → b → c → d; claude-soak-lb-* load
// balances a, b, c (weight 2), d), up-b with max_concurrent 4, failover.wait_secs 20 with a quick breaker,
// two client keys of which one has {per: minute, requests: N}, and random keys for every credential.
//
// The upstreams answer Anthropic SSE (or a whole JSON message) whose text names the request and the serve:
// "r<rid> up-x-<serve> n=<k> w w … w end". The request id (rid) is in the model name
// (claude-soak-f-<rid>), so it is seen by the upstream, by the events (RequestStarted.model) and by the request
// DB (requests.model), and in the prompt and an x-soak-rid header. At random, per hop, an upstream answers
// with a fault instead: 529 or 503 before content, an in-stream overloaded_error before content (the
// fixture), a stream cut before content, a stream that ends cleanly after only opening events, a stream cut
// after content, a slow first token (1.5–5 s), or a TCP reset before the head. Each upstream also goes
// through 429 storms (every request answered 429 with Retry-After 1–3 s) that switch on and off at random,
// and twice in a run all four storm at once, so requests queue, wait and some get a final 429.
//
// The load. N clients in closed loops (32; 16 in the smoke, 8 on an ASan binary) send streamed and
// non-streamed requests, each with a fresh rid, a third with a bounded set of session headers; about 6 % are
// aborted by the client (AbortController): within 30 ms of sending, at a random time up to 5 s, or at the
// first content of a stream.
//
// The ledger (one entry per request sent) and what its checks mean, precisely:
// - answered: the client got a response it could read to its end: a complete stream (one message_start, one
//   message_stop as the last event, no error), a stream ending in exactly one in-stream error event and
//   nothing after it, a whole JSON message, an error status with an Anthropic error body, or a non-streamed
//   200 cut mid-body where the upstream itself cut that body (the one failure a JSON answer cannot signal).
// - lost: not aborted by us and no answer: a connection error with no response, or no end within
//   wait_secs + 70 s. "broken": a stream that closes without message_stop or error (a bare close), events
//   after the terminal one, an unreadable body. Both must be 0.
// - doubled: any of: a stream with two message_starts, or text naming another rid or two serves; two upstream
//   serves of one rid that the upstream wrote to the end; a served answer whose serve tag is not the
//   upstream's one complete serve of that rid; two sluice ids for one rid in the events; two RequestStarted
//   or two terminal events (RequestFinished/Failed/Cancelled) for one sluice id; two DB rows for one rid.
// - content lost: an upstream serve written to its end for a rid whose client (not aborting) did not get that
//   answer whole.
// - rows: every answered request has exactly one row in the request DB (rid from requests.model) with the
//   same sluice id as its events; an aborted request has one row exactly when sluice started it (it may have
//   been aborted before sluice read it), and no row belongs to a rid never sent. A RowsDropped event would be a
//   counted drop (allowed by behaviour.md §10, reported, and failing here as nothing should be dropped).
// - events: one subscriber (control protocol, generated TypeScript client, own worker thread) from before the
//   first request: every answered request has one RequestStarted and one terminal event, every started
//   request ends, seq has no gap and no events_dropped came.
// - RSS: /proc/PID/status VmRSS sampled every 2 s (1 s in the smoke). Flat = the maximum over the last half
//   is at most max(1.2 × base, base + 8 MiB), base = the sample at the end of the first quarter (warm-up:
//   pools, the affinity table's first pages, SQLite's page cache). Not judged on an ASan binary (quarantine and
//   shadow memory grow by design; LeakSanitizer at exit judges leaks there); shown all the same. Known bounded
//   growth: SQLite's page cache fills to its 2 MB default as the DB grows, and each new conversation takes a
//   40-byte slot of the affinity table (at most 100 000, 4 MB); the slope and bytes per request over the last
//   half are printed for a reader to judge what the limit lets through.
// - credentials: the upstream keys, the client keys and the control key (each in full, and its middle, which
//   no mask shows) appear nowhere in sluice's log (run at --log-level debug), in any control message
//   received, in any column of any table of the request DB (a full .dump), or in any error a client got
//   (non-200 bodies and headers, in-stream error events). The upstreams check that each hop carried their key.
// - sluice itself: did not exit during the run; exits 0 on SIGTERM (under ASan: LeakSanitizer found nothing).
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";

import { fixture, startGateway } from "../tests/sdk/harness.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rand = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo + 1));
const UPSTREAMS = ["up-a", "up-b", "up-c", "up-d"];
const WAIT_SECS = 20;

if (isMainThread) await main();
else if (workerData.role === "upstream") runUpstream(workerData);
else if (workerData.role === "events") await runEvents(workerData);

// ---- a fake upstream (one per worker thread) ----------------------------------------------------------

// Per hop, when not in a 429 storm: the fault, or "ok". Cumulative shares.
const FAULTS = [
  ["e529", 0.04], ["e503", 0.04], ["overloaded_in_stream", 0.04], ["cut_before_content", 0.04],
  ["ended_early", 0.02], ["cut_after_content", 0.03], ["slow_first_token", 0.06], ["reset", 0.04],
];

function pickFault() {
  let x = Math.random();
  for (const [name, p] of FAULTS) {
    if (x < p) return name;
    x -= p;
  }
  return "ok";
}

function runUpstream({ name, key, storm }) {
  const records = []; // one per hop received: {rid, tag, kind, stream, content, completed, keyOk}
  let serveNo = 0, storming = false, forced = false, storms = 0, stormMs = 0, stormFrom = 0, on = false;
  const overloaded = fixture("anthropic-overloaded-before-content.sse");
  // Storm time is counted while its own storm or a storm of all (forced by the main thread) is on.
  const update = () => {
    const now = storming || forced;
    if (now && !on) {
      storms++;
      stormFrom = Date.now();
    }
    if (!now && on) stormMs += Date.now() - stormFrom;
    on = now;
  };
  // Its own storms: off for a while, on for a while, over and over.
  const cycle = () => {
    setTimeout(() => {
      storming = true;
      update();
      setTimeout(() => {
        storming = false;
        update();
        cycle();
      }, rand(storm.onMin, storm.onMax));
    }, rand(storm.offMin, storm.offMax));
  };
  cycle();

  const sse = (res, event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  const json = (res, status, value, headers = {}) => {
    const body = JSON.stringify(value);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body),
                            ...headers });
    res.end(body);
  };
  const gone = (res) => res.destroyed || res.writableEnded;

  async function answer(req, res, rec, body) {
    const n = rand(3, 12);
    const words = [`r${rec.rid} `, `${rec.tag} `, `n=${n} `, ...Array(n).fill("w "), "end"];
    const usage = { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    const kind = rec.kind;
    await sleep(rand(2, 40)); // the model "thinks"
    if (gone(res)) return;
    if (kind === "reset") {
      req.socket.resetAndDestroy();
      return;
    }
    if (kind === "e529")
      return json(res, 529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
    if (kind === "e503")
      return json(res, 503, { type: "error", error: { type: "api_error", message: "Service unavailable" } });
    if (!body.stream) {
      if (kind === "slow_first_token") await sleep(rand(1500, 5000));
      if (gone(res)) return;
      const whole = JSON.stringify({
        id: `msg_${rec.tag}`, type: "message", role: "assistant", model: body.model, stop_reason: "end_turn",
        stop_sequence: null, content: [{ type: "text", text: words.join("") }],
        usage: { ...usage, output_tokens: n + 4 },
      });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(whole) });
      rec.content = true;
      if (kind === "cut_after_content") {
        res.write(whole.slice(0, Math.floor(whole.length / 2)), () => setTimeout(() => res.destroy(), 5));
        return;
      }
      res.end(whole);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
    if (kind === "overloaded_in_stream") {
      res.end(overloaded);
      return;
    }
    sse(res, "message_start", {
      type: "message_start",
      message: { id: `msg_${rec.tag}`, type: "message", role: "assistant", content: [], model: body.model,
                 stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } },
    });
    sse(res, "ping", { type: "ping" });
    if (kind === "cut_before_content") {
      await sleep(rand(0, 20));
      res.destroy();
      return;
    }
    if (kind === "ended_early") {
      res.end();
      return;
    }
    if (kind === "slow_first_token") {
      await sleep(rand(1500, 5000));
      if (gone(res)) return;
      sse(res, "ping", { type: "ping" });
    }
    sse(res, "content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
    const cutAt = kind === "cut_after_content" ? rand(1, words.length - 1) : -1;
    for (let i = 0; i < words.length; i++) {
      if (gone(res)) return;
      if (i === cutAt) {
        await sleep(5);
        res.destroy();
        return;
      }
      sse(res, "content_block_delta", { type: "content_block_delta", index: 0,
                                        delta: { type: "text_delta", text: words[i] } });
      rec.content = true;
      if (i % 4 === 3) await sleep(rand(0, 15));
    }
    if (gone(res)) return;
    sse(res, "content_block_stop", { type: "content_block_stop", index: 0 });
    sse(res, "message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null },
                                usage: { output_tokens: n + 4 } });
    sse(res, "message_stop", { type: "message_stop" });
    res.end();
  }

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return json(res, 400, { type: "error", error: { type: "invalid_request_error", message: "bad json" } });
      }
      const m = /-(\d+)$/.exec(body.model ?? "");
      const rec = {
        rid: m ? Number(m[1]) : -1, tag: `${name}-${++serveNo}`, kind: on ? "429" : pickFault(),
        stream: body.stream === true, content: false, completed: false, keyOk: req.headers["x-api-key"] === key,
      };
      if (rec.kind !== "429" && !rec.stream && ["overloaded_in_stream", "ended_early"].includes(rec.kind)) rec.kind = "e529";
      if (rec.kind !== "429" && !rec.stream && rec.kind === "cut_before_content") rec.kind = "reset";
      records.push(rec);
      res.on("finish", () => (rec.completed = true));
      if (rec.kind === "429") {
        const s = rand(1, 3);
        const hint = Math.random() < 0.25 ? { "retry-after-ms": String(s * 1000) } : { "retry-after": String(s) };
        return json(res, 429, { type: "error", error: { type: "rate_limit_error", message: "Rate limited" } }, hint);
      }
      answer(req, res, rec, body).catch((e) => {
        console.error(`${name}: ${e.stack}`);
        res.destroy();
      });
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1", () => parentPort.postMessage({ port: server.address().port }));
  parentPort.on("message", (m) => {
    if (m.storm !== undefined) {
      forced = m.storm;
      update();
      return;
    }
    storming = forced = false;
    update();
    server.close();
    server.closeAllConnections();
    parentPort.postMessage({ records, storms, stormMs });
  });
}

// ---- the events subscriber (its own worker thread) ---------------------------------------------------

function jsonOf(value) {
  return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
}

async function runEvents({ port, key, secrets }) {
  const { ControlClient } = await import("../tests/sdk/control_client.mjs");
  const c = await ControlClient.connect(port, { key });
  const welcome = await c.next(() => true, 30_000);
  if (welcome.kind !== "welcome") throw new Error(`control: ${jsonOf(welcome)}`);
  const snap = await c.request({ kind: "subscribe", topics: ["events"] }, 30_000);
  const byId = new Map(); // sluice id -> {model, started, terminals: [kind…], status}
  const kinds = {};
  const leaks = [];
  const problems = [];
  let seq = Number(snap.seq), gaps = 0, dropped = 0, rowsDropped = 0, open = 0, messages = 0;
  const entry = (id) => {
    let e = byId.get(id);
    if (!e) byId.set(id, (e = { model: null, started: 0, terminals: [], status: null }));
    return e;
  };
  const drain = () => {
    const batch = c.messages.splice(0);
    c.taken = 0;
    for (const m of batch) {
      messages++;
      const text = jsonOf(m);
      for (const s of secrets) if (text.includes(s.value)) leaks.push(`${s.what} in ${text.slice(0, 300)}`);
      if (m.kind === "events_dropped") {
        dropped += Number(m.count);
        continue;
      }
      if (m.kind !== "event") continue;
      if (Number(m.seq) !== seq + 1 && problems.length < 10) problems.push(`seq ${m.seq} after ${seq}`);
      if (Number(m.seq) !== seq + 1) gaps++;
      seq = Number(m.seq);
      const ev = m.event;
      kinds[ev.kind] = (kinds[ev.kind] ?? 0) + 1;
      if (ev.kind === "rows_dropped") rowsDropped += Number(ev.count ?? 1);
      if (ev.id === undefined) continue;
      const id = Number(ev.id);
      if (ev.kind === "request_started") {
        const e = entry(id);
        e.started++;
        e.model = ev.model;
        open++;
      } else if (["request_finished", "request_failed", "request_cancelled"].includes(ev.kind)) {
        const e = entry(id);
        e.terminals.push(ev.kind);
        if (ev.kind === "request_finished") e.status = Number(ev.status);
        if (ev.kind === "request_failed") e.status = ev.message?.code ?? "?";
        if (e.terminals.length === 1) open--;
      }
    }
  };
  const timer = setInterval(drain, 100);
  parentPort.on("message", async (m) => {
    drain();
    if (m === "open") return parentPort.postMessage({ open });
    clearInterval(timer);
    await Promise.race([c.close(), sleep(2000)]);
    drain();
    parentPort.postMessage({ ids: [...byId.entries()], kinds, leaks, problems, gaps, dropped, rowsDropped, messages });
  });
  parentPort.postMessage({ ready: true });
}

// ---- the load, the ledger, the report ----------------------------------------------------------------

// sluice's CPU time (user + system), in ms.
function cpuMs(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
  } catch {
    return null;
  }
}

function rssKiB(pid) {
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))[1]);
  } catch {
    return null; // sluice has exited
  }
}

function secret(prefix) {
  return `${prefix}${crypto.randomBytes(20).toString("hex")}`;
}

// The rid and serve tag a valid text names, or why it is not valid. Whole: "r<rid> <tag> n=<k> (w ){k}end".
function checkText(text, rid, whole) {
  const own = `r${rid} `;
  if ((text.match(/r\d+ up-/g) ?? []).length > 1) return { bad: `two serves in one answer: ${text.slice(0, 120)}` };
  if (!whole) {
    if (text.length === 0) return {};
    if (!(text.startsWith(own) || own.startsWith(text))) return { bad: `text of another request: ${text.slice(0, 80)}` };
    const m = /^r\d+ (up-[a-d]-\d+) /.exec(text);
    return { tag: m?.[1] };
  }
  const m = /^r(\d+) (up-[a-d]-\d+) n=(\d+) ((?:w )*)end$/.exec(text);
  if (!m) return { bad: `malformed text: ${text.slice(0, 120)}` };
  if (Number(m[1]) !== rid) return { bad: `text of request ${m[1]}` };
  if (m[4].length / 2 !== Number(m[3])) return { bad: `${m[4].length / 2} words of ${m[3]}: ${text.slice(0, 120)}` };
  return { tag: m[2] };
}

// A stream's events: [{event, data}], and how many keep-alive comments / blank keep-alives came.
function parseSse(raw) {
  const events = [];
  let comments = 0;
  for (const block of raw.split("\n\n")) {
    let event = null, data = null;
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) comments++;
      else if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data = (data === null ? "" : data + "\n") + line.slice(6);
    }
    if (event !== null || data !== null) events.push({ event, data });
  }
  return { events, comments };
}

async function main() {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const at = args.indexOf(name);
    return at >= 0 ? args[at + 1] : fallback;
  };
  const smoke = args.includes("--smoke");
  const positional = args.find((a, i) => /^\d+$/.test(a) && !args[i - 1]?.startsWith("--"));
  const seconds = Number(positional ?? (smoke ? 60 : 600));
  const short = seconds <= 120;
  const bin = process.env.SLUICE_BIN || fileURLToPath(new URL("../build/sluice", import.meta.url));
  // An ASan binary is ~3x slower and its memory grows by design: a lighter load, and RSS is only shown.
  const asan = fs.readFileSync(bin).includes("__asan_init");
  const clients = Number(option("--clients", asan ? 8 : short ? 16 : 32));
  const threads = Number(option("--threads", 2));
  const thinkMax = asan ? 300 : short ? 150 : 100;
  const keyLimit = short ? 40 : 100; // requests per minute for the limited key
  const limitedClients = Math.max(1, Math.round(clients / 8));
  const abortShare = 0.06;
  // The share of requests named by one of a few session headers per client; the others are conversations of
  // their own (key + first message), each a new entry in the affinity table (bounded: 100 000, 1 h idle).
  const sessionShare = Number(option("--session-share", 0.33));
  const keepDir = option("--keep", process.env.SLUICE_SOAK_KEEP);
  const sampleMs = short ? 1000 : 2000;
  const storm = short ? { offMin: 8000, offMax: 25000, onMin: 2000, onMax: 6000 }
                      : { offMin: 20000, offMax: 70000, onMin: 3000, onMax: 12000 };

  // Credentials: random each run, shaped like real ones so that sluice's maskers see keys.
  const upstreamKeys = Object.fromEntries(UPSTREAMS.map((u) => [u, secret("sk-ant-api03-")]));
  const clientKeys = { "soak-main": secret("sk-soak-"), "soak-limited": secret("sk-soak-") };
  const controlKey = secret("ctl-");
  const secrets = [];
  const addSecret = (what, value) => {
    secrets.push({ what, value });
    secrets.push({ what: `the middle of ${what}`, value: value.slice(8, -6) });
  };
  for (const [u, k] of Object.entries(upstreamKeys)) addSecret(`upstream key of ${u}`, k);
  for (const [c, k] of Object.entries(clientKeys)) addSecret(`client key ${c}`, k);
  addSecret("the control key", controlKey);
  const findSecrets = (text, where, out) => {
    for (const s of secrets) {
      const at = text.indexOf(s.value);
      if (at >= 0) out.push(`${s.what} in ${where}: …${text.slice(Math.max(0, at - 120), at + 40)}…`);
    }
  };

  // The upstreams.
  const ups = await Promise.all(UPSTREAMS.map(async (name) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: { role: "upstream", name, key: upstreamKeys[name], storm } });
    const { port } = await new Promise((r) => worker.once("message", r));
    return { name, worker, port };
  }));

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-soak-"));
  const dbPath = path.join(dir, "sluice.db");
  const configPath = path.join(dir, "sluice.yaml");
  fs.writeFileSync(configPath, [
    "listen:",
    "  gateway: {bind: 127.0.0.1, port: 0}",
    `  control: {bind: 127.0.0.1, port: 0, key: "${controlKey}"}`,
    "clients:",
    `  - {name: soak-main, key: "${clientKeys["soak-main"]}"}`,
    `  - {name: soak-limited, key: "${clientKeys["soak-limited"]}", limits: [{per: minute, requests: ${keyLimit}}]}`,
    "providers:",
    ...ups.map((u) => `  - {name: ${u.name}, protocol: anthropic, base_url: "http://127.0.0.1:${u.port}", ` +
                      `key: "${upstreamKeys[u.name]}", models: ["claude-soak-*"]${u.name === "up-b" ? ", max_concurrent: 4" : ""}}`),
    "routes:",
    '  - {match: "claude-soak-f-*", failover: [up-a, up-b, up-c, up-d]}',
    '  - {match: "claude-soak-lb-*", load_balance: [up-a, up-b, {name: up-c, weight: 2}, up-d]}',
    `failover: {wait_secs: ${WAIT_SECS}, failures_to_pause: 5, pause_secs: 5, max_pause_secs: 30, ` +
      "idle_timeout_secs: 30, connect_timeout_secs: 2}",
    `store: {path: "${dbPath}"}`,
    "shutdown_grace_secs: 5",
  ].join("\n") + "\n");

  process.env.SLUICE_BIN = bin;
  process.env.SLUICE_LOG_LEVEL ??= "debug";
  const gw = await startGateway([], { configPath, threads, waitSecs: WAIT_SECS });
  // Should this process die on the way (an exception), sluice does not outlive it.
  let stopped = false;
  process.on("exit", () => {
    if (!stopped) {
      try {
        process.kill(gw.pid, "SIGKILL");
      } catch {}
    }
  });

  const events = new Worker(new URL(import.meta.url), {
    workerData: { role: "events", port: gw.controlPort, key: controlKey, secrets },
  });
  const eventsError = new Promise((r) => events.once("error", (e) => r(e)));
  const ready = await Promise.race([new Promise((r) => events.once("message", r)), eventsError]);
  if (!ready?.ready) {
    console.log(`bench/soak: the events subscriber failed: ${ready?.stack ?? ready}`);
    await gw.stop();
    process.exit(1);
  }
  const askEvents = (m) => new Promise((r) => {
    events.once("message", r);
    events.postMessage(m);
  });

  // ---- the load ----
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const ledger = [];
  let nextRid = 0;
  const hangMs = (WAIT_SECS + 70) * 1000;

  function send(client) {
    const rid = ++nextRid;
    const stream = Math.random() < 0.6;
    const route = Math.random() < 0.5 ? "f" : "lb";
    const model = `claude-soak-${route}-${rid}`;
    const body = JSON.stringify({ model, max_tokens: 64, stream,
                                  messages: [{ role: "user", content: `soak request ${rid}: say hello` }] });
    const headers = { "x-api-key": clientKeys[client.key], "anthropic-version": "2023-06-01",
                      "content-type": "application/json", "content-length": Buffer.byteLength(body),
                      "x-soak-rid": String(rid) };
    if (Math.random() < sessionShare) headers["x-sluice-session"] = `soak-c${client.index}-${rid % 4}`;
    const e = { rid, client: client.key, stream, route, sentAt: Date.now(), ms: null, status: null, outcome: null,
                detail: "", tag: null, code: null, stage: null, settles: 0 };
    ledger.push(e);
    const r = Math.random();
    const abort = r >= abortShare ? null
      : r < abortShare / 3 ? { at: rand(0, 30) }
      : r < (2 * abortShare) / 3 || !stream ? { at: rand(30, 5000) } : { at: "content" };
    let aborted = false, headSeen = false, contentSeen = false, rawOf = () => "", req = null, response = null;
    // The client goes away: the connection is closed (an answer already whole is not aborted). Not an
    // AbortSignal: on a kept-alive socket that the response just gave back, it errors with no listener.
    const doAbort = () => {
      if (response?.complete || aborted) return;
      aborted = true;
      e.stage = !headSeen ? "before the head" : !contentSeen ? "after the head" : "after content";
      req.destroy();
    };
    return new Promise((resolve) => {
      const timers = [];
      const settle = (outcome, detail = "") => {
        e.settles++;
        if (e.outcome !== null) return;
        e.outcome = aborted && !["stream_ok", "json_ok"].includes(outcome) ? "aborted" : outcome;
        if (["broken", "doubled", "json_cut", "stream_error"].includes(e.outcome)) e.raw = rawOf().slice(0, 4096);
        if (e.outcome === "aborted" && outcome !== "aborted" && outcome !== "no_answer") e.detail = `then ${outcome}`;
        else e.detail = detail;
        e.ms = Date.now() - e.sentAt;
        timers.forEach(clearTimeout);
        resolve(e);
      };
      timers.push(setTimeout(() => {
        settle("hung", `no end within ${hangMs} ms`);
        req.destroy();
      }, hangMs));
      if (abort && abort.at !== "content") timers.push(setTimeout(doAbort, abort.at));
      req = http.request({
        agent, host: "127.0.0.1", port: gw.port, method: "POST", path: "/v1/messages", headers,
      }, (res) => {
        headSeen = true;
        response = res;
        e.status = res.statusCode;
        e.code = res.headers["x-sluice-error"] ?? null;
        e.retryAfter = Number(res.headers["retry-after"] ?? 0);
        const chunks = [];
        rawOf = () => Buffer.concat(chunks).toString("utf8");
        res.on("data", (d) => {
          chunks.push(d);
          if (!contentSeen && d.includes("content_block_delta")) {
            contentSeen = true;
            if (abort?.at === "content") doAbort();
          }
        });
        res.on("error", () => {});
        res.on("close", () => {
          const raw = Buffer.concat(chunks).toString("utf8");
          if (aborted) return settle("aborted");
          if (res.statusCode !== 200) {
            errors.push({ rid, where: `the ${res.statusCode} answer`, text: `${jsonOf(res.headers)}\n${raw}` });
            if (!res.complete) return settle("broken", `a ${res.statusCode} answer cut: ${raw.slice(0, 200)}`);
            let v;
            try {
              v = JSON.parse(raw);
            } catch {
              return settle("broken", `a ${res.statusCode} body that is not JSON: ${raw.slice(0, 200)}`);
            }
            if (v?.type !== "error" || typeof v.error?.type !== "string")
              return settle("broken", `a ${res.statusCode} body that is not an Anthropic error: ${raw.slice(0, 200)}`);
            e.code ??= v.error.type;
            return settle("http_error");
          }
          if (!stream) {
            if (!res.complete) {
              e.detail = raw.slice(0, 120);
              return settle("json_cut", `${raw.length} bytes`);
            }
            let v;
            try {
              v = JSON.parse(raw);
            } catch {
              return settle("broken", `a 200 body that is not JSON: ${raw.slice(0, 200)}`);
            }
            const t = checkText(v?.content?.[0]?.text ?? "", rid, true);
            if (t.bad) return settle("doubled", t.bad);
            e.tag = t.tag;
            return settle("json_ok");
          }
          const { events: evs, comments } = parseSse(raw);
          e.keepalives = comments;
          const names = evs.map((x) => x.event);
          const starts = names.filter((n) => n === "message_start").length;
          const stops = names.filter((n) => n === "message_stop").length;
          const errs = evs.filter((x) => x.event === "error");
          let text = "";
          for (const x of evs) {
            if (x.event !== "content_block_delta") continue;
            try {
              text += JSON.parse(x.data).delta?.text ?? "";
            } catch {
              return settle("broken", `an unreadable delta: ${x.data?.slice(0, 200)}`);
            }
          }
          if (starts > 1) return settle("doubled", `${starts} message_start events (two answers in one)`);
          const startTag = evs.filter((x) => x.event === "message_start").map((x) => /"id":"msg_(up-[a-d]-\d+)"/.exec(x.data)?.[1])[0];
          if (!res.complete) return settle("broken", `a bare close after ${names.join(",") || "nothing"}`);
          if (errs.length === 0) {
            if (stops !== 1 || names.at(-1) !== "message_stop")
              return settle("broken", `ended cleanly without a final message_stop: ${names.join(",")}`);
            const t = checkText(text, rid, true);
            if (t.bad) return settle("doubled", t.bad);
            if (startTag !== t.tag) return settle("doubled", `message_start of ${startTag}, text of ${t.tag}`);
            e.tag = t.tag;
            return settle("stream_ok");
          }
          errors.push({ rid, where: "an in-stream error", text: errs.map((x) => x.data).join("\n") });
          if (errs.length > 1) return settle("doubled", `${errs.length} error events (two final answers): ${names.join(",")}`);
          if (names.at(-1) !== "error" || stops > 0)
            return settle("broken", `in-stream error not last: ${names.join(",")}`);
          const t = checkText(text, rid, false);
          if (t.bad) return settle("doubled", t.bad);
          if (t.tag && startTag !== t.tag) return settle("doubled", `message_start of ${startTag}, text of ${t.tag}`);
          e.tag = t.tag ?? null;
          try {
            const v = JSON.parse(errs[0].data);
            e.code = v.error?.code ?? v.error?.type ?? null;
          } catch {
            return settle("broken", `an unreadable error event: ${errs[0].data.slice(0, 200)}`);
          }
          // sluice's own wait errors come with no hop in flight: upstream bytes before them are a given-up hop's.
          if (/^gw\.wait\./.test(e.code ?? "") && starts > 0)
            return settle("doubled", `${e.code} after a given-up hop's bytes: ${names.join(",")}`);
          e.detail = text.length > 0 ? "after content" : "before content";
          return settle("stream_error", e.detail);
        });
      });
      req.on("error", (err) => {
        if (!headSeen) settle(aborted ? "aborted" : "no_answer", err.message);
      });
      req.end(body);
    });
  }
  const errors = []; // every error text a client got: {rid, where, text}

  const guard = setTimeout(() => {
    console.log(`bench/soak: no end ${seconds + 240} s after the start; giving up`);
    process.exit(1);
  }, (seconds + 240) * 1000);

  const t0 = Date.now();
  const endAt = t0 + seconds * 1000;
  const rss = [];
  let gone = false;
  const sampler = setInterval(() => {
    const v = rssKiB(gw.pid);
    if (v === null) gone = true;
    else rss.push([Date.now() - t0, v]);
  }, sampleMs);
  rss.push([0, rssKiB(gw.pid)]);
  // Twice in a run, every upstream storms at once for a while: requests queue on all four.
  const allStorms = [0.4, 0.75].map((f) => setTimeout(() => {
    for (const u of ups) u.worker.postMessage({ storm: true });
    setTimeout(() => ups.forEach((u) => u.worker.postMessage({ storm: false })), rand(5000, short ? 8000 : 14000));
  }, seconds * 1000 * f));
  let inFlight = 0, maxInFlight = 0;
  await Promise.all(Array.from({ length: clients }, async (_, index) => {
    const client = { index, key: index < limitedClients ? "soak-limited" : "soak-main" };
    await sleep((index * 1000) / clients);
    while (Date.now() < endAt && !gone) {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      const e = await send(client);
      inFlight--;
      // As the SDKs do: a 429 is retried after its Retry-After (at most 3 s here), as a new request.
      await sleep(rand(0, thinkMax) + (e.status === 429 ? Math.min(3000, e.retryAfter * 1000) : 0));
    }
  }));
  const loadMs = Date.now() - t0;
  allStorms.forEach(clearTimeout);
  clearInterval(sampler);
  const rssEnd = rssKiB(gw.pid);
  const cpuEnd = cpuMs(gw.pid);
  gone ||= rssEnd === null;

  // Every started request has ended in the events (or 10 s went by).
  let open = -1;
  for (let i = 0; i < 100; i++) {
    open = (await askEvents("open")).open;
    if (open === 0) break;
    await sleep(100);
  }
  const code = await gw.stop();
  stopped = true;
  agent.destroy();
  const ev = await askEvents("stop");
  await events.terminate();
  const upReports = await Promise.all(ups.map(async (u) => {
    const rep = await new Promise((r) => {
      u.worker.once("message", r);
      u.worker.postMessage("stop");
    });
    await u.worker.terminate();
    return { name: u.name, ...rep };
  }));
  const log = gw.log();

  // ---- the request DB (sluice has stopped: every row is written) ----
  const sqlite = (...a) => execFileSync("sqlite3", [dbPath, ...a], { encoding: "utf8", maxBuffer: 1 << 30 });
  let rows = [], dump = "", dbError = null;
  try {
    const out = sqlite("-json", "SELECT r.id, r.model, r.status, r.outcome, r.error_code, r.provider, " +
                       "(SELECT COUNT(*) FROM attempts a WHERE a.request_row = r.row AND a.skipped IS NULL) AS hops " +
                       "FROM requests r");
    rows = out.trim() === "" ? [] : JSON.parse(out);
    dump = sqlite(".dump");
  } catch (err) {
    dbError = err.message;
  }

  // ---- the ledger's checks ----
  const fails = [];
  const fail = (what, list) => {
    if (list.length > 0) fails.push({ what, n: list.length, some: list.slice(0, 8) });
  };
  const byRid = new Map(ledger.map((e) => [e.rid, e]));
  const ridOf = (model) => {
    const m = /^claude-soak-(?:f|lb)-(\d+)$/.exec(model ?? "");
    return m ? Number(m[1]) : null;
  };
  const answered = (e) => !["aborted", "no_answer", "hung"].includes(e.outcome);
  const served = (e) => e.outcome === "stream_ok" || e.outcome === "json_ok";

  // Upstream serves by rid.
  const hops = new Map(); // rid -> [record]
  const faultCounts = {};
  let wrongKey = 0;
  for (const u of upReports) {
    for (const rec of u.records) {
      faultCounts[rec.kind] = (faultCounts[rec.kind] ?? 0) + 1;
      if (!rec.keyOk) wrongKey++;
      if (!hops.has(rec.rid)) hops.set(rec.rid, []);
      hops.get(rec.rid).push(rec);
    }
  }
  // Events by rid.
  const evByRid = new Map(); // rid -> [{id, started, terminals, status}]
  const strayEvents = [];
  for (const [id, x] of ev.ids) {
    const rid = ridOf(x.model);
    if (rid === null || !byRid.has(rid)) {
      strayEvents.push(`sluice id ${id}: model ${x.model}, ${x.started} started, ${x.terminals.join("+")}`);
      continue;
    }
    if (!evByRid.has(rid)) evByRid.set(rid, []);
    evByRid.get(rid).push({ id, ...x });
  }
  // Rows by rid.
  const rowsByRid = new Map();
  const strayRows = [];
  for (const row of rows) {
    const rid = ridOf(row.model);
    if (rid === null || !byRid.has(rid)) {
      strayRows.push(`row id ${row.id} model ${row.model}`);
      continue;
    }
    if (!rowsByRid.has(rid)) rowsByRid.set(rid, []);
    rowsByRid.get(rid).push(row);
  }

  const lost = [], broken = [], doubled = [], contentLost = [], rowsMissing = [], rowsDoubled = [], rowsOdd = [];
  const evMissing = [], evDoubled = [], evOpen = [], mismatch = [], settledTwice = [];
  const hopDiff = [];
  const say = (e, what) => `rid ${e.rid} (${e.stream ? "stream" : "json"}, ${e.client}, ${e.outcome}` +
                           `${e.status !== null ? ` ${e.status}` : ""}${e.code ? ` ${e.code}` : ""}): ${what}`;
  for (const e of ledger) {
    if (e.outcome === null) e.outcome = "hung"; // cannot happen: the hang timer settles it
    if (e.settles > 1 && e.outcome !== "aborted" && e.outcome !== "hung") settledTwice.push(say(e, `${e.settles} settles`));
    if (e.outcome === "no_answer" || e.outcome === "hung") lost.push(say(e, e.detail));
    if (e.outcome === "broken") broken.push(say(e, e.detail));
    if (e.outcome === "doubled") doubled.push(say(e, e.detail));
    if (e.outcome === "json_cut" && !(hops.get(e.rid) ?? []).some((h) => h.kind === "cut_after_content"))
      broken.push(say(e, `a JSON answer cut with no upstream cut: ${e.detail}`));
    // The upstream side.
    const hs = hops.get(e.rid) ?? [];
    const whole = hs.filter((h) => h.completed && h.kind !== "429" && h.kind !== "e529" && h.kind !== "e503" &&
                                   h.kind !== "overloaded_in_stream" && h.kind !== "ended_early");
    if (whole.length > 1) doubled.push(say(e, `the upstream served it whole ${whole.length} times: ${whole.map((h) => h.tag)}`));
    if (served(e) && (whole.length !== 1 || whole[0].tag !== e.tag))
      doubled.push(say(e, `served ${e.tag}, the upstream's whole serves: ${whole.map((h) => h.tag).join(",") || "none"}`));
    if (!served(e) && e.outcome !== "aborted" && whole.length > 0)
      contentLost.push(say(e, `the upstream wrote ${whole[0].tag} whole; the client got ${e.outcome} ${e.detail}`));
    // The events.
    const evs = evByRid.get(e.rid) ?? [];
    if (evs.length > 1) evDoubled.push(say(e, `sluice ids ${evs.map((x) => x.id)}`));
    for (const x of evs) {
      if (x.started !== 1 || x.terminals.length > 1) evDoubled.push(say(e, `id ${x.id}: ${x.started} started, ${x.terminals.join("+")}`));
      if (x.terminals.length === 0) evOpen.push(say(e, `id ${x.id} never ended`));
    }
    const started = evs.length > 0;
    if (answered(e) && (!started || evs[0].terminals.length === 0))
      evMissing.push(say(e, started ? "no terminal event" : "no RequestStarted"));
    if (served(e) && started && evs[0].terminals[0] !== "request_finished")
      mismatch.push(say(e, `served, but the events say ${evs[0].terminals[0]}`));
    if (!started && hs.length > 0) evMissing.push(say(e, `the upstream got ${hs.length} hops, yet no RequestStarted`));
    // The rows.
    const rs = rowsByRid.get(e.rid) ?? [];
    if (rs.length > 1) rowsDoubled.push(say(e, `${rs.length} rows`));
    if (rs.length === 0 && (answered(e) || started)) rowsMissing.push(say(e, started ? "started, no row" : "no row"));
    if (rs.length === 1 && started && rs[0].id !== evs[0].id) rowsOdd.push(say(e, `row id ${rs[0].id}, events id ${evs[0].id}`));
    if (rs.length === 1 && !started) rowsOdd.push(say(e, `a row (id ${rs[0].id}) but no RequestStarted`));
    if (rs.length === 1 && served(e) && rs[0].outcome !== "served") mismatch.push(say(e, `served, the row says ${rs[0].outcome}`));
    // Every hop the upstream got is one of the row's attempts, a resend on a fresh connection too
    // (behaviour.md §3). An aborted request may lose a hop the upstream never read whole.
    if (rs.length === 1) {
      const diff = hs.length - rs[0].hops;
      if (e.outcome === "aborted" ? diff < -1 || diff > 0 : diff !== 0)
        hopDiff.push(say(e, `row: ${rs[0].hops} attempts, the upstreams got ${hs.length} (${hs.map((h) => `${h.tag} ${h.kind}`).join(", ")})`));
    }
  }
  const unknownHops = [...hops.keys()].filter((rid) => !byRid.has(rid));

  fail("lost (no answer)", lost);
  fail("broken answers", broken);
  fail("doubled answers", [...doubled, ...evDoubled, ...rowsDoubled]);
  fail("content the upstream wrote whole that its client never got", contentLost);
  fail("answers settled twice on the client", settledTwice);
  fail("rows missing", rowsMissing);
  fail("rows that do not match the events", rowsOdd);
  fail("rows of requests never sent", strayRows);
  fail("events missing", evMissing);
  fail("requests that started and never ended", evOpen);
  fail("events of requests never sent", strayEvents);
  fail("hops for rids never sent", unknownHops.map((r) => `rid ${r}`));
  fail("outcomes that disagree (client / events / row)", mismatch);
  fail("hops the request DB does not account for", hopDiff);
  fail("upstream hops without the upstream's key", wrongKey > 0 ? [`${wrongKey} hops`] : []);
  if (ev.gaps > 0 || ev.dropped > 0) fail("events not all received", [`${ev.gaps} seq gaps, ${ev.dropped} dropped`, ...ev.problems]);
  if (ev.rowsDropped > 0) fail("rows dropped (RowsDropped)", [`${ev.rowsDropped}`]);
  if (dbError) fail("request DB unreadable", [dbError]);
  if (gone) fail("sluice exited during the run", [log.slice(-2000)]);
  if (code !== 0) fail(`sluice's exit code on SIGTERM was ${code}`, [log.slice(-3000)]);

  const leaks = [...ev.leaks];
  findSecrets(log, "sluice's log", leaks);
  findSecrets(dump, "the request DB", leaks);
  for (const x of errors) findSecrets(x.text, `rid ${x.rid}'s ${x.where}`, leaks);
  fail("credentials found", leaks);

  // RSS: flat after warm-up.
  const quarter = (seconds * 1000) / 4;
  const base = rss.reduce((best, s) => (Math.abs(s[0] - quarter) < Math.abs(best[0] - quarter) ? s : best), rss[0]);
  const tail = rss.filter((s) => s[0] >= (seconds * 1000) / 2);
  const tailMax = tail.reduce((m, s) => Math.max(m, s[1]), 0);
  const limit = Math.max(Math.round(base[1] * 1.2), base[1] + 8192);
  const rssFlat = tailMax <= limit;
  if (!asan && !rssFlat) fail("RSS not flat", [`max over the last half ${tailMax} KiB > ${limit} KiB (base ${base[1]} KiB at ${base[0]} ms)`]);
  const slope = (() => { // least squares over the last half, KiB per minute
    if (tail.length < 3) return 0;
    const n = tail.length, mx = tail.reduce((s, x) => s + x[0], 0) / n, my = tail.reduce((s, x) => s + x[1], 0) / n;
    const sxy = tail.reduce((s, x) => s + (x[0] - mx) * (x[1] - my), 0), sxx = tail.reduce((s, x) => s + (x[0] - mx) ** 2, 0);
    return (sxy / sxx) * 60_000;
  })();

  // Sanity: the run exercised what it claims to.
  const kinds = {};
  for (const e of ledger) {
    const k = e.outcome === "http_error" ? `http ${e.status} ${e.code ?? ""}`.trim()
      : e.outcome === "stream_error" ? `stream error ${e.detail} ${e.code ?? ""}`.trim()
      : e.outcome === "aborted" ? `aborted by us ${e.stage}` : e.outcome;
    kinds[k] = (kinds[k] ?? 0) + 1;
  }
  const nServed = ledger.filter(served).length;
  const nAnswered = ledger.filter(answered).length;
  if (nServed < ledger.length * 0.5) fail("too few served (the run tested little)", [`${nServed} of ${ledger.length}`]);
  const nAborted = ledger.filter((e) => e.outcome === "aborted").length;

  // ---- the report ----
  const p = (s) => console.log(s);
  p(`bench/soak: ${seconds} s${smoke ? " (smoke)" : ""}, sluice ${bin}${asan ? " (ASan)" : ""} --threads ${threads}; ` +
    `${clients} clients (${limitedClients} on the limited key, ${keyLimit}/min), think 0–${thinkMax} ms, ` +
    `wait_secs ${WAIT_SECS}; load ran ${(loadMs / 1000).toFixed(1)} s, at most ${maxInFlight} in flight`);
  p(`requests sent: ${ledger.length} (${(ledger.length / (loadMs / 1000)).toFixed(1)}/s), ` +
    `${ledger.filter((e) => e.stream).length} streamed; answered ${nAnswered}, aborted by us ${nAborted}`);
  p("answers by kind:");
  for (const [k, n] of Object.entries(kinds).sort((a, b) => b[1] - a[1])) p(`  ${String(n).padStart(7)}  ${k}`);
  const keepalive = ledger.filter((e) => e.keepalives > 0).length;
  p(`  (${keepalive} streams got keep-alive comments before their answer)`);
  p(`upstream hops: ${[...hops.values()].reduce((s, h) => s + h.length, 0)}; by reply: ` +
    Object.entries(faultCounts).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join(", "));
  p(`429 storms: ${upReports.map((u) => `${u.name} ${u.storms} (${(u.stormMs / 1000).toFixed(0)} s)`).join(", ")}`);
  p(`events: ${ev.messages} messages; ${Object.entries(ev.kinds).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join(", ")}`);
  p(`request DB: ${rows.length} rows; ${rows.reduce((n, r) => n + r.hops, 0)} attempts sent; ` +
    `${hopDiff.length} rows whose attempts do not match the upstreams' hops`);
  p(`lost ${lost.length}, doubled ${doubled.length + evDoubled.length + rowsDoubled.length}, broken ${broken.length}, ` +
    `rows missing ${rowsMissing.length}, events missing ${evMissing.length + evOpen.length}, ` +
    `credentials found ${leaks.length}`);
  const every = Math.max(1, Math.round(15_000 / sampleMs));
  p(`sluice RSS (KiB) every ${(every * sampleMs) / 1000} s: ` +
    rss.filter((_, i) => i % every === 0).map((s) => `${Math.round(s[0] / 1000)}s:${s[1]}`).join(" ") +
    ` end:${rssEnd}`);
  // Growth per request over the last half, for a reader judging a slow rise the limit lets through.
  const lastHalf = ledger.filter((e) => e.sentAt - t0 >= (seconds * 1000) / 2).length;
  const perRequest = tail.length > 1 && lastHalf > 0 ? ((tail.at(-1)[1] - tail[0][1]) * 1024) / lastHalf : 0;
  p(`RSS base ${base[1]} KiB at ${(base[0] / 1000).toFixed(0)} s, max over the last half ${tailMax} KiB ` +
    `(limit ${limit}), slope over the last half ${slope.toFixed(0)} KiB/min, ${perRequest.toFixed(0)} bytes per request: ` +
    `${asan ? `not judged (ASan), ${rssFlat ? "flat" : "grew"}` : rssFlat ? "flat" : "GREW"}`);
  p(`sluice CPU ${(cpuEnd / 1000).toFixed(1)} s over the run (${((100 * cpuEnd) / loadMs).toFixed(0)}% of one core); exit code ${code}`);
  for (const f of fails) {
    p(`FAIL ${f.what}: ${f.n}`);
    for (const s of f.some) p(`    ${s.replace(/\n/g, "\\n").slice(0, 600)}`);
  }
  const pass = fails.length === 0;

  const keep = keepDir ?? (pass ? null : fs.mkdtempSync(path.join(os.tmpdir(), "sluice-soak-failed-")));
  if (keep) {
    fs.mkdirSync(keep, { recursive: true });
    fs.writeFileSync(path.join(keep, "sluice.log"), log);
    fs.writeFileSync(path.join(keep, "sluice.yaml"), fs.readFileSync(configPath));
    if (fs.existsSync(dbPath)) fs.copyFileSync(dbPath, path.join(keep, "sluice.db"));
    fs.writeFileSync(path.join(keep, "ledger.jsonl"), ledger.map((e) => jsonOf({ ...e, hops: hops.get(e.rid) ?? [],
      events: evByRid.get(e.rid) ?? [], rows: rowsByRid.get(e.rid) ?? [] })).join("\n") + "\n");
    fs.writeFileSync(path.join(keep, "rss.txt"), rss.map((s) => `${s[0]} ${s[1]}`).join("\n") + "\n");
    p(`kept in ${keep}: sluice.log, sluice.yaml, sluice.db, ledger.jsonl, rss.txt`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  clearTimeout(guard);
  p(pass ? "PASS" : "FAIL");
  process.exit(pass ? 0 : 1);
}

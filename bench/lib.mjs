// Helpers of bench/run: the processes it starts (the nginx mock upstream, the nginx proxy, Portkey,
// sluice), the load generators it drives (wrk, h2load, curl) and the parsing of what they print,
// /proc readings, statistics and table formatting. Every process started here is remembered and
// stopped by stopAll() (bench/run.mjs calls it on every way out; bench/run kills the process group
// as a last resort).
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repo = fileURLToPath(new URL("..", import.meta.url));
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const GATEWAY_KEY = "bench-gateway-key-0001";
export const CONTROL_KEY = "bench-control-key-0001";
export const CLK_TCK = 100; // getconf CLK_TCK on Linux x86-64

// ---- the request and the answers --------------------------------------------------------------

// The ~300-byte OpenAI Chat request every client posts (model picks the stream or the JSON answer).
export function requestBody(model, stream) {
  const body = {
    model,
    messages: [
      { role: "system", content: "You are a terse assistant. Answer in one word." },
      { role: "user", content: "Benchmark request: reply with the single word ok, nothing else, thank you." },
    ],
    max_tokens: 16,
    temperature: 0,
    user: "bench-client-0001",
    stream,
  };
  let text = JSON.stringify(body);
  // Pad the user message to exactly 300 bytes so every target gets the same bytes.
  const pad = 300 - Buffer.byteLength(text);
  if (pad > 0) {
    body.messages[1].content += " ".repeat(pad);
    text = JSON.stringify(body);
  }
  return text;
}

// The ~200-byte non-streamed answer the mock upstream returns (OpenAI Chat shape).
export const JSON_ANSWER = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  model: "bench-json",
  choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 42, completion_tokens: 1 },
});

// An OpenAI Chat stream of `events` data events (content in all but the last, which carries
// finish_reason), then `data: [DONE]`.
export function sseAnswer(events, model = "bench-sse") {
  let out = "";
  for (let i = 0; i < events; i++) {
    const last = i === events - 1;
    const delta = last ? {} : i === 0 ? { role: "assistant", content: "tok0 " } : { content: `tok${i} ` };
    const chunk = {
      id: "chatcmpl-bench-sse",
      object: "chat.completion.chunk",
      created: 1764460800,
      model,
      choices: [{ index: 0, delta, finish_reason: last ? "stop" : null }],
    };
    out += `data: ${JSON.stringify(chunk)}\n\n`;
  }
  return out + "data: [DONE]\n\n";
}

// Checks a received Chat stream: every data event parses, `events` of them, the last says stop, then [DONE].
export function checkSse(text, events) {
  const data = text.split("\n").filter((l) => l.startsWith("data: "));
  if (data.length !== events + 1) return `${data.length - 1} data events instead of ${events}`;
  if (data[data.length - 1] !== "data: [DONE]") return "no [DONE] at the end";
  let content = 0;
  for (const line of data.slice(0, -1)) {
    let chunk;
    try {
      chunk = JSON.parse(line.slice(6));
    } catch {
      return `an event is not JSON: ${line.slice(0, 80)}`;
    }
    if (chunk.choices?.[0]?.delta?.content) content++;
  }
  if (content !== events - 1) return `${content} content events instead of ${events - 1}`;
  return null;
}

// ---- ports and processes ----------------------------------------------------------------------

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function waitPort(port, ms, what, proc) {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, "127.0.0.1");
      s.once("connect", () => (s.destroy(), resolve(true)));
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    if (proc && proc.exited) throw new Error(`${what} exited at start (${proc.exitCode}):\n${proc.log().slice(-3000)}`);
    if (Date.now() > deadline) throw new Error(`${what} is not listening on ${port} after ${ms} ms:\n${proc ? proc.log().slice(-3000) : ""}`);
    await sleep(50);
  }
}

const running = new Set();

// Starts a long-lived process; returns {child, pid, log(), exited, exitCode, stop()}.
export function start(cmd, args, opts = {}) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
  let log = "";
  const keep = (d) => {
    log += d;
    if (log.length > 200_000) log = log.slice(-100_000);
  };
  child.stdout?.on("data", keep); // null with stdio "ignore"
  child.stderr?.on("data", keep);
  const p = {
    child,
    pid: child.pid,
    name: path.basename(cmd),
    exited: false,
    exitCode: null,
    log: () => log,
  };
  p.done = new Promise((resolve) => {
    child.once("exit", (code, signal) => {
      p.exited = true;
      p.exitCode = code ?? signal;
      running.delete(p);
      resolve(p.exitCode);
    });
    child.once("error", (e) => {
      log += `\n${e.message}\n`;
      p.exited = true;
      p.exitCode = e.code;
      running.delete(p);
      resolve(e.code);
    });
  });
  p.stop = async (signal = "SIGTERM", graceMs = 5000) => {
    if (!p.exited) {
      try {
        child.kill(signal);
      } catch {}
    }
    const t = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch {}
    }, graceMs);
    await p.done;
    clearTimeout(t);
    return p.exitCode;
  };
  running.add(p);
  return p;
}

export async function stopAll() {
  await Promise.all([...running].map((p) => p.stop()));
}

// Synchronous last resort for process.on("exit").
export function killAllSync() {
  for (const p of running) {
    try {
      p.child.kill("SIGKILL");
    } catch {}
  }
}

// Runs a command to its end (bounded by timeoutMs); resolves {code, out, err}.
// uid, gid: run as that user (PostgreSQL's tools refuse root).
export function run(cmd, args, { timeoutMs = 120_000, input, env, uid, gid } = {}) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"], env, uid, gid });
    let out = "",
      err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const t = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => (clearTimeout(t), resolve({ code: -1, out, err: err + e.message })));
    child.once("close", (code, signal) => (clearTimeout(t), resolve({ code: code ?? signal, out, err })));
    if (input !== undefined) child.stdin.end(input);
  });
}

export function which(cmd) {
  for (const dir of (process.env.PATH || "").split(":").concat(["/usr/sbin", "/sbin"])) {
    const f = path.join(dir, cmd);
    try {
      fs.accessSync(f, fs.constants.X_OK);
      return f;
    } catch {}
  }
  return null;
}

// ---- /proc --------------------------------------------------------------------------------------

// utime + stime of a process (all its threads) in clock ticks; 0 when it is gone.
export function cpuTicks(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
}

// Nanoseconds on a CPU per thread name of a process, threads of one kind summed ("sl-worker-0" and
// "sl-worker-1" count as "sl-worker"; a thread that ended is no longer counted): the first field of
// /proc/PID/task/TID/schedstat (the scheduler's exact run time; ticks are 10 ms, which at a few thousand
// requests a second is a large part of a microsecond per request). "" sums every thread.
export function threadCpuNs(pid) {
  const byName = { "": 0 };
  let tids = [];
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return byName;
  }
  for (const tid of tids) {
    try {
      const comm = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim().replace(/-\d+$/, "");
      const ns = Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
      byName[comm] = (byName[comm] ?? 0) + ns;
      byName[""] += ns;
    } catch {}
  }
  return byName;
}

export function children(pid) {
  try {
    return fs
      .readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8")
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

// CPU ticks of a process and its direct children (nginx: master + workers).
export function treeTicks(pid) {
  return cpuTicks(pid) + children(pid).reduce((s, c) => s + cpuTicks(c), 0);
}

export function rssKiB(pid) {
  try {
    return Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))[1]);
  } catch {
    return 0;
  }
}

export function treeRssKiB(pid) {
  return rssKiB(pid) + children(pid).reduce((s, c) => s + rssKiB(c), 0);
}

// ---- statistics and formatting -----------------------------------------------------------------

export function median(xs) {
  const s = xs.filter((x) => x !== null && x !== undefined && !Number.isNaN(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export function summary(xs) {
  const s = xs.filter((x) => x !== null && x !== undefined && !Number.isNaN(x));
  if (s.length === 0) return null;
  return { med: median(s), min: Math.min(...s), max: Math.max(...s), n: s.length };
}

// A number in a fixed style: 12345 -> "12 345", 1.234 -> "1.23", 0.0123 -> "0.0123".
export function num(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (digits === undefined) digits = Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : Math.abs(x) >= 1 ? 2 : 3;
  const s = x.toFixed(digits);
  const [int, frac] = s.split(".");
  const grouped = int.replace(/\B(?=(\d{3})+(?!\d))/g, " ");
  return frac ? `${grouped}.${frac}` : grouped;
}

// "median (min–max)" of a summary, or "median" alone for one sample.
export function cell(sm, digits) {
  if (!sm) return "–";
  if (sm.n === 1 || sm.min === sm.max) return num(sm.med, digits);
  return `${num(sm.med, digits)} (${num(sm.min, digits)}–${num(sm.max, digits)})`;
}

export function table(header, rows) {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => String(r[i] ?? "").length)));
  const line = (r) =>
    r.map((c, i) => (i === 0 ? String(c ?? "").padEnd(widths[i]) : String(c ?? "").padStart(widths[i]))).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

// ---- wrk, h2load, curl ------------------------------------------------------------------------

// wrk prints latencies as "812.00us", "1.23ms", "2.00s", "1.5m": microseconds.
function wrkTimeUs(s) {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(s.trim());
  if (!m) return null;
  const f = { us: 1, ms: 1e3, s: 1e6, m: 60e6, h: 3600e6 }[m[2]];
  return Number(m[1]) * f;
}

export function parseWrk(out) {
  const r = { requests: null, rps: null, p50: null, p99: null, non2xx: 0, socketErrors: 0 };
  let m;
  if ((m = /(\d+) requests in ([\d.]+)(\w+)/.exec(out))) r.requests = Number(m[1]);
  if ((m = /Requests\/sec:\s+([\d.]+)/.exec(out))) r.rps = Number(m[1]);
  if ((m = /^\s+50%\s+(\S+)/m.exec(out))) r.p50 = wrkTimeUs(m[1]);
  if ((m = /^\s+99%\s+(\S+)/m.exec(out))) r.p99 = wrkTimeUs(m[1]);
  if ((m = /Non-2xx or 3xx responses:\s+(\d+)/.exec(out))) r.non2xx = Number(m[1]);
  if ((m = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)))
    r.socketErrors = Number(m[1]) + Number(m[2]) + Number(m[3]) + Number(m[4]);
  return r;
}

// A wrk Lua script that posts `body` with `headers` ({name: value}).
export function wrkScript(file, body, headers) {
  const lua = [
    'wrk.method = "POST"',
    `wrk.body = [==[${body}]==]`,
    ...Object.entries(headers).map(([k, v]) => `wrk.headers["${k}"] = [==[${v}]==]`),
    "",
  ].join("\n");
  fs.writeFileSync(file, lua);
  return file;
}

// h2load --log-file rows: start time (µs since epoch), status, duration (µs).
export function parseH2loadLog(file) {
  const durations = [];
  let bad = 0,
    first = Infinity,
    last = 0;
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    const f = line.split("\t");
    if (f.length < 3) continue;
    const start = Number(f[0]),
      status = Number(f[1]),
      us = Number(f[2]);
    if (status !== 200) bad++;
    if (status === 200) durations.push(us);
    first = Math.min(first, start);
    last = Math.max(last, start);
  }
  durations.sort((a, b) => a - b);
  const seconds = (last - first) / 1e6;
  return {
    count: durations.length,
    bad,
    rate: seconds > 0 ? (durations.length + bad) / seconds : null,
    p50: percentile(durations, 50),
    p99: percentile(durations, 99),
  };
}

// An open-loop fixed rate with h2load over HTTP/1.1: `clients` connections, each posting bodyFile at
// rate / clients per second for `seconds`, one request in flight per connection. Returns the parsed
// --log-file (parseH2loadLog), or {failed} with what h2load said when it did not run.
export async function h2loadFixedRate({ url, headers, bodyFile, rate, seconds, log, clients = 10 }) {
  fs.rmSync(log, { force: true });
  const args = ["--h1", "-c", String(clients), "-t", "1", "-m", "1", "--rps", String(rate / clients),
                "-D", String(seconds), "-d", bodyFile, `--log-file=${log}`];
  for (const [k, v] of Object.entries(headers)) args.push("-H", `${k}: ${v}`);
  args.push(url);
  const r = await run("h2load", args, { timeoutMs: (seconds + 30) * 1000 });
  if (r.code !== 0 || !fs.existsSync(log)) return { failed: `exit ${r.code}: ${r.err.slice(-500) || r.out.slice(-500)}` };
  return parseH2loadLog(log);
}

// One curl POST; returns {status, ttfbUs, totalUs, body} with times counted from the moment the
// connection is up (time_pretransfer), so that curl's own start-up and the TCP connect are left out.
export async function curlPost(url, body, headers, { timeoutMs = 60_000, outFile } = {}) {
  const args = ["-sS", "--http1.1", "-X", "POST", "--data-binary", "@-", "-o", outFile ?? "/dev/null",
                "-w", "%{http_code} %{time_pretransfer} %{time_starttransfer} %{time_total}",
                "--max-time", String(Math.ceil(timeoutMs / 1000))];
  for (const [k, v] of Object.entries(headers)) args.push("-H", `${k}: ${v}`);
  args.push(url);
  const r = await run("curl", args, { input: body, timeoutMs: timeoutMs + 5000 });
  const [status, pre, start, total] = r.out.trim().split(" ").map(Number);
  return {
    status,
    ttfbUs: (start - pre) * 1e6,
    totalUs: (total - pre) * 1e6,
    error: r.code === 0 ? null : r.err.trim(),
    body: outFile ? fs.readFileSync(outFile, "utf8") : null,
  };
}

// n streams, one curl each (a new connection), every one checked whole (events data events and [DONE]);
// a bad one is told to problem(what) and left out. The medians: {ttfbUs, totalMs}.
export async function sseStreams({ url, body, headers, n, events, outFile, problem }) {
  const ttfb = [], total = [];
  for (let i = 0; i < n; i++) {
    const s = await curlPost(url, body, headers, { outFile });
    const why = s.status === 200 ? checkSse(s.body, events) : `status ${s.status} ${s.error ?? ""}`;
    if (why) {
      problem(`stream ${i}: ${why}`);
      continue;
    }
    ttfb.push(s.ttfbUs);
    total.push(s.totalUs);
  }
  return { ttfbUs: median(ttfb), totalMs: median(total) / 1000 };
}

export function gitCommit() {
  try {
    const head = execFileSync("git", ["-C", repo, "rev-parse", "--short=12", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["-C", repo, "status", "--porcelain", "--untracked-files=no"], { encoding: "utf8" }).trim();
    return dirty ? `${head} (+ uncommitted changes)` : head;
  } catch {
    return "unknown";
  }
}

// Issue 9's done-when, automated: `sluicectl events` shows a live retry and a queue as they
// happen while the Anthropic SDK streams through sluice, and `sluicectl limits set` changes
// what sluice admits right after it returns. Also: the failure cases a user meets first.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, beforeEach, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { CONTROL_KEY, GATEWAY_KEY, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
const ctlBin = process.env.SLUICECTL_BIN || fileURLToPath(new URL("../../build/control/sluicectl", import.meta.url));
const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
const RATE_LIMITED = { type: "error", error: { type: "rate_limit_error", message: "Rate limited" } };

let up, gw;

// Runs sluicectl to its end: {code, stdout, stderr}.
function ctl(args, env = { SLUICE_CONTROL_KEY: CONTROL_KEY }) {
  return new Promise((resolve) => {
    const child = spawn(ctlBin, ["--port", String(gw.controlPort), ...args], { env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

// A running `sluicectl events`: lines() so far, waitFor(re) until a line matches.
function tail(args) {
  const child = spawn(ctlBin, ["--port", String(gw.controlPort), "events", ...args], {
    env: { ...process.env, SLUICE_CONTROL_KEY: CONTROL_KEY },
  });
  let out = "";
  const waiters = [];
  child.stdout.on("data", (d) => {
    out += d;
    for (const w of waiters.splice(0)) w();
  });
  child.stderr.on("data", (d) => (out += d));
  return {
    lines: () => out.split("\n").filter(Boolean),
    async waitFor(re, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (!re.test(out)) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`sluicectl printed no line matching ${re}:\n${out}`);
        await new Promise((r) => {
          const t = setTimeout(r, left);
          waiters.push(() => {
            clearTimeout(t);
            r();
          });
        });
      }
    },
    stop() {
      child.kill("SIGINT");
      return new Promise((r) => child.once("exit", r));
    },
  };
}

function client() {
  return new Anthropic({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${gw.port}`, maxRetries: 0,
                         timeout: SDK_TIMEOUT_MS });
}

async function streamText(text) {
  const stream = client().messages.stream({ model: "claude-x", max_tokens: 64,
                                            messages: [{ role: "user", content: text }] });
  let out = "";
  stream.on("text", (d) => (out += d));
  await stream.finalMessage();
  return out;
}

describe("sluicectl against a running sluice", () => {
  before(async () => {
    up = await startFake();
  });
  after(async () => {
    await gw?.stop();
    await up?.close();
  });
  beforeEach(() => up.reset());

  test("events: a live retry and a queue while the SDK streams", T, async () => {
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], { waitSecs: 30 });
    } finally {
      delete process.env.SLUICE_TEST_TIME_SCALE;
    }
    const events = tail(["--providers"]);
    await events.waitFor(/only/); // the snapshot's provider line: subscribed
    up.push(jsonReply(529, OVERLOADED), sseReply("anthropic-ok.sse"));
    assert.equal(await streamText("retried"), "Hello from the fake upstream");
    await events.waitFor(/request_retrying id=\d+/);
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after-ms": "20000" }), sseReply("anthropic-ok.sse"));
    assert.equal(await streamText("queued"), "Hello from the fake upstream");
    await events.waitFor(/request_dequeued/);
    const lines = events.lines();
    const at = (re) => lines.findIndex((l) => re.test(l));
    assert.ok(at(/throttle_changed provider=only kind=paused/) >= 0, lines.join("\n"));
    assert.ok(at(/request_queued .*only:throttled/) > at(/throttle_changed provider=only kind=paused/), lines.join("\n"));
    assert.ok(at(/request_retrying/) < at(/request_queued/));
    assert.ok(lines.every((l) => !l.includes(CONTROL_KEY) && !l.includes("upstream-key-only")), "no secret printed");
    await events.stop();
    await gw.stop();
  });

  test("limits set: what sluice admits changes as soon as the command returns", T, async () => {
    gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], { waitSecs: 0 });
    const set = await ctl(["limits", "set", "only", "--per", "minute", "--requests", "1"]);
    assert.equal(set.code, 0, set.stderr);
    up.push(sseReply("anthropic-ok.sse"), sseReply("anthropic-ok.sse"));
    assert.equal(await streamText("first"), "Hello from the fake upstream");
    await assert.rejects(streamText("second"),
                         (e) => e.status === 429 && e.headers.get("x-sluice-error") === "gw.wait.window_full");
    assert.equal(up.requests.length, 1, "the second never reached the upstream");
    const providers = await ctl(["providers"]);
    assert.match(providers.stdout, /1\/1 requests per minute/);
    const cleared = await ctl(["limits", "clear", "only"]);
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.equal(await streamText("third"), "Hello from the fake upstream");
  });

  test("the failures a user meets: wrong key, unknown provider, bad limit, nothing listening", T, async () => {
    const wrong = await ctl(["providers"], { SLUICE_CONTROL_KEY: "wrong" });
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /control\.auth\.rejected/);
    const unknown = await ctl(["pause", "nope"]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr + unknown.stdout, /control\.unknown_provider/);
    const bad = await ctl(["limits", "set", "only", "--per", "minute", "--requests", "1", "--tokens", "5"]);
    assert.equal(bad.code, 2);
    const port = gw.controlPort;
    await gw.stop();
    const down = await new Promise((resolve) => {
      const child = spawn(ctlBin, ["--port", String(port), "providers"], { env: { ...process.env, SLUICE_CONTROL_KEY: CONTROL_KEY } });
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      child.once("exit", (code) => resolve({ code, stderr }));
    });
    assert.equal(down.code, 2);
    assert.match(down.stderr, /cannot connect|connect/);
  });
});

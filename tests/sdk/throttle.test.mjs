// Issue 6's promise with the official Anthropic SDK: an upstream that answers
// 429 with `retry-after-ms: 1500` once is paused by sluice for those 1.5 s and
// the request resent, so a streaming SDK with maxRetries 0 gets its whole
// message, only later. Real time here (no SLUICE_TEST_TIME_SCALE): the wait is
// the point. When the pause cannot end before the request's deadline, the SDK
// gets a 429 at once with the headers it reads to retry by itself.
import assert from "node:assert/strict";
import { after, beforeEach, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { GATEWAY_KEY, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
const RATE_LIMITED = { type: "error", error: { type: "rate_limit_error", message: "Rate limited" } };
let up, gw;

function client() {
  return new Anthropic({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${gw.port}`, maxRetries: 0,
                         timeout: SDK_TIMEOUT_MS });
}

function params(text) {
  return { model: "claude-x", max_tokens: 64, messages: [{ role: "user", content: text }] };
}

async function gateway(waitSecs) {
  await gw?.stop();
  gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], { waitSecs });
}

describe("Anthropic SDK: a 429 becomes a slower first token", () => {
  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  beforeEach(async () => {
    up ??= await startFake();
    up.reset();
  });

  test("429 retry-after-ms 1500 once: the whole streamed message after about 1.5 s", T, async () => {
    await gateway(30);
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after-ms": "1500" }));
    up.push(sseReply("anthropic-ok.sse"));
    const started = Date.now();
    const stream = client().messages.stream(params("paused once"));
    let text = "";
    stream.on("text", (d) => (text += d));
    const message = await stream.finalMessage();
    const elapsed = Date.now() - started;
    assert.equal(text, "Hello from the fake upstream");
    assert.equal(message.stop_reason, "end_turn");
    assert.equal(up.requests.length, 2, "one 429, then the resend");
    const pause = up.requests[1].at - up.requests[0].at;
    assert.ok(pause >= 1450 && pause < 3000, `resent ${pause} ms after the 429`);
    assert.ok(elapsed >= 1450 && elapsed < 4000, `message after ${elapsed} ms`);
  });

  test("a pause longer than the deadline: a 429 at once with retry-after, retry-after-ms, x-should-retry", T,
       async () => {
    await gateway(2);
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after-ms": "8000" }));
    const started = Date.now();
    await assert.rejects(client().messages.stream(params("too long")).finalMessage(), (e) => {
      assert.ok(e instanceof Anthropic.RateLimitError, `got ${e?.constructor?.name}: ${e?.message}`);
      assert.equal(e.status, 429);
      assert.equal(e.headers.get("x-should-retry"), "true");
      const ms = Number(e.headers.get("retry-after-ms"));
      assert.ok(ms > 6000 && ms <= 8000, `retry-after-ms ${ms}`);
      assert.equal(e.headers.get("retry-after"), String(Math.ceil(ms / 1000)));
      assert.equal(e.error?.error?.type, "rate_limit_error");
      return true;
    });
    assert.ok(Date.now() - started < 1500, "answered without waiting out the deadline");
    assert.equal(up.requests.length, 1, "nothing was resent into the pause");

    // The upstream stays paused: the next request is answered locally, not sent.
    await assert.rejects(client().messages.create(params("still paused")), (e) => e.status === 429);
    assert.equal(up.requests.length, 1);
  });
});

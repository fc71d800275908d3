// Issue 5's promise with the official Anthropic SDK: an upstream that first
// answers 200 and then `event: error` overloaded_error, with no other
// upstream to fail over to, still gives the SDK the whole message — sluice
// retries it. maxRetries is 0, so the SDK itself never retries. sluice's waits
// are scaled down (SLUICE_TEST_TIME_SCALE) to keep the test fast.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { GATEWAY_KEY, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let up, gw, turn = 0;

function client() {
  return new Anthropic({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${gw.port}`, maxRetries: 0,
                         timeout: SDK_TIMEOUT_MS });
}

function params() {
  return { model: "claude-x", max_tokens: 64, messages: [{ role: "user", content: `retry ${++turn}` }] };
}

describe("Anthropic SDK: sluice retries a single overloaded upstream", () => {
  before(async () => {
    up = await startFake();
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], { waitSecs: 120 });
    } finally {
      delete process.env.SLUICE_TEST_TIME_SCALE;
    }
  });

  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  beforeEach(() => up.reset());

  test("an overload inside the stream before content: the stream completes whole", T, async () => {
    up.push(sseReply("anthropic-overloaded-before-content.sse"));
    up.push(sseReply("anthropic-ok.sse"));
    const stream = client().messages.stream(params());
    let text = "";
    stream.on("text", (d) => (text += d));
    const message = await stream.finalMessage();
    assert.equal(text, "Hello from the fake upstream");
    assert.equal(message.stop_reason, "end_turn");
    assert.equal(up.requests.length, 2, "sluice sent the request twice");
  });

  test("a 529 twice, then the answer: the SDK gets the answer", T, async () => {
    const overloaded = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
    up.push(jsonReply(529, overloaded));
    up.push(jsonReply(529, overloaded));
    up.push(sseReply("anthropic-ok.sse"));
    const message = await client().messages.stream(params()).finalMessage();
    assert.equal(message.content[0].text, "Hello from the fake upstream");
    assert.equal(up.requests.length, 3);
  });

  test("when no retry is left, the SDK gets the upstream's error and is told not to retry", T, async () => {
    const overloaded = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
    for (let i = 0; i < 50; i++) up.push(jsonReply(529, overloaded, { "retry-after-ms": "40000" }));
    await assert.rejects(client().messages.create(params()), (e) => {
      assert.equal(e.status, 529);
      assert.equal(e.headers.get("x-should-retry"), "false");
      return true;
    });
  });
});

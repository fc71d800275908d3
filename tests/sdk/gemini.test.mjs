// Issue 8's Gemini half with the official @google/genai SDK: streams and
// whole answers go through sluice unchanged (the client's gateway key is
// swapped for the upstream's, the model name mapped in the path), an
// UNAVAILABLE inside the stream before content is retried invisibly, and a
// 429 RESOURCE_EXHAUSTED with a retryDelay pauses the upstream for that long.
// The SDK never retries on its own here (retries off); sluice's waits are
// scaled down (SLUICE_TEST_TIME_SCALE).
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import { GENAI_API_VERSION, GENAI_VERSION, GoogleGenAI } from "./sdks.mjs";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { GATEWAY_KEY, OVERSIZED_TEXT, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let up, gw;

function client(apiKey = GATEWAY_KEY, apiVersion = undefined) {
  return new GoogleGenAI({
    apiKey,
    httpOptions: {
      baseUrl: `http://127.0.0.1:${gw.port}`, timeout: SDK_TIMEOUT_MS, retryOptions: { attempts: 1 }, apiVersion,
    },
  });
}

const contents = [{ role: "user", parts: [{ text: "hi" }] }];
const WHOLE = {
  candidates: [{ content: { role: "model", parts: [{ text: "Hello whole" }] }, finishReason: "STOP", index: 0 }],
  usageMetadata: { promptTokenCount: 7, candidatesTokenCount: 3, totalTokenCount: 10 },
  modelVersion: "gemini-fake",
};

async function streamText(model = "gemini-x") {
  let text = "";
  for await (const chunk of await client().models.generateContentStream({ model, contents }))
    text += chunk.text ?? "";
  return text;
}

describe(`${GENAI_VERSION} through sluice`, () => {
  before(async () => {
    up = await startFake();
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      gw = await startGateway(
        [{ name: "gem", protocol: "gemini", port: up.port, fields: ', model_map: {"gemini-x": "gemini-2.5-flash"}' }],
        { waitSecs: 120 });
    } finally {
      delete process.env.SLUICE_TEST_TIME_SCALE;
    }
  });

  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  beforeEach(() => up.reset());

  test("a stream arrives whole; the upstream gets its own key and model", T, async () => {
    up.push(sseReply("gemini-ok.sse"));
    assert.equal(await streamText(), "Hello from the fake upstream");
    assert.equal(up.requests.length, 1);
    const sent = up.requests[0];
    assert.equal(sent.url, `/${GENAI_API_VERSION}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`,
      "the hop keeps the SDK's API version");
    assert.notEqual(sent.headers["x-goog-api-key"], GATEWAY_KEY, "the gateway key never goes upstream");
    assert.deepEqual(JSON.parse(sent.body).contents, contents);
  });

  test("a whole answer and countTokens", T, async () => {
    up.push(jsonReply(200, WHOLE));
    const answer = await client().models.generateContent({ model: "gemini-x", contents });
    assert.equal(answer.text, "Hello whole");
    assert.equal(answer.usageMetadata.totalTokenCount, 10);
    up.push(jsonReply(200, { totalTokens: 4 }));
    const counted = await client().models.countTokens({ model: "gemini-x", contents });
    assert.equal(counted.totalTokens, 4);
    assert.equal(up.requests[1].url, `/${GENAI_API_VERSION}/models/gemini-2.5-flash:countTokens`);
  });

  test("every API version the SDK can be set to goes through with its own path", T, async () => {
    for (const apiVersion of ["v1", "v1beta", "v1alpha"]) {
      up.reset();
      up.push(jsonReply(200, WHOLE));
      const answer = await client(GATEWAY_KEY, apiVersion).models.generateContent({ model: "gemini-x", contents });
      assert.equal(answer.text, "Hello whole", apiVersion);
      assert.equal(up.requests[0].url, `/${apiVersion}/models/gemini-2.5-flash:generateContent`);
    }
  });

  test("UNAVAILABLE inside the stream before content is retried invisibly", T, async () => {
    up.push(sseReply("gemini-unavailable.sse"));
    up.push(sseReply("gemini-ok.sse"));
    assert.equal(await streamText(), "Hello from the fake upstream");
    assert.equal(up.requests.length, 2, "sluice sent it again");
  });

  test("a 503 UNAVAILABLE status is retried too", T, async () => {
    up.push(jsonReply(503, { error: { code: 503, message: "overloaded", status: "UNAVAILABLE" } }));
    up.push(jsonReply(200, WHOLE));
    const answer = await client().models.generateContent({ model: "gemini-x", contents });
    assert.equal(answer.text, "Hello whole");
    assert.equal(up.requests.length, 2);
  });

  test("429 RESOURCE_EXHAUSTED: the upstream pauses for its retryDelay, then the stream goes through", T, async () => {
    up.push(jsonReply(429, {
      error: {
        code: 429, message: "Resource has been exhausted", status: "RESOURCE_EXHAUSTED",
        details: [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "30s" }],
      },
    }));
    up.push(sseReply("gemini-ok.sse"));
    assert.equal(await streamText(), "Hello from the fake upstream");
    assert.equal(up.requests.length, 2);
    const gap = up.requests[1].at - up.requests[0].at;
    assert.ok(gap >= 300, `resent after the 30 s hint (300 ms scaled), not before: ${gap} ms`);
  });

  test("a 40 MiB body gets a 413 in Gemini's error shape, streamed or whole", T, async () => {
    const big = [{ role: "user", parts: [{ text: OVERSIZED_TEXT }] }];
    for (const call of [
      (c) => c.models.generateContent({ model: "gemini-x", contents: big }),
      async (c) => {
        for await (const chunk of await c.models.generateContentStream({ model: "gemini-x", contents: big })) void chunk;
      },
    ]) {
      await assert.rejects(call(client()), (e) => {
        assert.equal(e.status, 413, String(e));
        assert.match(e.message, /the request body has more than 33554432 bytes/);
        assert.match(e.message, /INVALID_ARGUMENT|gw\.request\.too_large/);
        return true;
      });
    }
    assert.equal(up.requests.length, 0);
  });

  test("an unknown gateway key is refused in Gemini's own error shape", T, async () => {
    await assert.rejects(client("not-a-key").models.generateContent({ model: "gemini-x", contents }), (e) => {
      assert.equal(e.status, 401);
      assert.match(e.message, /gateway key is not known/);
      return true;
    });
    assert.equal(up.requests.length, 0);
  });
});

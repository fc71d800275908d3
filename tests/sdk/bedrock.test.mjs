// Issue 8's Bedrock half with the official @aws-sdk/client-bedrock-runtime
// (its HTTP/1.1 handler): ConverseStream and Converse go through sluice
// unchanged, the client authenticates with its gateway key as a Bedrock API
// key (Bearer), sluice signs upstream with SigV4, and a
// serviceUnavailableException before content is retried invisibly. The SDK
// itself never retries here (maxAttempts 1); sluice's waits are scaled down.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from "@aws-sdk/client-bedrock-runtime";
import { NodeHttpHandler } from "@smithy/node-http-handler";

import { jsonReply, startFake } from "./fake_upstream.mjs";
import { fixture, GATEWAY_KEY, OVERSIZED_TEXT, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
const MODEL = "anthropic.claude-x";
let up, gw;

function client(token = GATEWAY_KEY) {
  return new BedrockRuntimeClient({
    region: "us-east-1",
    endpoint: `http://127.0.0.1:${gw.port}`,
    token: { token },
    authSchemePreference: ["httpBearerAuth"],
    maxAttempts: 1,
    requestHandler: new NodeHttpHandler({ requestTimeout: SDK_TIMEOUT_MS }),
  });
}

// A 200 eventstream reply from a fixture, sent whole (its frames are binary: no SSE splitting).
function framesReply(name) {
  return { status: 200, headers: { "content-type": "application/vnd.amazon.eventstream" }, body: fixture(name),
           chunked: false };
}

const messages = [{ role: "user", content: [{ text: "hi" }] }];

async function streamText() {
  const out = await client().send(new ConverseStreamCommand({ modelId: MODEL, messages }));
  let text = "", usage = null;
  for await (const event of out.stream) {
    if (event.contentBlockDelta) text += event.contentBlockDelta.delta?.text ?? "";
    if (event.metadata) usage = event.metadata.usage;
  }
  return { text, usage };
}

describe("@aws-sdk/client-bedrock-runtime through sluice", () => {
  before(async () => {
    up = await startFake();
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      gw = await startGateway(
        [{ name: "br", protocol: "bedrock", port: up.port, key: null,
           fields: ", region: us-east-1, aws: {access_key_id: AKIDEXAMPLE, secret_access_key: sluice-test-secret}" }],
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

  test("ConverseStream arrives whole; upstream the request is SigV4-signed, not the client's key", T, async () => {
    up.push(framesReply("bedrock-ok.eventstream"));
    const { text, usage } = await streamText();
    assert.equal(text, "Hello from the fake");
    assert.deepEqual([usage.inputTokens, usage.outputTokens], [10, 4], "usage from the metadata event");
    assert.equal(up.requests.length, 1);
    const sent = up.requests[0];
    assert.equal(sent.url, `/model/${MODEL}/converse-stream`);
    assert.match(sent.headers.authorization, /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/us-east-1\/bedrock\//);
    assert.ok(sent.headers["x-amz-date"], "x-amz-date is sent");
    assert.deepEqual(JSON.parse(sent.body).messages, messages);
  });

  test("serviceUnavailableException before content is retried invisibly", T, async () => {
    up.push(framesReply("bedrock-service-unavailable.eventstream"));
    up.push(framesReply("bedrock-ok.eventstream"));
    const { text } = await streamText();
    assert.equal(text, "Hello from the fake", "the same text as a stream that never failed");
    assert.equal(up.requests.length, 2, "sluice sent it again");
  });

  test("Converse (a whole answer) passes through", T, async () => {
    up.push(jsonReply(200, {
      output: { message: { role: "assistant", content: [{ text: "Hello whole" }] } },
      stopReason: "end_turn", usage: { inputTokens: 7, outputTokens: 3, totalTokens: 10 }, metrics: { latencyMs: 5 },
    }));
    const out = await client().send(new ConverseCommand({ modelId: MODEL, messages }));
    assert.equal(out.output.message.content[0].text, "Hello whole");
    assert.equal(out.usage.totalTokens, 10);
  });

  test("a throttlingException status is a rate limit: paused, then sent again", T, async () => {
    up.push(jsonReply(429, { message: "Too many requests" }, { "x-amzn-errortype": "ThrottlingException:http://internal" }));
    up.push(framesReply("bedrock-ok.eventstream"));
    const { text } = await streamText();
    assert.equal(text, "Hello from the fake");
    assert.equal(up.requests.length, 2);
    assert.ok(up.requests[1].at - up.requests[0].at >= 50, "after the 5 s pause (scaled)");
  });

  test("a stream cut after content ends with an exception frame the SDK raises", T, async () => {
    // The first three frames (messageStart, contentBlockDelta…), then the connection drops.
    const body = fixture("bedrock-ok.eventstream");
    let cut = 0;
    for (let i = 0; i < 3; i++) cut += body.readUInt32BE(cut);
    up.push({ ...framesReply("bedrock-ok.eventstream"), cutAfter: cut });
    const out = await client().send(new ConverseStreamCommand({ modelId: MODEL, messages }));
    let text = "";
    await assert.rejects(
      (async () => {
        for await (const event of out.stream) text += event.contentBlockDelta?.delta?.text ?? "";
      })(),
      (e) => {
        assert.match(e.name, /Exception$/, `a typed exception, not a parse error: ${e.name}`);
        assert.match(e.message, /broke after content/);
        return true;
      });
    assert.ok(text.length > 0, "the content before the break arrived first");
    assert.equal(up.requests.length, 1, "after content nothing is retried");
  });

  test("a 40 MiB body is refused as a ValidationException with status 413", T, async () => {
    const big = [{ role: "user", content: [{ text: OVERSIZED_TEXT }] }];
    await assert.rejects(client().send(new ConverseCommand({ modelId: MODEL, messages: big })), (e) => {
      assert.equal(e.name, "ValidationException", String(e));
      assert.equal(e.$metadata.httpStatusCode, 413);
      assert.match(e.message, /^sluice: the request body has more than 33554432 bytes/);
      return true;
    });
    assert.equal(up.requests.length, 0);
  });

  test("an unknown gateway key is refused as an AccessDeniedException", T, async () => {
    await assert.rejects(client("not-a-key").send(new ConverseCommand({ modelId: MODEL, messages })), (e) => {
      assert.equal(e.name, "AccessDeniedException");
      assert.equal(e.$metadata.httpStatusCode, 401);
      return true;
    });
    assert.equal(up.requests.length, 0);
  });
});

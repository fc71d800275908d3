// The official Anthropic SDK against the real sluice, with two fake Anthropic
// upstreams in failover order. maxRetries is 0 everywhere, so an answer after an
// upstream failure proves that sluice failed over, not the SDK.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { fixtureText, GATEWAY_KEY, OVERSIZED_TEXT, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const FIXTURE_TEXT = "Hello from the fake upstream";

// sluice keeps a conversation on the upstream that served it (sticky affinity,
// named by key + first user message), so every request opens a new one.
let conversation = 0;
function params() {
  return { model: "claude-x", max_tokens: 64, messages: [{ role: "user", content: `hi ${++conversation}` }] };
}

const WHOLE_ANSWER = {
  id: "msg_fake_whole",
  type: "message",
  role: "assistant",
  model: "claude-x",
  content: [{ type: "text", text: FIXTURE_TEXT }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 5 },
};
const T = { timeout: TEST_TIMEOUT_MS };

let up1, up2, gw;

function client(apiKey = GATEWAY_KEY) {
  return new Anthropic({
    apiKey,
    baseURL: `http://127.0.0.1:${gw.port}`,
    maxRetries: 0,
    timeout: SDK_TIMEOUT_MS,
  });
}

// Assertion messages carry the gateway's log, which is what a failure needs.
function why(what) {
  return `${what}\n--- sluice log ---\n${gw.log().slice(-4000)}`;
}

async function streamText(stream) {
  let text = "";
  stream.on("text", (delta) => (text += delta));
  const message = await stream.finalMessage();
  return { text, message };
}

describe("Anthropic SDK through sluice", () => {
  before(async () => {
    up1 = await startFake();
    up2 = await startFake();
    gw = await startGateway([
      { name: "up1", protocol: "anthropic", port: up1.port },
      { name: "up2", protocol: "anthropic", port: up2.port },
    ]);
  });

  after(async () => {
    await gw?.stop();
    await up1?.close();
    await up2?.close();
  });

  beforeEach(() => {
    up1.reset();
    up2.reset();
  });

  test("the fixture's text is the one the tests expect", () => {
    assert.equal(fixtureText("anthropic-ok.sse", (e) => e.delta?.text), FIXTURE_TEXT);
  });

  test("a whole answer reaches messages.create unchanged", T, async () => {
    up1.push(jsonReply(200, WHOLE_ANSWER));
    const sent = params();
    const message = await client().messages.create(sent);
    assert.deepEqual(message, WHOLE_ANSWER, why("the SDK's message"));
    assert.equal(up1.requests.length, 1);
    const seen = up1.requests[0];
    assert.equal(seen.url, "/v1/messages");
    assert.deepEqual(JSON.parse(seen.body), sent, "the body reaches the upstream unchanged");
    assert.equal(seen.headers["x-api-key"], "upstream-key-up1", "the upstream gets its own key");
    assert.ok(!JSON.stringify(seen.headers).includes(GATEWAY_KEY), "the gateway key never goes upstream");
    const version = seen.headers["anthropic-version"] ?? "";
    assert.match(version, /^\d{4}-\d{2}-\d{2}$/, "the SDK's anthropic-version passes through");
    assert.equal(up2.requests.length, 0);
  });

  test("messages.stream yields the fixture's text and the final usage", T, async () => {
    up1.push(sseReply("anthropic-ok.sse"));
    const { text, message } = await streamText(client().messages.stream(params()));
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    assert.equal(message.id, "msg_fake_1");
    assert.equal(message.stop_reason, "end_turn");
    assert.equal(message.content[0].text, FIXTURE_TEXT);
    assert.equal(message.usage.input_tokens, 10);
    assert.equal(message.usage.output_tokens, 5);
    assert.equal(JSON.parse(up1.requests[0].body).stream, true);
  });

  test("create({stream: true}) yields every event through message_stop", T, async () => {
    up1.push(sseReply("anthropic-ok.sse"));
    const stream = await client().messages.create({ ...params(), stream: true });
    const types = [];
    let text = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "content_block_delta") text += event.delta.text;
    }
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    assert.deepEqual(types, [
      "message_start",
      "content_block_start",
      ...Array(5).fill("content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
  });

  const overloaded = {
    type: "error",
    error: { type: "overloaded_error", message: "fake upstream is down" },
  };
  const failovers = [
    ["a 503", jsonReply(503, overloaded)],
    ["an overload inside the stream before content", sseReply("anthropic-overloaded-before-content.sse")],
    ["a stream that ends after its opening events", sseReply("anthropic-opening-only.sse")],
  ];
  for (const [name, first] of failovers) {
    test(`failover after ${name} is invisible to messages.stream`, T, async () => {
      up1.push(first);
      up2.push(sseReply("anthropic-ok.sse"));
      const { text, message } = await streamText(client().messages.stream(params()));
      assert.equal(text, FIXTURE_TEXT, why("streamed text"));
      assert.equal(message.id, "msg_fake_1", "the message is the second upstream's");
      assert.equal(message.usage.output_tokens, 5);
      assert.equal(up1.requests.length, 1, "the first upstream was tried");
      assert.equal(up2.requests.length, 1, "the second upstream answered");
    });
  }

  test("failover after a 503 is invisible to a non-streamed create", T, async () => {
    up1.push(jsonReply(503, overloaded));
    up2.push(jsonReply(200, WHOLE_ANSWER));
    const message = await client().messages.create(params());
    assert.deepEqual(message, WHOLE_ANSWER, why("the SDK's message"));
    assert.equal(up1.requests.length, 1);
    assert.equal(up2.requests.length, 1);
  });

  test("an unknown gateway key raises AuthenticationError with the gateway's code", T, async () => {
    const err = await client("gw-not-a-key").messages.create(params()).then(
      () => assert.fail("the request succeeded"),
      (e) => e,
    );
    assert.ok(err instanceof Anthropic.AuthenticationError, why(`got ${err}`));
    assert.equal(err.status, 401);
    assert.equal(err.error.type, "error");
    assert.equal(err.error.error.type, "authentication_error");
    assert.equal(err.error.error.code, "gw.auth.unknown_key");
    assert.match(err.error.error.message, /^sluice: /);
    assert.equal(err.headers.get("x-sluice-error"), "gw.auth.unknown_key");
    assert.equal(up1.requests.length + up2.requests.length, 0, "nothing reached an upstream");
  });

  test("an upstream's request error raises BadRequestError with its message unchanged", T, async () => {
    const body = {
      type: "error",
      error: { type: "invalid_request_error", message: "messages.0.content: fake upstream says no" },
    };
    up1.push(jsonReply(400, body, { "request-id": "req_fake_400" }));
    const err = await client().messages.create(params()).then(
      () => assert.fail("the request succeeded"),
      (e) => e,
    );
    assert.ok(err instanceof Anthropic.BadRequestError, why(`got ${err}`));
    assert.equal(err.status, 400);
    assert.deepEqual(err.error, body, "the upstream's body, unchanged");
    assert.match(err.message, /messages\.0\.content: fake upstream says no/);
    assert.equal(err.requestID, "req_fake_400", "the upstream's own headers come along");
    assert.equal(up2.requests.length, 0, "a request error is not failed over");
  });

  test("a stream cut after content raises an error in the SDK, not a clean end", T, async () => {
    const ok = sseReply("anthropic-ok.sse");
    const cutAfter = ok.body.indexOf('" fake"') + 10;
    up1.push({ ...ok, cutAfter });
    up2.push(sseReply("anthropic-ok.sse"));
    const stream = await client().messages.create({ ...params(), stream: true });
    let text = "";
    const err = await (async () => {
      for await (const event of stream) {
        if (event.type === "content_block_delta") text += event.delta.text;
      }
    })().then(
      () => assert.fail(why(`the stream ended cleanly after "${text}"`)),
      (e) => e,
    );
    assert.ok(err instanceof Anthropic.APIError, why(`got ${err}`));
    assert.equal(text, "Hello from the", "the content before the cut reached the client");
    assert.equal(err.error?.error?.code, "gw.upstream.broken_after_content", why(JSON.stringify(err.error)));
    assert.match(err.message, /sluice: /, "the gateway's message is in the error");
    assert.equal(up2.requests.length, 0, "nothing after content is failed over");
  });

  test("a stream cut after content makes messages.stream's finalMessage reject", T, async () => {
    const ok = sseReply("anthropic-ok.sse");
    up1.push({ ...ok, cutAfter: ok.body.indexOf('" fake"') + 10 });
    const stream = client().messages.stream(params());
    stream.on("error", () => {});
    await assert.rejects(stream.finalMessage(), (e) => {
      assert.ok(e instanceof Anthropic.APIError, why(`got ${e}`));
      assert.match(e.message, /sluice: /);
      return true;
    });
  });

  test("a 40 MiB body gets the 413 request_too_large error with its code, read in full", T, async () => {
    const err = await client().messages.create({ ...params(), messages: [{ role: "user", content: OVERSIZED_TEXT }] })
      .then(() => assert.fail("the request succeeded"), (e) => e);
    assert.ok(err instanceof Anthropic.APIError, why(`got ${err}`));
    assert.equal(err.status, 413, why(String(err)));
    assert.equal(err.error?.error?.type, "request_too_large");
    assert.equal(err.error?.error?.code, "gw.request.too_large");
    assert.match(err.error?.error?.message, /^sluice: the request body has more than 33554432 bytes/);
    assert.equal(err.headers.get("x-sluice-error"), "gw.request.too_large");
    assert.equal(up1.requests.length + up2.requests.length, 0, "nothing reached an upstream");
  });

  // Last, so that a crash or a sanitizer report under this traffic fails a test.
  test("sluice exits cleanly on SIGTERM", T, async () => {
    assert.equal(await gw.stop(), 0, why("sluice's exit code"));
  });
});

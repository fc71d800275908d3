// The official OpenAI SDK against the real sluice: two fake Chat upstreams and
// two fake Responses upstreams, each pair in failover order (a provider of the
// other protocol is skipped as not offered). maxRetries is 0 everywhere, so an
// answer after an upstream failure proves that sluice failed over, not the SDK.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import { OPENAI_VERSION, OpenAI } from "./sdks.mjs";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { fixtureText, GATEWAY_KEY, OVERSIZED_TEXT, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const FIXTURE_TEXT = "Hello from the fake upstream";
const WHOLE_CHAT = {
  id: "chatcmpl-whole",
  object: "chat.completion",
  created: 1795969439,
  model: "gpt-x",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: FIXTURE_TEXT, refusal: null },
      logprobs: null,
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
};
const T = { timeout: TEST_TIMEOUT_MS };

let chat1, chat2, resp1, resp2, gw;

// sluice keeps a conversation on the upstream that served it (sticky affinity,
// named by key + first user message), so every request opens a new one.
let conversation = 0;
function chatParams(over = {}) {
  return { model: "gpt-x", messages: [{ role: "user", content: `hi ${++conversation}` }], ...over };
}
function responsesParams(over = {}) {
  return { model: "gpt-x", input: `hi ${++conversation}`, ...over };
}

function client(apiKey = GATEWAY_KEY) {
  return new OpenAI({
    apiKey,
    baseURL: `http://127.0.0.1:${gw.port}/v1`,
    maxRetries: 0,
    timeout: SDK_TIMEOUT_MS,
  });
}

// Assertion messages carry the gateway's log, which is what a failure needs.
function why(what) {
  return `${what}\n--- sluice log ---\n${gw.log().slice(-4000)}`;
}

async function chatStreamText(stream) {
  let text = "";
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  return { text, chunks };
}

async function responsesEvents(stream) {
  let text = "";
  const events = [];
  for await (const event of stream) {
    events.push(event);
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  return { text, events };
}

function cutAfterContent(name) {
  const ok = sseReply(name);
  return { ...ok, cutAfter: ok.body.indexOf('" fake"') + 10 };
}

describe(`${OPENAI_VERSION} through sluice`, () => {
  before(async () => {
    [chat1, chat2, resp1, resp2] = await Promise.all([startFake(), startFake(), startFake(), startFake()]);
    gw = await startGateway([
      { name: "chat1", protocol: "openai-chat", port: chat1.port, path: "/v1" },
      { name: "chat2", protocol: "openai-chat", port: chat2.port, path: "/v1" },
      { name: "resp1", protocol: "openai-responses", port: resp1.port, path: "/v1" },
      { name: "resp2", protocol: "openai-responses", port: resp2.port, path: "/v1" },
    ]);
  });

  after(async () => {
    await gw?.stop();
    await Promise.all([chat1, chat2, resp1, resp2].map((f) => f?.close()));
  });

  beforeEach(() => {
    for (const f of [chat1, chat2, resp1, resp2]) f.reset();
  });

  test("the fixtures' text is the one the tests expect", () => {
    assert.equal(fixtureText("chat-ok.sse", (c) => c.choices[0]?.delta?.content), FIXTURE_TEXT);
    assert.equal(
      fixtureText("responses-ok.sse", (e) => (e.type === "response.output_text.delta" ? e.delta : "")),
      FIXTURE_TEXT,
    );
  });

  test("a whole chat completion reaches chat.completions.create unchanged", T, async () => {
    chat1.push(jsonReply(200, WHOLE_CHAT));
    const sent = chatParams();
    const completion = await client().chat.completions.create(sent);
    assert.deepEqual(completion, WHOLE_CHAT, why("the SDK's completion"));
    assert.equal(chat1.requests.length, 1);
    const seen = chat1.requests[0];
    assert.equal(seen.url, "/v1/chat/completions", "base_url's /v1 is kept, the dialect's path appended");
    assert.deepEqual(JSON.parse(seen.body), sent, "the body reaches the upstream unchanged");
    assert.equal(seen.headers.authorization, "Bearer upstream-key-chat1", "the upstream gets its own key");
    assert.ok(!JSON.stringify(seen.headers).includes(GATEWAY_KEY), "the gateway key never goes upstream");
    assert.equal(chat2.requests.length + resp1.requests.length + resp2.requests.length, 0);
  });

  test("a streamed chat completion yields the fixture's text and the usage chunk", T, async () => {
    chat1.push(sseReply("chat-ok.sse"));
    const stream = await client().chat.completions.create(
      chatParams({ stream: true, stream_options: { include_usage: true } }),
    );
    const { text, chunks } = await chatStreamText(stream);
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    assert.equal(chunks.length, 8, "every chunk but [DONE]");
    assert.equal(chunks[6].choices[0].finish_reason, "stop");
    assert.deepEqual(chunks[7].usage, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
  });

  test("a streamed response yields the fixture's text through response.completed", T, async () => {
    resp1.push(sseReply("responses-ok.sse"));
    const stream = await client().responses.create(responsesParams({ stream: true }));
    const { text, events } = await responsesEvents(stream);
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    const last = events.at(-1);
    assert.equal(last.type, "response.completed");
    assert.equal(last.response.usage.output_tokens, 5);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      [...Array(13).keys()],
      "every event, in order",
    );
    assert.equal(resp1.requests[0].url, "/v1/responses");
    assert.equal(chat1.requests.length + chat2.requests.length, 0, "Chat upstreams are not offered");
  });

  test("responses.stream's finalResponse carries the fixture's text", T, async () => {
    resp1.push(sseReply("responses-ok.sse"));
    const response = await client().responses.stream(responsesParams()).finalResponse();
    assert.equal(response.status, "completed", why("final response"));
    assert.equal(response.output_text, FIXTURE_TEXT);
  });

  test("failover after an in-stream server_error before content is invisible to chat", T, async () => {
    chat1.push(sseReply("chat-server-error-before-content.sse"));
    chat2.push(sseReply("chat-ok.sse"));
    const stream = await client().chat.completions.create(chatParams({ stream: true }));
    const { text, chunks } = await chatStreamText(stream);
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    assert.equal(chunks[0].id, "chatcmpl-fake5", "every chunk is the second upstream's");
    assert.equal(chat1.requests.length, 1, "the first upstream was tried");
    assert.equal(chat2.requests.length, 1, "the second upstream answered");
  });

  test("failover after a 503 is invisible to a non-streamed chat completion", T, async () => {
    chat1.push(jsonReply(503, { error: { message: "down", type: "server_error", param: null, code: null } }));
    chat2.push(jsonReply(200, WHOLE_CHAT));
    const completion = await client().chat.completions.create(chatParams());
    assert.deepEqual(completion, WHOLE_CHAT, why("the SDK's completion"));
    assert.equal(chat1.requests.length, 1);
    assert.equal(chat2.requests.length, 1);
  });

  test("failover after response.failed server_is_overloaded is invisible to responses", T, async () => {
    resp1.push(sseReply("responses-failed-overloaded.sse"));
    resp2.push(sseReply("responses-ok.sse"));
    const stream = await client().responses.create(responsesParams({ stream: true }));
    const { text, events } = await responsesEvents(stream);
    assert.equal(text, FIXTURE_TEXT, why("streamed text"));
    assert.equal(events[0].response.id, "resp_fake7", "every event is the second upstream's");
    assert.ok(!events.some((e) => e.type === "response.failed"), "the first upstream's failure is not seen");
    assert.equal(events.at(-1).type, "response.completed");
    assert.equal(resp1.requests.length, 1, "the first upstream was tried");
    assert.equal(resp2.requests.length, 1, "the second upstream answered");
  });

  test("an unknown gateway key raises AuthenticationError with the gateway's code", T, async () => {
    for (const call of [
      (c) => c.chat.completions.create(chatParams()),
      (c) => c.responses.create(responsesParams({ stream: true })),
    ]) {
      const err = await call(client("gw-not-a-key")).then(
        () => assert.fail("the request succeeded"),
        (e) => e,
      );
      assert.ok(err instanceof OpenAI.AuthenticationError, why(`got ${err}`));
      assert.equal(err.status, 401);
      assert.equal(err.type, "authentication_error");
      assert.equal(err.code, "gw.auth.unknown_key");
      assert.match(err.error.message, /^sluice: /);
      assert.equal(err.headers.get("x-sluice-error"), "gw.auth.unknown_key");
    }
    const reached = [chat1, chat2, resp1, resp2].reduce((n, f) => n + f.requests.length, 0);
    assert.equal(reached, 0, "nothing reached an upstream");
  });

  test("a 40 MiB body gets a 413 with the gateway's code from chat and responses", T, async () => {
    for (const call of [
      (c) => c.chat.completions.create(chatParams({ messages: [{ role: "user", content: OVERSIZED_TEXT }] })),
      (c) => c.responses.create(responsesParams({ input: OVERSIZED_TEXT, stream: true })),
    ]) {
      const err = await call(client()).then(() => assert.fail("the request succeeded"), (e) => e);
      assert.ok(err instanceof OpenAI.APIError, why(`got ${err}`));
      assert.equal(err.status, 413, why(String(err)));
      assert.equal(err.type, "invalid_request_error");
      assert.equal(err.code, "gw.request.too_large");
      assert.match(err.error.message, /^sluice: the request body has more than 33554432 bytes/);
      assert.equal(err.headers.get("x-sluice-error"), "gw.request.too_large");
    }
    const reached = [chat1, chat2, resp1, resp2].reduce((n, f) => n + f.requests.length, 0);
    assert.equal(reached, 0, "nothing reached an upstream");
  });

  test("a chat stream cut after content throws from the SDK's iteration", T, async () => {
    chat1.push(cutAfterContent("chat-ok.sse"));
    chat2.push(sseReply("chat-ok.sse"));
    const stream = await client().chat.completions.create(chatParams({ stream: true }));
    let text = "";
    const err = await (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    })().then(
      () => assert.fail(why(`the stream ended cleanly after "${text}"`)),
      (e) => e,
    );
    assert.ok(err instanceof OpenAI.APIError, why(`got ${err}`));
    assert.equal(text, "Hello from the", "the content before the cut reached the client");
    assert.equal(err.code, "gw.upstream.broken_after_content", why(JSON.stringify(err.error)));
    assert.match(err.message, /sluice: /, "the gateway's message is in the error");
    assert.equal(chat2.requests.length, 0, "nothing after content is failed over");
  });

  // The SDK hands response.failed over as an event rather than throwing: the
  // stream must end with it, never with a clean end or a response.completed.
  test("a responses stream cut after content ends with response.failed", T, async () => {
    resp1.push(cutAfterContent("responses-ok.sse"));
    resp2.push(sseReply("responses-ok.sse"));
    const stream = await client().responses.create(responsesParams({ stream: true }));
    const { text, events } = await responsesEvents(stream);
    assert.equal(text, "Hello from the", why("the content before the cut reached the client"));
    const last = events.at(-1);
    assert.equal(last.type, "response.failed", why(`last event: ${JSON.stringify(last)}`));
    assert.equal(last.response.status, "failed");
    assert.equal(last.response.error.code, "gw.upstream.broken_after_content");
    assert.match(last.response.error.message, /^sluice: /);
    assert.ok(!events.some((e) => e.type === "response.completed"));
    assert.equal(resp2.requests.length, 0, "nothing after content is failed over");
  });

  // Last, so that a crash or a sanitizer report under this traffic fails a test.
  test("sluice exits cleanly on SIGTERM", T, async () => {
    assert.equal(await gw.stop(), 0, why("sluice's exit code"));
  });
});

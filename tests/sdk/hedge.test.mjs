// The first-token hedge (behaviour.md §4) with the official Anthropic SDK: a route
// [slow, fast] with failover.first_token_secs 2. The slow upstream would answer after
// 20 s; the SDK gets the fast one's whole answer about 2 s after sending, and the
// control endpoint shows the two hops (the hedge flagged, the loser hedge_lost).
// maxRetries is 0: every answer is sluice's doing.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { ControlClient } from "./control_client.mjs";
import { GENAI_VERSION, GoogleGenAI, OPENAI_VERSION, OpenAI } from "./sdks.mjs";
import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { CONTROL_KEY, fixtureText, GATEWAY_KEY, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const FIXTURE_TEXT = "Hello from the fake upstream";
const T = { timeout: TEST_TIMEOUT_MS };
const SLOW_MS = 20000;

let conversation = 0;
function params() {
  return { model: "claude-x", max_tokens: 64, messages: [{ role: "user", content: `hedge ${++conversation}` }] };
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

let slow, fast, gw, control;

function client() {
  return new Anthropic({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${gw.port}`, maxRetries: 0, timeout: SDK_TIMEOUT_MS });
}

function why(what) {
  return `${what}\n--- sluice log ---\n${gw.log().slice(-4000)}`;
}

// The Attempt events of the next request to finish, in order.
async function attemptsOfNextRequest() {
  const attempts = [];
  for (;;) {
    const m = await control.next((x) => x.kind === "event", 10000);
    if (m.event.kind === "attempt") attempts.push(m.event.view);
    if (m.event.kind === "request_finished" || m.event.kind === "request_failed") return { attempts, end: m.event };
  }
}

describe("first-token hedge with the Anthropic SDK", () => {
  before(async () => {
    slow = await startFake();
    fast = await startFake();
    gw = await startGateway(
      [
        { name: "slow", protocol: "anthropic", port: slow.port },
        { name: "fast", protocol: "anthropic", port: fast.port },
      ],
      { waitSecs: 30, failoverFields: ", first_token_secs: 2" },
    );
    control = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY });
    assert.equal((await control.next()).kind, "welcome");
    assert.equal((await control.request({ kind: "subscribe", topics: ["events"] })).kind, "snapshot");
  });

  after(async () => {
    await control?.close();
    await gw?.stop();
    await slow?.close();
    await fast?.close();
  });

  beforeEach(() => {
    slow.reset();
    fast.reset();
  });

  test("a stream whose first token would take 20 s is answered by the hedge after ~2 s", T, async () => {
    slow.push(sseReply("anthropic-ok.sse", { delayMs: SLOW_MS }));
    fast.push(sseReply("anthropic-ok.sse"));
    const t0 = Date.now();
    const stream = client().messages.stream(params());
    let text = "";
    stream.on("text", (d) => (text += d));
    const message = await stream.finalMessage();
    const ms = Date.now() - t0;
    assert.equal(text, FIXTURE_TEXT, why("the fast upstream's whole answer"));
    assert.equal(message.stop_reason, "end_turn");
    assert.ok(ms >= 1900 && ms < 3500, why(`answered after ${ms} ms`));
    assert.equal(slow.requests.length, 1);
    assert.equal(fast.requests.length, 1);
    const gap = fast.requests[0].at - slow.requests[0].at;
    assert.ok(gap >= 1900 && gap < 2600, `the hedge went out ${gap} ms after the first hop`);
    const { attempts, end } = await attemptsOfNextRequest();
    assert.equal(end.kind, "request_finished");
    const byName = Object.fromEntries(attempts.map((a) => [a.provider, a]));
    assert.equal(byName.slow.outcome, "hedge_lost", JSON.stringify(attempts));
    assert.equal(byName.slow.hedge, undefined, "the first hop is no hedge");
    assert.equal(byName.fast.outcome, "served");
    assert.equal(byName.fast.hedge, true);
  });

  test("the request DB's history keeps both hops, the hedge flagged", T, async () => {
    // Until the writer has committed the previous test's row (it batches).
    let row;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && row === undefined;) {
      const r = await control.request({ kind: "history", since_ms: Date.now() - 60_000, limit: 5, filter: { provider: "fast" } });
      row = r.rows.find((x) => x.attempts.some((a) => a.outcome === "hedge_lost"));
      if (row === undefined) await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(row, "a row with the lost hop");
    assert.deepEqual(
      row.attempts.map((a) => [a.provider, a.outcome, a.hedge ?? false]),
      [
        ["slow", "hedge_lost", false],
        ["fast", "served", true],
      ],
    );
  });

  test("a whole answer: the first 2xx head wins", T, async () => {
    slow.push({ ...jsonReply(200, WHOLE_ANSWER), delayMs: SLOW_MS });
    fast.push(jsonReply(200, WHOLE_ANSWER));
    const t0 = Date.now();
    const message = await client().messages.create(params());
    const ms = Date.now() - t0;
    assert.equal(message.content[0].text, FIXTURE_TEXT);
    assert.ok(ms >= 1900 && ms < 3500, why(`answered after ${ms} ms`));
    const { attempts } = await attemptsOfNextRequest();
    assert.deepEqual(attempts.map((a) => `${a.provider}:${a.outcome}`).sort(), ["fast:served", "slow:hedge_lost"]);
  });

  test("a first hop slower than first_token_secs but faster than its hedge wins", T, async () => {
    slow.push(sseReply("anthropic-ok.sse", { delayMs: 2600 }));
    fast.push(sseReply("anthropic-ok.sse", { delayMs: 6000 }));
    const t0 = Date.now();
    const stream = client().messages.stream(params());
    const message = await stream.finalMessage();
    const ms = Date.now() - t0;
    assert.equal(message.content[0].text, FIXTURE_TEXT);
    assert.ok(ms >= 2500 && ms < 5000, why(`answered after ${ms} ms`));
    assert.equal(fast.requests.length, 1, "the hedge went out");
    const { attempts } = await attemptsOfNextRequest();
    assert.deepEqual(attempts.map((a) => `${a.provider}:${a.outcome}`).sort(), ["fast:hedge_lost", "slow:served"]);
  });

  test("the hedge's request error reaches the SDK as BadRequestError, the silent first hop closed", T, async () => {
    const body = { type: "error", error: { type: "invalid_request_error", message: "messages.0: the hedge says no" } };
    slow.push(sseReply("anthropic-ok.sse", { delayMs: SLOW_MS }));
    fast.push(jsonReply(400, body));
    const t0 = Date.now();
    const err = await client().messages.create({ ...params(), stream: true }).then(
      () => assert.fail("the request succeeded"),
      (e) => e,
    );
    assert.ok(err instanceof Anthropic.BadRequestError, why(`got ${err}`));
    assert.deepEqual(err.error, body, "the upstream's body, unchanged");
    assert.ok(Date.now() - t0 < 3500, "at once, not after the slow upstream's 20 s");
    const { attempts, end } = await attemptsOfNextRequest();
    assert.equal(end.kind, "request_finished", "the upstream's own answer, handed over");
    assert.equal(end.status, 400);
    assert.deepEqual(attempts.map((a) => `${a.provider}:${a.outcome}`).sort(), ["fast:status", "slow:cancelled"]);
  });

  test("the fixture's text is the one the tests expect", () => {
    assert.equal(fixtureText("anthropic-ok.sse", (e) => e.delta?.text), FIXTURE_TEXT);
  });
});

// The same rule in the other dialects' streams: Responses and Gemini, each a route [slow, fast].
describe(`first-token hedge with ${OPENAI_VERSION} (Responses) and ${GENAI_VERSION}`, () => {
  let respSlow, respFast, gemSlow, gemFast, gw2;
  before(async () => {
    [respSlow, respFast, gemSlow, gemFast] = await Promise.all([startFake(), startFake(), startFake(), startFake()]);
    gw2 = await startGateway(
      [
        { name: "resp_slow", protocol: "openai-responses", port: respSlow.port, path: "/v1" },
        { name: "resp_fast", protocol: "openai-responses", port: respFast.port, path: "/v1" },
        { name: "gem_slow", protocol: "gemini", port: gemSlow.port },
        { name: "gem_fast", protocol: "gemini", port: gemFast.port },
      ],
      { waitSecs: 30, failoverFields: ", first_token_secs: 1" },
    );
  });

  after(async () => {
    await gw2?.stop();
    await Promise.all([respSlow, respFast, gemSlow, gemFast].map((f) => f?.close()));
  });

  test("a Responses stream silent for 20 s is served by the hedge after ~1 s", T, async () => {
    respSlow.push(sseReply("responses-ok.sse", { delayMs: SLOW_MS }));
    respFast.push(sseReply("responses-ok.sse"));
    const openai = new OpenAI({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${gw2.port}/v1`, maxRetries: 0, timeout: SDK_TIMEOUT_MS });
    const t0 = Date.now();
    const response = await openai.responses.stream({ model: "gpt-x", input: "hedge responses" }).finalResponse();
    const ms = Date.now() - t0;
    assert.equal(response.output_text, FIXTURE_TEXT, gw2.log().slice(-3000));
    assert.ok(ms >= 900 && ms < 2500, `answered after ${ms} ms`);
    assert.equal(respFast.requests.length, 1);
  });

  test("a Gemini stream silent for 20 s is served by the hedge after ~1 s", T, async () => {
    gemSlow.push(sseReply("gemini-ok.sse", { delayMs: SLOW_MS }));
    gemFast.push(sseReply("gemini-ok.sse"));
    const genai = new GoogleGenAI({
      apiKey: GATEWAY_KEY,
      httpOptions: { baseUrl: `http://127.0.0.1:${gw2.port}`, timeout: SDK_TIMEOUT_MS, retryOptions: { attempts: 1 } },
    });
    const t0 = Date.now();
    let text = "";
    for await (const chunk of await genai.models.generateContentStream({
      model: "gemini-x",
      contents: [{ role: "user", parts: [{ text: "hedge gemini" }] }],
    }))
      text += chunk.text ?? "";
    const ms = Date.now() - t0;
    assert.equal(text, FIXTURE_TEXT, gw2.log().slice(-3000));
    assert.ok(ms >= 900 && ms < 2500, `answered after ${ms} ms`);
    assert.equal(gemFast.requests.length, 1);
  });
});

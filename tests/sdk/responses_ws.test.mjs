// Issue 8's Responses WebSocket mode with the official openai SDK's
// ResponsesWS: three turns on one socket, sent one at a time; the second
// meets an in-stream overload (response.failed server_is_overloaded) first
// and is retried by sluice invisibly. Every turn reaches the upstream as an
// ordinary POST /v1/responses stream with the upstream's own key.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import WebSocket from "ws";
import { OPENAI_VERSION, OpenAI, ResponsesWS } from "./sdks.mjs";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { GATEWAY_KEY, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
let up, gw;

function socket(apiKey = GATEWAY_KEY) {
  const client = new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${gw.port}/v1`, maxRetries: 0 });
  return new ResponsesWS(client);
}

// Sends the turns at once and collects, per turn, the text and the final event type.
async function converse(ws, inputs) {
  const turns = [];
  let current = { text: "", end: null };
  const done = new Promise((resolve, reject) => {
    ws.on("event", (e) => {
      if (e.type === "response.output_text.delta") current.text += e.delta;
      if (e.type === "response.completed" || e.type === "response.failed" || e.type === "error") {
        current.end = e.type;
        turns.push(current);
        current = { text: "", end: null };
        if (turns.length === inputs.length) resolve(turns);
      }
    });
    ws.on("error", (e) => (e.error ? null : reject(e)));
  });
  for (const input of inputs) ws.send({ type: "response.create", model: "gpt-x", input });
  return done;
}

describe(`${OPENAI_VERSION} ResponsesWS through sluice`, () => {
  before(async () => {
    up = await startFake();
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      gw = await startGateway([{ name: "oai", protocol: "openai-responses", port: up.port, path: "/v1" }],
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

  test("three turns, one retried after an in-stream overload", T, async () => {
    up.push(sseReply("responses-ok.sse"));
    up.push(sseReply("responses-failed-overloaded.sse"));
    up.push(sseReply("responses-ok.sse"));
    up.push(sseReply("responses-ok.sse"));
    const ws = socket();
    try {
      const turns = await converse(ws, ["one", "two", "three"]);
      assert.deepEqual(turns.map((t) => t.end), ["response.completed", "response.completed", "response.completed"]);
      for (const t of turns) assert.ok(t.text.length > 0, "each turn streamed its text");
      assert.equal(turns[0].text, turns[1].text, "the retried turn reads like any other");
    } finally {
      ws.close({ code: 1000, reason: "done" });
    }
    assert.equal(up.requests.length, 4, "the second turn went twice");
    const inputs = up.requests.map((r) => JSON.parse(r.body).input);
    assert.deepEqual(inputs, ["one", "two", "two", "three"], "one turn at a time, in order");
    for (const r of up.requests) {
      assert.equal(r.url, "/v1/responses");
      assert.equal(JSON.parse(r.body).stream, true);
      assert.equal(r.headers.authorization, "Bearer upstream-key-oai");
      assert.equal(JSON.parse(r.body).type, undefined, "the event type is not a Responses field");
    }
  });

  test("a message that is not response.create gets an error event and the socket stays", T, async () => {
    up.push(sseReply("responses-ok.sse"));
    const ws = socket();
    try {
      const errors = [];
      ws.on("error", (e) => errors.push(e));
      const events = [];
      const completed = new Promise((resolve) => ws.on("event", (e) => {
        events.push(e);
        if (e.type === "response.completed") resolve();
      }));
      ws.sendRaw(JSON.stringify({ type: "response.cancel" }));
      ws.send({ type: "response.create", model: "gpt-x", input: "after" });
      await completed;
      const error = events.find((e) => e.type === "error");
      assert.ok(error, "an error event came first");
      assert.equal(error.error.code, "gw.ws.bad_event");
    } finally {
      ws.close({ code: 1000, reason: "done" });
    }
    assert.equal(up.requests.length, 1);
  });

  test("while a turn waits (a 429 pause), the client gets pings, then the turn", T, async () => {
    up.push(jsonReply(429, { error: { message: "slow down", type: "rate_limit_error" } }, { "retry-after-ms": "40000" }));
    up.push(sseReply("responses-ok.sse"));
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/responses`,
                             { headers: { authorization: `Bearer ${GATEWAY_KEY}` } });
    let pings = 0;
    const seen = [];
    ws.on("ping", () => pings++);
    const completed = new Promise((resolve, reject) => {
      ws.on("message", (m) => {
        const e = JSON.parse(m.toString());
        seen.push(e.type);
        if (e.type === "response.completed") resolve();
      });
      ws.on("error", reject);
    });
    ws.on("open", () => ws.send(JSON.stringify({ type: "response.create", model: "gpt-x", input: "wait" })));
    await completed;
    ws.close();
    assert.ok(pings >= 1, "keep-alives came as pings while the upstream was paused (400 ms scaled, every 150 ms)");
    assert.ok(!seen.includes("error"), "the 429 never reached the client");
    assert.equal(up.requests.length, 2);
  });

  test("an unknown key is refused at the upgrade", T, async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/v1/responses`, { headers: { authorization: "Bearer nope" } });
    const status = await new Promise((resolve) => {
      ws.on("unexpected-response", (req, res) => resolve(res.statusCode));
      ws.on("open", () => resolve("open"));
      ws.on("error", () => {});
    });
    assert.equal(status, 401);
    assert.equal(up.requests.length, 0);
  });
});

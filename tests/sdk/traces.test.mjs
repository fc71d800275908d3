// OpenTelemetry traces (observability.md) as a collector receives them: a test
// OTLP/HTTP receiver takes what sluice POSTs to /v1/traces (protobuf) and decodes
// it with the OTLP definitions the official @opentelemetry/otlp-transformer package
// ships (its generated protobufjs root); encoded again by them, the message must
// give the very bytes sluice sent (a field they do not know, a wrong wire type or
// length would not survive). The request under test is retried once and failed
// over once, by the official Anthropic SDK, with a traceparent of its own.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import otlp from "otlp-transformer-0.200/build/src/generated/root.js";

import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { CONTROL_KEY, GATEWAY_KEY, SDK_TIMEOUT_MS, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
const ExportRequest = otlp.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN = "00f067aa0ba902b7";
const PROMPT = "a prompt that must never leave sluice in a span";
const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };

// A collector: every POST body, parsed, with its path and content type.
async function startCollector() {
  const posts = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const bytes = Buffer.concat(chunks);
      posts.push({ path: req.url, type: req.headers["content-type"], bytes, body: decode(bytes) });
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: server.address().port, posts, close: () => new Promise((r) => server.close(() => r())) };
}

const ID_FIELDS = ["traceId", "spanId", "parentSpanId"];

// The request as the official definitions read it (ids in hex), checked to be exactly what they would write.
function decode(bytes) {
  const message = ExportRequest.decode(bytes);
  assert.deepEqual(Buffer.from(ExportRequest.encode(message).finish()), bytes,
                   "the OTLP definitions encode the decoded request to the same bytes");
  const request = ExportRequest.toObject(message, { longs: String, enums: Number, bytes: String });
  for (const rs of request.resourceSpans ?? [])
    for (const ss of rs.scopeSpans ?? [])
      for (const span of ss.spans ?? [])
        for (const k of ID_FIELDS) if (span[k] !== undefined) span[k] = Buffer.from(span[k], "base64").toString("hex");
  return request;
}

function attrs(span) {
  const out = {};
  for (const a of span.attributes ?? []) {
    const v = a.value;
    out[a.key] = v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue ?? v.arrayValue?.values.map((x) => x.stringValue);
  }
  return out;
}

async function waitFor(what, check, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function spansIn(collector) {
  return collector.posts.flatMap((p) => p.body.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)));
}

function client(port) {
  return new Anthropic({ apiKey: GATEWAY_KEY, baseURL: `http://127.0.0.1:${port}`, maxRetries: 0,
                         timeout: SDK_TIMEOUT_MS });
}

const params = { model: "claude-x", max_tokens: 64, messages: [{ role: "user", content: PROMPT }] };

describe("traces: spans over OTLP/HTTP, the client's trace continued", () => {
  let collector, one, two, gw;

  before(async () => {
    collector = await startCollector();
    one = await startFake();
    two = await startFake();
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      // sample 0: only a client's sampled trace is recorded (parent-based sampling).
      gw = await startGateway(
        [{ name: "one", protocol: "anthropic", port: one.port }, { name: "two", protocol: "anthropic", port: two.port }],
        { waitSecs: 120,
          extraYaml: `telemetry: {otlp_endpoint: "http://127.0.0.1:${collector.port}", service_name: sluice-test, sample: 0}\n` });
    } finally {
      delete process.env.SLUICE_TEST_TIME_SCALE;
    }
  });

  after(async () => {
    await gw?.stop();
    await Promise.all([one?.close(), two?.close(), collector?.close()]);
  });

  test("a request retried once and failed over once is one trace: its span, three hop spans, events", T, async () => {
    one.push(jsonReply(529, OVERLOADED)); // one fails: over to two
    two.push(jsonReply(503, OVERLOADED)); // two fails too: a backoff, then a retry round
    one.push(sseReply("anthropic-ok.sse"));
    const message = await client(gw.port).messages.stream(params, {
      headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` } }).finalMessage();
    assert.equal(message.content[0].text, "Hello from the fake upstream");

    const spans = await waitFor("the spans", () => { const s = spansIn(collector); return s.length >= 4 && s; });
    const post = collector.posts[0];
    assert.equal(post.path, "/v1/traces");
    assert.equal(post.type, "application/x-protobuf");
    assert.equal(attrs(post.body.resourceSpans[0].resource)["service.name"], "sluice-test");
    assert.equal(spans.length, 4);

    const [request, ...hops] = spans;
    assert.equal(request.traceId, CLIENT_TRACE, "the client's trace goes on");
    assert.equal(request.parentSpanId, CLIENT_SPAN);
    assert.equal(request.kind, 2, "SERVER");
    assert.equal(request.name, "chat claude-x");
    const ra = attrs(request);
    assert.equal(ra["gen_ai.operation.name"], "chat");
    assert.equal(ra["gen_ai.provider.name"], "anthropic");
    assert.equal(ra["gen_ai.request.model"], "claude-x");
    assert.equal(ra["gen_ai.response.model"], "claude-x");
    assert.deepEqual(ra["gen_ai.response.finish_reasons"], ["end_turn"]);
    assert.equal(ra["gen_ai.request.stream"], true);
    assert.equal(ra["gen_ai.usage.input_tokens"], "10");
    assert.equal(ra["gen_ai.usage.output_tokens"], "5");
    assert.equal(ra["http.response.status_code"], "200");
    assert.equal(ra["error.type"], undefined);
    const events = request.events.map((e) => e.name);
    assert.deepEqual(events, ["backoff", "first_token"]);
    assert.ok(Number(attrs(request.events[0])["sluice.backoff_ms"]) > 0);
    assert.ok(BigInt(request.endTimeUnixNano) > BigInt(request.startTimeUnixNano));

    assert.deepEqual(hops.map((h) => attrs(h)["sluice.provider"]), ["one", "two", "one"]);
    assert.deepEqual(hops.map((h) => attrs(h)["http.response.status_code"]), ["529", "503", "200"]);
    assert.deepEqual(hops.map((h) => attrs(h)["sluice.attempt.retry"] ?? "0"), ["0", "0", "1"]);
    assert.deepEqual(hops.map((h) => attrs(h)["sluice.attempt.outcome"]), ["temporary", "temporary", "ok"]);
    assert.deepEqual(hops.map((h) => attrs(h)["server.port"]), [one.port, two.port, one.port].map(String));
    assert.equal(attrs(hops[0])["error.type"], "gw.upstream.status");
    assert.equal(hops[0].status.code, 2, "ERROR");
    for (const h of hops) {
      assert.equal(h.traceId, CLIENT_TRACE);
      assert.equal(h.parentSpanId, request.spanId, "each hop is a child of the request");
      assert.equal(h.kind, 3, "CLIENT");
      assert.equal(attrs(h)["gen_ai.provider.name"], "anthropic");
      assert.equal(attrs(h)["server.address"], "127.0.0.1");
      assert.ok(BigInt(h.startTimeUnixNano) >= BigInt(request.startTimeUnixNano));
      assert.ok(BigInt(h.endTimeUnixNano) <= BigInt(request.endTimeUnixNano));
    }

    // Each hop told its upstream its own span: the same trace, the hop's span id, sampled.
    const sent = [one.requests[0], two.requests[0], one.requests[1]].map((r) => r.headers.traceparent);
    assert.deepEqual(sent, hops.map((h) => `00-${CLIENT_TRACE}-${h.spanId}-01`));

    // No prompt, no answer, no credential.
    const text = Buffer.concat(collector.posts.map((p) => p.bytes)).toString("latin1");
    for (const secret of [PROMPT, "Hello from the fake upstream", GATEWAY_KEY, "upstream-key-one", "upstream-key-two"])
      assert.ok(!text.includes(secret), `the spans hold ${secret}`);
  });

  test("a request that waited behind 429 pauses has a queued event and its gate", T, async () => {
    const before = collector.posts.length;
    const limited = { type: "error", error: { type: "rate_limit_error", message: "Rate limited" } };
    one.push(jsonReply(429, limited, { "retry-after": "2" }));
    two.push(jsonReply(429, limited, { "retry-after": "2" }));
    one.push(sseReply("anthropic-ok.sse"));
    two.push(sseReply("anthropic-ok.sse"));
    const trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    await client(gw.port).messages.stream(params, {
      headers: { traceparent: `00-${trace}-${CLIENT_SPAN}-01` } }).finalMessage();
    const request = await waitFor("the span", () =>
      collector.posts.length > before &&
      spansIn({ posts: collector.posts.slice(before) }).find((s) => s.traceId === trace && s.kind === 2));
    assert.ok(request.events.some((e) => e.name === "queued"), JSON.stringify(request.events));
    assert.equal(attrs(request)["sluice.wait.gate"], "throttled");
    assert.equal(attrs(request)["http.response.status_code"], "200");
    one.reset(); // the reply the other upstream did not need
    two.reset();
  });

  test("a whole answer's span has its finish reason and usage from the answer's tail", T, async () => {
    const before = collector.posts.length;
    one.push(jsonReply(200, {
      id: "msg_whole_1", type: "message", role: "assistant", model: "claude-x",
      content: [{ type: "text", text: "Hello from the fake upstream" }],
      stop_reason: "max_tokens", stop_sequence: null, usage: { input_tokens: 7, output_tokens: 64 } }));
    const trace = "6bf92f3577b34da6a3ce929d0e0e4738";
    const message = await client(gw.port).messages.create(params, {
      headers: { traceparent: `00-${trace}-${CLIENT_SPAN}-01` } });
    assert.equal(message.stop_reason, "max_tokens");
    const request = await waitFor("the span", () =>
      collector.posts.length > before &&
      spansIn({ posts: collector.posts.slice(before) }).find((s) => s.traceId === trace && s.kind === 2));
    const ra = attrs(request);
    assert.equal(ra["gen_ai.request.stream"], false);
    assert.deepEqual(ra["gen_ai.response.finish_reasons"], ["max_tokens"]);
    assert.equal(ra["gen_ai.usage.output_tokens"], "64");
    assert.deepEqual(request.events.map((e) => e.name), ["first_token"]);
  });

  test("a request without a sampled parent at sample 0: no spans, its hop still propagates the trace", T, async () => {
    const before = collector.posts.length;
    one.push(sseReply("anthropic-ok.sse"));
    await client(gw.port).messages.stream(params).finalMessage();
    const tp = one.requests.at(-1).headers.traceparent;
    assert.match(tp, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, "flags 00: not recorded");
    assert.notEqual(tp.slice(3, 35), CLIENT_TRACE);
    await new Promise((r) => setTimeout(r, 1500)); // past the exporter's batch delay
    assert.equal(collector.posts.length, before);
  });

  test("an invalid traceparent starts a trace of sluice's own", T, async () => {
    one.push(sseReply("anthropic-ok.sse"));
    await client(gw.port).messages.stream(params, { headers: { traceparent: "00-zz-nothing-01" } }).finalMessage();
    assert.match(one.requests.at(-1).headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  });
});

describe("traces: a collector that is down costs the requests nothing", () => {
  let up, gw;

  before(async () => {
    const closed = await startCollector();
    const port = closed.port;
    await closed.close();
    up = await startFake();
    gw = await startGateway([{ name: "one", protocol: "anthropic", port: up.port }],
                            { extraYaml: `telemetry: {otlp_endpoint: "http://127.0.0.1:${port}"}\n` });
  });

  after(async () => {
    await gw?.stop();
    await up?.close();
  });

  test("the request is answered; its spans are dropped and counted in /metrics", T, async () => {
    up.push(sseReply("anthropic-ok.sse"));
    const message = await client(gw.port).messages.stream(params).finalMessage();
    assert.equal(message.content[0].text, "Hello from the fake upstream");
    const dropped = await (async () => {
      const end = Date.now() + 5000;
      for (;;) {
        const res = await fetch(`http://127.0.0.1:${gw.controlPort}/metrics`,
                                { headers: { authorization: `Bearer ${CONTROL_KEY}` } });
        const m = /^sluice_trace_spans_dropped_total (\d+)$/m.exec(await res.text());
        if (m && Number(m[1]) >= 2) return Number(m[1]);
        if (Date.now() > end) throw new Error("no dropped spans counted");
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    assert.equal(dropped, 2, "the request's span and its hop's");
    assert.match(gw.log(), /telemetry: 2 span\(s\) not exported/);
  });
});

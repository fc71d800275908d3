// The control endpoint end to end (issue 9, protocol.md): a real sluice, a fake upstream, and a
// WebSocket client on the generated TypeScript package. What a dashboard relies on: the
// handshake, snapshot + events with no gap, late subscribers, live pushes, config reloads,
// safe mode, and bad input answered with errors while the connection and process survive.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";

import { ControlClient } from "./control_client.mjs";
import { jsonReply, sseReply, startFake } from "./fake_upstream.mjs";
import { CONTROL_KEY, GATEWAY_KEY, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

const T = { timeout: TEST_TIMEOUT_MS };
const OK_MESSAGE = {
  id: "msg_1", type: "message", role: "assistant", model: "claude-x",
  content: [{ type: "text", text: "hi" }], stop_reason: "end_turn",
  usage: { input_tokens: 3, output_tokens: 1 },
};
const OVERLOADED = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };
const RATE_LIMITED = { type: "error", error: { type: "rate_limit_error", message: "Rate limited" } };

let up, gw;

async function ask(text = "hi", { stream = false, query = "" } = {}) {
  const res = await fetch(`http://127.0.0.1:${gw.port}/v1/messages${query}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: "claude-x", max_tokens: 16, stream, messages: [{ role: "user", content: text }] }),
  });
  return { status: res.status, headers: res.headers, body: await res.text() };
}

async function gateway(options = {}) {
  await gw?.stop();
  gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], options);
  return gw;
}

async function connect() {
  const c = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY });
  const welcome = await c.next();
  assert.equal(welcome.kind, "welcome");
  return c;
}

// Events of a subscription until pred holds for one; asserts seq has no gap.
async function eventsUntil(c, pred, timeoutMs = 5000) {
  const got = [];
  for (;;) {
    const m = await c.next((x) => x.kind === "event" || x.kind === "events_dropped", timeoutMs);
    assert.equal(m.kind, "event", "no events were dropped");
    got.push(m);
    if (pred(m.event)) return got;
  }
}

function kinds(events, id) {
  return events.filter((m) => m.event.id === id).map((m) => m.event.kind);
}

// Asks get_in_flight every pollMs until pick(requests) gives something (returned), or timeoutMs passes (undefined).
async function inFlightUntil(c, pick, timeoutMs, pollMs = 50) {
  for (const deadline = Date.now() + timeoutMs; ;) {
    const got = pick((await c.request({ kind: "get_in_flight" })).in_flight.requests);
    if (got || Date.now() >= deadline) return got;
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

before(async () => {
  up = await startFake();
});
after(async () => {
  await gw?.stop();
  await up?.close();
});

describe("control endpoint", () => {
  beforeEach(() => up.reset());

  test("handshake: welcome names the protocol and the server", T, async () => {
    await gateway({ waitSecs: 30 });
    assert.ok(gw.controlPort > 0, gw.log());
    const c = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY });
    const w = await c.next();
    assert.equal(w.kind, "welcome");
    assert.equal(w.protocol, c.proto.PROTOCOL_VERSION);
    assert.match(w.server, /^sluice /);
    assert.ok(Math.abs(w.now_ms - Date.now()) < 5000);
    await c.close();
  });

  test("wrong key: refused control.auth.rejected and closed; the next attempt is slowed", T, async () => {
    const c = await ControlClient.connect(gw.controlPort, { key: "not-the-key" });
    const r = await c.next();
    assert.equal(r.kind, "refused");
    assert.equal(r.message.code, "control.auth.rejected");
    await c.closed;
    const started = Date.now();
    const d = await ControlClient.connect(gw.controlPort, { key: "still-wrong" });
    assert.equal((await d.next()).kind, "refused");
    assert.ok(Date.now() - started >= 200, "a second failure from the address waits");
    await d.closed;
    assert.ok(!gw.log().includes("still-wrong"), "the key is never logged");
    // The right key still gets in (after its own wait).
    const e = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY });
    assert.equal((await e.next()).kind, "welcome");
    await e.close();
  });

  test("wrong version: refused control.protocol.mismatch naming both versions", T, async () => {
    const c = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY, version: 99 });
    const r = await c.next();
    assert.equal(r.kind, "refused");
    assert.equal(r.message.code, "control.protocol.mismatch");
    assert.deepEqual(r.message.args, { ours: String(c.proto.PROTOCOL_VERSION), theirs: "99" });
    assert.match(r.message.text, new RegExp(`${c.proto.PROTOCOL_VERSION}.*99`));
    await c.closed;
  });

  test("a request before hello: error control.hello_first, closed", T, async () => {
    const c = await ControlClient.connect(gw.controlPort);
    c.sendMessage({ kind: "get_providers", req: 7 });
    const e = await c.next();
    assert.equal(e.kind, "error");
    assert.equal(e.message.code, "control.hello_first");
    await c.closed;
  });

  test("no hello within 5 s: the connection is closed", { timeout: 15000 }, async () => {
    const c = await ControlClient.connect(gw.controlPort);
    const started = Date.now();
    await c.closed;
    const waited = Date.now() - started;
    assert.ok(waited >= 4500 && waited < 9000, `closed after ${waited} ms`);
  });

  test("garbage is answered with errors; the connection and the process survive", T, async () => {
    const c = await connect();
    c.sendRaw("hello as text", false);
    let e = await c.next();
    assert.equal(e.message.code, "control.bad_frame");
    c.sendRaw(Buffer.from([0x2a])); // the integer 42: not a map
    e = await c.next();
    assert.equal(e.kind, "error");
    assert.equal(e.message.code, "control.bad_message");
    c.sendRaw(Buffer.from([0x82, 0xa4, 0x6b, 0x69])); // a map cut short
    e = await c.next();
    assert.equal(e.message.code, "control.bad_message");
    c.sendRaw(c.proto.encodeMessage({ kind: "get_providers", req: 5 }).slice(0, 6));
    e = await c.next();
    assert.equal(e.message.code, "control.bad_message");
    // An unknown kind, with the req the client gave it.
    c.sendRaw(Buffer.from([0x82, 0xa4, ...Buffer.from("kind"), 0xa4, ...Buffer.from("nope"), 0xa3,
                           ...Buffer.from("req"), 0x09]));
    e = await c.next();
    assert.equal(e.message.code, "control.bad_message");
    assert.equal(e.req, 9);
    assert.match(e.message.text, /kind/);
    // A message only the server sends.
    c.sendMessage({ kind: "events_dropped", count: 1 });
    e = await c.next();
    assert.equal(e.message.code, "control.not_a_request");
    c.sendRaw(Buffer.alloc(2 * 1024 * 1024, 0x90));
    e = await c.next();
    assert.equal(e.message.code, "control.too_large");
    const ok = await c.request({ kind: "get_providers" });
    assert.equal(ok.kind, "ok");
    assert.equal(ok.providers[0].name, "only");
    await c.close();
  });

  test("snapshot then events: seq has no gap and every request's events are complete", T, async () => {
    const c = await connect();
    const snap = await c.request({ kind: "subscribe", topics: ["events"] });
    assert.equal(snap.kind, "snapshot");
    assert.equal(snap.seq, 0);
    const n = 40;
    for (let i = 0; i < n; i++) up.push(jsonReply(200, OK_MESSAGE));
    const answers = await Promise.all(Array.from({ length: n }, (_, i) => ask(`load ${i}`)));
    assert.deepEqual(answers.map((a) => a.status), Array(n).fill(200));
    const finished = new Set();
    const events = await eventsUntil(c, (ev) => {
      if (ev.kind === "request_finished") finished.add(ev.id);
      return finished.size === n;
    });
    events.forEach((m, i) => assert.equal(m.seq, snap.seq + 1 + i, "seq counts up by one"));
    for (const id of finished) {
      const k = kinds(events, id);
      assert.equal(k[0], "request_started");
      assert.equal(k.at(-1), "request_finished");
      assert.ok(k.includes("attempt"));
    }
    await c.close();
  });

  test("a subscriber that stops reading gets events_dropped; the others and the data plane go on", { timeout: 60000 }, async () => {
    const slow = await connect();
    await slow.request({ kind: "subscribe", topics: ["events"] });
    slow.ws._socket.pause(); // reads nothing from here on
    const fast = await connect();
    const snap = await fast.request({ kind: "subscribe", topics: ["events"] });
    // Long paths make each RequestStarted ~4 KB: the slow one's queue overflows within ~1 500 requests.
    const query = `?pad=${"x".repeat(4000)}`;
    const n = 1500;
    const started = Date.now();
    let next = 0;
    const statuses = [];
    await Promise.all(Array.from({ length: 32 }, async () => {
      while (next < n) {
        next++;
        up.push(jsonReply(200, OK_MESSAGE));
        statuses.push((await ask("load", { query })).status);
      }
    }));
    const ms = Date.now() - started;
    console.log(`# ${n} requests with a stalled subscriber: ${ms} ms (${Math.round((n * 1000) / ms)} req/s)`);
    assert.equal(statuses.filter((x) => x === 200).length, n);
    let finished = 0;
    const events = await eventsUntil(fast, (ev) => ev.kind === "request_finished" && ++finished === n, 20000);
    events.forEach((m, i) => assert.equal(m.seq, snap.seq + 1 + i));
    slow.ws._socket.resume();
    const dropped = await slow.next((m) => m.kind === "events_dropped", 20000);
    assert.ok(dropped.count > 0);
    const resync = await slow.request({ kind: "subscribe", topics: ["events"] }, 20000);
    assert.equal(resync.kind, "snapshot");
    assert.equal(resync.seq, 0);
    await slow.close();
    await fast.close();
  });

  test("a late subscriber sees a queued request's earlier events, then the rest", T, async () => {
    const c2 = await connect();
    // A pause with an end inside the request's deadline: it waits (an indefinite one would fail at once).
    const until = Date.now() + 20_000;
    assert.equal((await c2.request({ kind: "pause_provider", provider: "only", until_ms: until })).kind, "ok");
    up.push(jsonReply(200, OK_MESSAGE));
    const pending = ask("waits");
    // Until the request is queued (a busy machine may take seconds to get it there).
    let snap;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      snap = await c2.request({ kind: "subscribe", topics: ["events", "providers"] });
      if (snap.in_flight.length > 0 && snap.in_flight[0].events.some((e) => e.kind === "request_queued")) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(snap.in_flight.length, 1, "the request is in flight");
    const live = snap.in_flight[0];
    assert.deepEqual(live.events.map((e) => e.kind).slice(0, 2), ["request_started", "request_routed"]);
    const queued = live.events.find((e) => e.kind === "request_queued");
    assert.equal(queued.gates[0].upstream, "only");
    assert.equal(queued.gates[0].skip, "throttled");
    const view = snap.providers.find((p) => p.name === "only");
    assert.equal(view.throttle.kind, "manual");
    assert.equal(view.queued, 1);
    const inFlight = await c2.request({ kind: "get_in_flight" });
    assert.equal(inFlight.in_flight.requests[0].id, live.id);
    assert.equal((await c2.request({ kind: "resume_provider", provider: "only" })).kind, "ok");
    const rest = await eventsUntil(c2, (ev) => ev.kind === "request_finished" && ev.id === live.id);
    const k = kinds(rest, live.id);
    assert.equal(k[0], "request_dequeued");
    assert.equal(k.at(-1), "request_finished");
    assert.ok(rest.some((m) => m.event.kind === "throttle_changed" && m.event.provider === "only" && !m.event.throttle));
    assert.equal((await pending).status, 200);
    await c2.close();
  });

  test("ProviderChanged on the providers topic when an upstream's state changes", T, async () => {
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["providers"] });
    await c.request({ kind: "pause_provider", provider: "only", until_ms: Date.now() + 60_000 });
    const m = await c.next((x) => x.kind === "event" && x.event.kind === "provider_changed" && x.event.view.throttle);
    assert.equal(m.event.view.throttle.kind, "manual");
    assert.ok(Math.abs(m.event.view.throttle.until_ms - (Date.now() + 60_000)) < 5000);
    await c.request({ kind: "resume_provider", provider: "only" });
    const back = await c.next((x) => x.kind === "event" && x.event.kind === "provider_changed" && !x.event.view.throttle);
    assert.equal(back.event.view.name, "only");
    // Only the providers topic: no request events came.
    assert.ok(c.messages.every((x) => x.kind !== "event" || x.event.kind === "provider_changed"));
    await c.close();
  });

  test("a 429: ThrottleChanged paused, RequestQueued, RequestDequeued", T, async () => {
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after-ms": "500" }), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("paused once")).status, 200);
    const events = await eventsUntil(c, (ev) => ev.kind === "request_finished");
    const k = events.map((m) => m.event.kind);
    const throttle = events.find((m) => m.event.kind === "throttle_changed" && m.event.throttle).event;
    assert.equal(throttle.throttle.kind, "paused");
    assert.equal(throttle.throttle.consecutive, 1);
    assert.ok(k.indexOf("request_queued") > k.indexOf("throttle_changed"));
    assert.ok(k.indexOf("request_dequeued") > k.indexOf("request_queued"));
    await c.close();
  });

  test("cancel_request: a queued request is answered 503 gw.cancelled and ends cancelled", T, async () => {
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    await c.request({ kind: "pause_provider", provider: "only", until_ms: Date.now() + 20_000 });
    const pending = ask("cancel me");
    const queued = await c.next((x) => x.kind === "event" && x.event.kind === "request_queued");
    const r = await c.request({ kind: "cancel_request", id: queued.event.id });
    assert.equal(r.kind, "ok");
    const answer = await pending;
    assert.equal(answer.status, 503);
    assert.equal(answer.headers.get("x-sluice-error"), "gw.cancelled");
    const body = JSON.parse(answer.body);
    assert.equal(body.type, "error", "an Anthropic-shaped error");
    assert.match(body.error.message, /cancelled by an operator/);
    await c.next((x) => x.kind === "event" && x.event.kind === "request_cancelled" && x.event.id === queued.event.id);
    const unknown = await c.request({ kind: "cancel_request", id: 987654 });
    assert.equal(unknown.message.code, "control.unknown_request");
    await c.request({ kind: "resume_provider", provider: "only" });
    assert.equal(up.requests.length, 0, "the cancelled request never reached the upstream");
    await c.close();
  });

  // Nobody subscribed while the request went on: what reads the in-flight list (get_in_flight,
  // cancel_request, a late subscriber's snapshot) still has its whole history.
  test("nobody watching: get_in_flight, cancel_request and a late snapshot still see a request's whole history", T, async () => {
    const c = await connect();
    await c.request({ kind: "pause_provider", provider: "only", until_ms: Date.now() + 20_000 });
    const pending = ask("wait unseen");
    const live = await inFlightUntil(c, (reqs) => reqs.find((q) => q.events.some((e) => e.kind === "request_queued")), 10_000);
    assert.ok(live, "the queued request is in flight");
    const history = ["request_started", "request_routed", "attempt", "request_queued"]; // the attempt: skipped, paused
    assert.deepEqual(live.events.map((e) => e.kind), history);
    // A second reader, subscribing late, gets the same history in its snapshot.
    const late = await connect();
    const snap = await late.request({ kind: "subscribe", topics: ["events"] });
    const seen = snap.in_flight.find((q) => q.id === live.id);
    assert.deepEqual(seen.events.map((e) => e.kind), history);
    await late.close();
    assert.equal((await c.request({ kind: "cancel_request", id: live.id })).kind, "ok");
    assert.equal((await pending).status, 503);
    // Its end reaches the log when its worker hands over that loop turn's events: soon, not at once.
    assert.ok(await inFlightUntil(c, (reqs) => !reqs.some((q) => q.id === live.id), 10_000), "it ended");
    await c.request({ kind: "resume_provider", provider: "only" });
    await c.close();
  });

  // Nobody watching, a request's events are held unbuilt until anyone could look at it (telemetry.c):
  // one that neither waits nor ends within 50 ms is built by its worker's timer.
  test("nobody watching: a request slow to answer is in get_in_flight soon after it starts, and gone at its end", T, async () => {
    const c = await connect();
    up.push({ ...jsonReply(200, OK_MESSAGE), delayMs: 2500 });
    const pending = ask("slow unseen");
    const live = await inFlightUntil(c, (reqs) => reqs[0], 1500, 20);
    assert.ok(live, "in flight within 1.5 s, long before its answer");
    assert.deepEqual(live.events.map((e) => e.kind), ["request_started", "request_routed"]);
    assert.equal((await pending).status, 200);
    assert.ok(await inFlightUntil(c, (reqs) => !reqs.some((q) => q.id === live.id), 10_000), "it ended");
    await c.close();
  });

  // A subscriber that comes while a request's events are still held gets them all, once and in order:
  // in its snapshot or live, the same as a request watched from its start.
  test("a subscriber joining while a request is young gets all its events once, in order", T, async () => {
    const watched = await connect();
    await watched.request({ kind: "subscribe", topics: ["events"] });
    up.push({ ...jsonReply(200, OK_MESSAGE), delayMs: 200 });
    assert.equal((await ask("watched from its start")).status, 200);
    const reference = await eventsUntil(watched, (e) => e.kind === "request_finished");
    const expected = kinds(reference, reference.at(-1).event.id);
    await watched.close();
    // Nobody watches once the control thread's next delivery has seen the subscriber go.
    await new Promise((r) => setTimeout(r, 300));
    up.push({ ...jsonReply(200, OK_MESSAGE), delayMs: 200 });
    const pending = ask("young");
    const late = await connect();
    const snap = await late.request({ kind: "subscribe", topics: ["events"] });
    const live = await eventsUntil(late, (e) => e.kind === "request_finished");
    const id = live.at(-1).event.id;
    const inSnapshot = (snap.in_flight.find((q) => q.id === id)?.events ?? []).map((e) => e.kind);
    assert.deepEqual([...inSnapshot, ...kinds(live, id)], expected);
    assert.equal((await pending).status, 200);
    await late.close();
  });

  test("history: rows from the request DB, newest first, with their attempts and filters", T, async () => {
    const c = await connect();
    up.push(jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("for history")).status, 200);
    // Until the writer has committed the row (it batches; a busy disk may take seconds).
    let rows = [];
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && rows.length === 0;) {
      const r = await c.request({ kind: "history", since_ms: Date.now() - 60_000, limit: 5, filter: { status: 200 } });
      rows = r.rows;
      if (rows.length === 0) await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(rows.length > 0);
    assert.equal(rows[0].status, 200);
    assert.equal(rows[0].provider, "only");
    assert.equal(rows[0].attempts.at(-1).outcome, "served");
    const none = await c.request({ kind: "history", since_ms: 0, limit: 5, filter: { client: "nobody" } });
    assert.deepEqual(none.rows, []);
    const bad = await c.request({ kind: "history", since_ms: 0, limit: 5, filter: {}, cursor: "garbage" });
    assert.equal(bad.message.code, "control.history_failed");
    await c.close();
  });

  test("stats: the snapshot has the hour, and the next interval counts a retried request as rescued", { timeout: 40000 }, async () => {
    await gateway({ waitSecs: 30 });
    const c = await connect();
    const snap = await c.request({ kind: "subscribe", topics: ["stats"] });
    assert.equal(snap.kind, "snapshot");
    assert.ok(Array.isArray(snap.stats), "a stats subscription's snapshot has the intervals");
    assert.ok(snap.stats_totals.since_ms <= Date.now() && snap.stats_totals.since_ms > Date.now() - 60_000);
    // One retried after an overload, one paused behind a 429 that then went through: both rescued.
    up.push(jsonReply(529, OVERLOADED), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("retried")).status, 200);
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after-ms": "1500" }), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("queued")).status, 200);
    // Intervals end on 10 s boundaries of the wall clock: until those requests have been counted.
    const rescued = {};
    const seen = { requests: 0, temporary: 0, rate_limited: 0, first_tokens: 0, paused_ms: 0, input_tokens: 0 };
    let ttft;
    const deadline = Date.now() + 25_000;
    while ((rescued.retried ?? 0) + (rescued.failed_over ?? 0) + (rescued.queued_429 ?? 0) < 2) {
      const m = await c.next((x) => x.kind === "event", Math.max(1, deadline - Date.now()));
      assert.equal(m.event.kind, "stats_reported", "only the stats topic's events");
      const iv = m.event.interval;
      assert.ok(iv.ms > 0 && iv.ms <= 10_000);
      assert.equal((iv.start_ms + iv.ms) % 10_000, 0, "an interval ends on a 10 s boundary");
      for (const t of iv.rescued) rescued[t.cause] = (rescued[t.cause] ?? 0) + t.count;
      assert.deepEqual(iv.lost, []);
      const p = iv.providers.find((x) => x.name === "only");
      for (const k of Object.keys(seen)) seen[k] += p[k];
      ttft ??= p.ttft_p50_ms;
    }
    assert.equal(rescued.retried, 1, JSON.stringify(rescued));
    assert.equal((rescued.failed_over ?? 0) + (rescued.queued_429 ?? 0), 1, JSON.stringify(rescued));
    assert.equal(seen.requests, 4, "four hops");
    assert.equal(seen.temporary, 1, "the overload");
    assert.equal(seen.rate_limited, 1, "the 429");
    assert.equal(seen.first_tokens, 2);
    assert.equal(seen.input_tokens, 6);
    assert.ok(seen.paused_ms >= 1000, `paused ${seen.paused_ms} ms behind the 429`);
    // The fake answers at once: the first token waits only for the retry's backoff or the 429's pause.
    assert.ok(ttft > 0 && ttft <= 4000, `p50 first token ${ttft} ms`);
    // A resubscription's snapshot has those intervals and the totals since start.
    const again = await c.request({ kind: "subscribe", topics: ["stats"] });
    const total = again.stats_totals.rescued.reduce((n, t) => n + t.count, 0);
    assert.equal(total, 2);
    assert.ok(again.stats.length >= 1);
    assert.equal(again.stats.reduce((n, iv) => n + iv.rescued.reduce((k, t) => k + t.count, 0), 0), 2);
    await c.close();
  });

  test("a retried request: RequestRetrying, then RequestDequeued and an Attempt with retry and backoff_ms", T, async () => {
    process.env.SLUICE_TEST_TIME_SCALE = "0.01";
    try {
      await gateway({ waitSecs: 30 });
    } finally {
      delete process.env.SLUICE_TEST_TIME_SCALE;
    }
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    up.push(jsonReply(529, OVERLOADED), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("retried")).status, 200);
    const events = await eventsUntil(c, (ev) => ev.kind === "request_finished");
    const k = events.map((m) => m.event.kind);
    const retrying = events.find((m) => m.event.kind === "request_retrying").event;
    assert.equal(retrying.attempt, 1);
    assert.equal(retrying.cause, "schedule");
    assert.deepEqual(retrying.upstreams, ["only"]);
    assert.ok(k.indexOf("request_dequeued") > k.indexOf("request_retrying"));
    const attempts = events.filter((m) => m.event.kind === "attempt").map((m) => m.event.view);
    assert.equal(attempts[0].outcome, "status");
    assert.equal(attempts[0].status, 529);
    assert.equal(attempts[1].outcome, "served");
    assert.equal(attempts[1].retry, 1);
    assert.ok(attempts[1].backoff_ms >= 0);
    await c.close();
  });
});

describe("control endpoint: config pushes, reloads and safe mode", () => {
  let dir;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-control-"));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  beforeEach(() => up.reset());

  function writeConfig(extra = "", providerExtra = "", controlExtra = "", clientExtra = "") {
    const file = path.join(dir, "sluice.yaml");
    fs.writeFileSync(
      file,
      [
        "# the test's config; comments stay",
        "listen:",
        "  gateway: {bind: 127.0.0.1, port: 0}",
        `  control: {bind: 127.0.0.1, port: 0, key: "${CONTROL_KEY}"${controlExtra}}`,
        "clients:",
        `  - {name: sdk, key: "${GATEWAY_KEY}"${clientExtra}}`,
        "providers:",
        "  - name: only",
        "    protocol: anthropic",
        `    base_url: "http://127.0.0.1:${up.port}"`,
        "    key: upstream-secret-literal",
        providerExtra,
        "failover: {wait_secs: 0}",
        `store: {path: "${path.join(dir, "sluice.db")}"}`,
        "shutdown_grace_secs: 1",
        extra,
      ].join("\n"),
    );
    return file;
  }

  test("set_provider_limits: the next request is held to it, and it survives a restart", T, async () => {
    const file = writeConfig();
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    const r = await c.request({ kind: "set_provider_limits", provider: "only",
                                limits: [{ per: "minute", every: 1, requests: 1 }] });
    assert.equal(r.kind, "ok", JSON.stringify(r));
    const changed = await c.next((x) => x.kind === "event" && x.event.kind === "limits_changed");
    assert.deepEqual(changed.event.limits, [{ per: "minute", every: 1, requests: 1 }]);
    up.push(jsonReply(200, OK_MESSAGE), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("one")).status, 200);
    const second = await ask("two");
    assert.equal(second.status, 429);
    assert.equal(second.headers.get("x-sluice-error"), "gw.wait.window_full");
    const text = fs.readFileSync(file, "utf8");
    assert.match(text, /limits:\n\s+- \{per: minute, requests: 1\}/);
    assert.match(text, /^# the test's config; comments stay/);
    assert.match(text, /key: upstream-secret-literal/);
    const bad = await c.request({ kind: "set_provider_limits", provider: "nope", limits: [] });
    assert.equal(bad.message.code, "control.unknown_provider");
    const twoMeasures = await c.request({ kind: "set_provider_limits", provider: "only",
                                          limits: [{ per: "minute", every: 1, requests: 1, tokens: 5 }] });
    assert.equal(twoMeasures.message.code, "control.bad_limit");
    await c.close();
    // Restarted on the same file: the limit is there and so is what it counted.
    await gw.stop();
    gw = await startGateway([], { configPath: file });
    const d = await connect();
    const views = (await d.request({ kind: "get_providers" })).providers;
    assert.deepEqual(views[0].limits.map((l) => [l.requests, l.used]), [[1, 1]]);
    assert.equal((await ask("three")).status, 429);
    await d.close();
  });

  test("put_config: a stale revision or an invalid file changes nothing; a valid one applies and is written", T, async () => {
    const file = writeConfig();
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    const got = await c.request({ kind: "get_config" });
    assert.equal(got.persisted, true);
    assert.match(got.yaml, /key: "\*\*\*"/);
    assert.ok(!got.yaml.includes("upstream-secret-literal"), "literal secrets are not shown");
    const before = fs.readFileSync(file, "utf8");
    const stale = await c.request({ kind: "put_config", yaml: got.yaml, expect_revision: got.revision + 5 });
    assert.equal(stale.message.code, "control.config.conflict");
    const typo = got.yaml.replace("failover: {wait_secs: 0}", "failover: {wiat_secs: 0}");
    const rejected = await c.request({ kind: "put_config", yaml: typo, expect_revision: got.revision });
    assert.equal(rejected.message.code, "control.config.rejected");
    assert.equal(rejected.problems[0].code, "config.unknown_field");
    assert.equal(rejected.problems[0].args.path, "failover.wiat_secs");
    const ev = await c.next((x) => x.kind === "event" && x.event.kind === "config_rejected");
    assert.equal(ev.event.problems[0].code, "config.unknown_field");
    assert.equal(fs.readFileSync(file, "utf8"), before, "the file is untouched");
    assert.equal((await c.request({ kind: "get_config" })).revision, got.revision);
    const valid = got.yaml.replace("failover: {wait_secs: 0}", "failover: {wait_secs: 5}");
    const applied = await c.request({ kind: "put_config", yaml: valid, expect_revision: got.revision });
    assert.equal(applied.kind, "ok", JSON.stringify(applied));
    const reloaded = await c.next((x) => x.kind === "event" && x.event.kind === "config_reloaded");
    assert.equal(reloaded.event.source, "control");
    assert.equal(reloaded.event.revision, got.revision + 1);
    const written = fs.readFileSync(file, "utf8");
    assert.match(written, /wait_secs: 5/);
    assert.match(written, /key: upstream-secret-literal/, "a *** sent back keeps the secret");
    up.push(jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("after put")).status, 200);
    assert.equal(up.requests[0].headers["x-api-key"], "upstream-secret-literal");
    // sluice's own write is not reloaded a second time by the file watcher.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await c.request({ kind: "get_config" })).revision, got.revision + 1);
    await c.close();
  });

  test("hot reload on a file change keeps an upstream's 429 pause", T, async () => {
    const file = writeConfig();
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    const c = await connect();
    await c.request({ kind: "subscribe", topics: ["events"] });
    up.push(jsonReply(429, RATE_LIMITED, { "retry-after": "60" }));
    assert.equal((await ask("paused")).status, 429);
    let view = (await c.request({ kind: "get_providers" })).providers[0];
    assert.equal(view.throttle.kind, "paused");
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace("wait_secs: 0", "wait_secs: 1"));
    const reloaded = await c.next((x) => x.kind === "event" && x.event.kind === "config_reloaded", 5000);
    assert.equal(reloaded.event.source, "file");
    view = (await c.request({ kind: "get_providers" })).providers[0];
    assert.equal(view.throttle.kind, "paused", "the pause carried over");
    // An invalid edit changes nothing and says why.
    fs.writeFileSync(file, fs.readFileSync(file, "utf8") + "bogus_key: 1\n");
    const rejected = await c.next((x) => x.kind === "event" && x.event.kind === "config_rejected", 5000);
    assert.equal(rejected.event.problems[0].code, "config.unknown_field");
    assert.equal((await ask("still paused")).status, 429);
    await c.close();
  });

  test("safe mode: 503 gw.safe_mode, the problems and a repair that brings sluice back", T, async () => {
    const leaked = "sk-ant-api03-ThisIsAMisspeltSecretField0123456789";
    const file = writeConfig("bogus_key: 1\n", `    api_kee: ${leaked}`);
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    const answer = await ask("in safe mode");
    assert.equal(answer.status, 503);
    assert.equal(answer.headers.get("x-sluice-error"), "gw.safe_mode");
    const c = await connect();
    const got = await c.request({ kind: "get_config" });
    assert.deepEqual(got.problems.map((p) => [p.code, p.args.path]),
                     [["config.unknown_field", "providers[0].api_kee"], ["config.unknown_field", "bogus_key"]]);
    assert.ok(!got.yaml.includes(leaked), "a secret under a misspelt field is masked too");
    assert.ok(got.repair_yaml && !got.repair_yaml.includes("bogus_key") && !got.repair_yaml.includes("api_kee"));
    const limits = await c.request({ kind: "set_provider_limits", provider: "only", limits: [] });
    assert.equal(limits.message.code, "control.safe_mode");
    const fixed = await c.request({ kind: "put_config", yaml: got.repair_yaml, expect_revision: got.revision });
    assert.equal(fixed.kind, "ok", JSON.stringify(fixed));
    up.push(jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("repaired")).status, 200);
    assert.ok(!fs.readFileSync(file, "utf8").includes("bogus_key"));
    assert.equal((await c.request({ kind: "get_config" })).problems, undefined);
    await c.close();
  });

  test("set_key_limits: a client key's limit applies to its next request and is written back", T, async () => {
    const file = writeConfig();
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    const c = await connect();
    const r = await c.request({ kind: "set_key_limits", client: "sdk", limits: [{ per: "day", every: 1, requests: 1 }] });
    assert.equal(r.kind, "ok", JSON.stringify(r));
    up.push(jsonReply(200, OK_MESSAGE), jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("one")).status, 200);
    const second = await ask("two");
    assert.equal(second.status, 429);
    assert.equal(second.headers.get("x-sluice-error"), "gw.key.used_up");
    assert.match(fs.readFileSync(file, "utf8"), /- \{name: sdk, key: "[^"]+", limits: \[\{per: day, requests: 1\}\]\}/);
    const unknown = await c.request({ kind: "set_key_limits", client: "nobody", limits: [] });
    assert.equal(unknown.message.code, "control.unknown_client");
    await c.close();
  });

  test("allow_from: a control connection from outside the ranges is refused", T, async () => {
    const file = writeConfig("", "", ", allow_from: [10.0.0.0/8]");
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    await assert.rejects(ControlClient.connect(gw.controlPort, { key: CONTROL_KEY }));
    up.push(jsonReply(200, OK_MESSAGE));
    assert.equal((await ask("the data plane is not affected")).status, 200);
  });

  test("TLS: the control endpoint serves wss with the configured certificate", T, async () => {
    const cert = path.join(dir, "cert.pem");
    const key = path.join(dir, "key.pem");
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                             "-days", "1", "-subj", "/CN=localhost"], { stdio: "ignore" });
    const file = writeConfig("", "", `, tls: {cert: "${cert}", key: "${key}"}`);
    await gw?.stop();
    gw = await startGateway([], { configPath: file });
    assert.match(gw.log(), /control endpoint on wss:/);
    const c = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY, tls: { ca: fs.readFileSync(cert), servername: "localhost" } });
    assert.equal((await c.next()).kind, "welcome");
    await c.close();
    // A plain ws:// client gets nowhere.
    await assert.rejects(ControlClient.connect(gw.controlPort, { key: CONTROL_KEY }));
  });
});

// The state reducer: realistic event sequences in, the board, the provider board and the timeline out.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import {
  T0,
  attempt,
  cancelled,
  clusterChanged,
  dequeued,
  failed,
  finished,
  firstToken,
  headers,
  instance,
  instancesOk,
  msg,
  paused,
  provider,
  queued,
  retrying,
  routed,
  snapshot,
  started,
  storeChanged,
  providersOk,
  throttle,
} from "./events.mjs";
import { load } from "./load.mjs";

let m;
before(async () => {
  m = await load();
});

// Applies events as a stream would deliver them (seq counting on from the state's).
function feed(s, events, now) {
  for (const ev of events) m.applyEnvelope(s, s.seq + 1, ev, now ?? ev.at_ms);
  return s;
}

function fresh(providers = [provider("anthropic-a"), provider("anthropic-b")]) {
  const s = m.initialState();
  m.applySnapshot(s, snapshot({ providers, seq: 10 }));
  return s;
}

const kinds = (tl) => tl.phases.map((p) => p.kind);
const labels = (tl) => tl.phases.map((p) => p.label);

describe("snapshot", () => {
  test("fills the providers in order, takes the seq and is synced", () => {
    const s = m.initialState();
    assert.equal(s.synced, false);
    m.applySnapshot(s, snapshot({ providers: [provider("b"), provider("a", { in_flight: 2, max_concurrent: 4 })], seq: 42 }));
    assert.deepEqual(s.providerOrder, ["b", "a"]);
    assert.equal(s.providers.a.in_flight, 2);
    assert.equal(s.providers.a.max_concurrent, 4);
    assert.equal(s.seq, 42);
    assert.equal(s.synced, true);
    assert.equal(s.loaded, true);
    assert.deepEqual(m.boardRows(s), []);
  });

  test("a late subscriber: in-flight requests are rebuilt from their replayed events, then the stream goes on", () => {
    const s = m.initialState();
    const th = paused("anthropic-a", 100, 5000);
    m.applySnapshot(
      s,
      snapshot({
        now_ms: T0 + 3000,
        seq: 7,
        providers: [provider("anthropic-a", { throttle: th, queued: 1 })],
        in_flight: [
          {
            id: 5,
            events: [
              started(5, 0),
              routed(5, 1, ["anthropic-a"]),
              attempt(5, 100, { provider: "anthropic-a", outcome: "status", status: 429, ms: 99 }),
              queued(5, 101, [{ upstream: "anthropic-a", skip: "throttled", until_ms: T0 + 5100 }]),
            ],
          },
        ],
      }),
    );
    const r = s.requests[5];
    assert.equal(r.state, "queued");
    assert.equal(r.client, "alice");
    assert.equal(r.partial, false);
    const st = m.statusOf(r);
    assert.equal(st.label, "queued: anthropic-a paused (429)");
    assert.equal(st.until, T0 + 5100);
    assert.deepEqual(m.providerQueue(s, "anthropic-a"), { waiting: 1, oldestSince: T0 + 101 });

    // The first event after the snapshot has seq = snapshot.seq + 1.
    m.applyEnvelope(s, 8, throttle("anthropic-a", 5100, null), T0 + 5100);
    m.applyEnvelope(s, 9, dequeued(5, 5101, "anthropic-a"), T0 + 5101);
    m.applyEnvelope(s, 10, firstToken(5, 6000), T0 + 6000);
    assert.equal(s.synced, true);
    assert.equal(s.providers["anthropic-a"].throttle, undefined);
    assert.equal(r.state, "streaming");
    assert.equal(r.provider, "anthropic-a");
    const q = m.timelineOf(r, T0 + 6000).phases.find((p) => p.kind === "queue");
    assert.equal(q.label, "queued: anthropic-a paused (429) 5.0 s");
    assert.match(q.detail, /went to anthropic-a/);
  });

  test("a resnapshot replaces live requests without duplicating their phases", () => {
    const s = fresh();
    const evs = [started(1, 0), routed(1, 1, ["anthropic-a"]), queued(1, 2, [{ upstream: "anthropic-a", skip: "busy" }])];
    feed(s, evs);
    m.applySnapshot(s, snapshot({ now_ms: T0 + 50, seq: 99, providers: [provider("anthropic-a")], in_flight: [{ id: 1, events: evs }] }));
    assert.equal(s.requests[1].segments.length, 1);
    assert.equal(s.requests[1].state, "queued");
    assert.deepEqual(s.providerOrder, ["anthropic-a"], "providers are the snapshot's");
  });
});

describe("a retried request", () => {
  const id = 17;
  const seq = [
    started(id, 0),
    routed(id, 2, ["anthropic-a"]),
    attempt(id, 122, {
      provider: "anthropic-a",
      model: "claude-sonnet-4",
      outcome: "status",
      status: 529,
      ms: 120,
      error: msg("gw.upstream.status", "sluice: anthropic-a answered 529", { provider: "anthropic-a", status: "529" }),
    }),
    retrying(id, 123),
    dequeued(id, 2223),
    attempt(id, 5000, { provider: "anthropic-a", outcome: "served", status: 200, ms: 2777, retry: 1, backoff_ms: 2100 }),
  ];

  test("moves through attempting, backoff (with its countdown), attempting, streaming, done", () => {
    const s = fresh();
    feed(s, seq.slice(0, 2));
    assert.equal(s.requests[id].state, "attempting");
    assert.equal(m.statusOf(s.requests[id]).label, "attempt 1 on anthropic-a");
    feed(s, seq.slice(2, 4));
    const r = s.requests[id];
    assert.equal(r.state, "backoff");
    const st = m.statusOf(r);
    assert.equal(st.until, T0 + 123 + 2100);
    assert.match(st.label, /backing off \(schedule\) before retry 1 on anthropic-a/);
    assert.match(st.detail, /gw.upstream.status/);
    feed(s, [seq[4]]);
    assert.equal(r.state, "attempting");
    assert.equal(m.statusOf(r).label, "attempt 2 on anthropic-a");
    feed(s, [headers(id, 3600), firstToken(id, 3623, 3623)]);
    assert.equal(r.state, "streaming");
    assert.equal(r.ttftMs, 3623);
    assert.equal(m.statusOf(r).label, "streaming from anthropic-a, first token 3.6 s");
    feed(s, [seq[5], finished(id, 5001)]);
    assert.equal(r.state, "done");
    assert.equal(r.status, 200);
    assert.equal(r.hops, 2);
  });

  test("its timeline: attempt 529, backoff with cause and last error, attempt served, first token, end", () => {
    const s = fresh();
    feed(s, [...seq.slice(0, 5), headers(id, 3600), firstToken(id, 3623, 3623), seq[5], finished(id, 5001)]);
    const tl = m.timelineOf(s.requests[id], T0 + 9000);
    assert.deepEqual(kinds(tl), ["attempt", "backoff", "attempt", "first-token", "end"]);
    assert.deepEqual(labels(tl), [
      "attempt 1 anthropic-a 529 overloaded 120 ms",
      "backoff 2.1 s (schedule) after gw.upstream.status",
      "attempt 2 anthropic-a served 2.8 s (retry 1)",
      "first token 3.6 s",
      "done 200 in 5.0 s",
    ]);
    const [a1, b, a2] = tl.phases;
    assert.equal(a1.start, T0 + 2);
    assert.equal(a1.end, T0 + 122);
    assert.equal(b.start, T0 + 123);
    assert.equal(b.end, T0 + 2223);
    assert.match(b.detail, /sluice: anthropic-a answered 529/);
    assert.equal(a2.start, T0 + 2223);
    assert.equal(tl.start, T0);
    assert.equal(tl.end, T0 + 5001);
    assert.equal(tl.live, false);
  });

  test("while backing off, the timeline's open backoff counts down to retry_at", () => {
    const s = fresh();
    feed(s, seq.slice(0, 4));
    const tl = m.timelineOf(s.requests[id], T0 + 1123);
    const b = tl.phases.at(-1);
    assert.equal(b.kind, "backoff");
    assert.equal(b.open, true);
    assert.equal(b.end, T0 + 1123);
    assert.equal(b.label, "backoff 2.1 s (schedule) after gw.upstream.status: retry 1 in 1.1 s");
  });

  test("a backoff lengthened by the upstream's hint says so", () => {
    const s = fresh();
    feed(s, [...seq.slice(0, 3), retrying(id, 123, { cause: "hint", retry_at_ms: T0 + 8123 }), dequeued(id, 8123)]);
    const b = m.timelineOf(s.requests[id], T0 + 9000).phases.find((p) => p.kind === "backoff");
    assert.equal(b.label, "backoff 8.0 s (hint) after gw.upstream.status");
  });
});

describe("a 429 storm", () => {
  test("the provider pauses, requests queue on it with the gate, then leave the queue when it recovers", () => {
    const s = fresh();
    feed(s, [
      started(1, 0),
      routed(1, 1, ["anthropic-a"]),
      attempt(1, 80, { provider: "anthropic-a", outcome: "status", status: 429, ms: 78 }),
      throttle("anthropic-a", 81, paused("anthropic-a", 81, 3200)),
      queued(1, 82, [{ upstream: "anthropic-a", skip: "throttled", until_ms: T0 + 3281 }]),
      started(2, 500),
      routed(2, 501, ["anthropic-a"]),
      queued(2, 502, [{ upstream: "anthropic-a", skip: "throttled", until_ms: T0 + 3281 }]),
    ]);
    const p = s.providers["anthropic-a"];
    assert.equal(p.throttle.kind, "paused");
    assert.equal(p.throttle.until_ms, T0 + 3281);
    assert.equal(p.throttleSince, T0 + 81);
    assert.deepEqual(m.providerQueue(s, "anthropic-a"), { waiting: 2, oldestSince: T0 + 82 });
    assert.deepEqual(
      m.boardRows(s).map((r) => [r.id, r.state]),
      [
        [1, "queued"],
        [2, "queued"],
      ],
    );
    assert.equal(s.requests[2].segments[0].gates[0].reason.code, "gw.upstream.paused");

    feed(s, [
      throttle("anthropic-a", 3281, { kind: "probing", consecutive: 1, reason: msg("gw.upstream.probing", "probing") }),
      dequeued(1, 3282, "anthropic-a"),
    ]);
    assert.equal(p.throttle.kind, "probing");
    assert.equal(s.requests[1].state, "attempting");
    assert.equal(m.providerQueue(s, "anthropic-a").waiting, 1);
    feed(s, [
      attempt(1, 3500, { provider: "anthropic-a", outcome: "served", status: 200, ms: 218, pause_ms: 3200 }),
      finished(1, 3501),
      throttle("anthropic-a", 3502, null),
      dequeued(2, 3503, "anthropic-a"),
    ]);
    assert.equal(p.throttle, undefined);
    assert.equal(p.throttleSince, undefined);
    const tl = m.timelineOf(s.requests[1], T0 + 4000);
    assert.deepEqual(kinds(tl), ["attempt", "queue", "attempt", "end"]);
    assert.equal(tl.phases[0].label, "attempt 1 anthropic-a 429 rate limited 78 ms");
    assert.equal(tl.phases[1].label, "queued: anthropic-a paused (429) 3.2 s");
    assert.equal(tl.phases[1].end, T0 + 3282);
    assert.match(tl.phases[2].detail, /queued 3.2 s before it/);
  });

  test("a request queued on several upstreams shows every gate, and the soonest one counts down", () => {
    const s = fresh();
    feed(s, [
      throttle("anthropic-a", 0, { kind: "manual", until_ms: T0 + 60_000, consecutive: 0, reason: msg("gw.upstream.paused_manually", "by hand") }),
      started(3, 10),
      routed(3, 11, ["anthropic-a", "anthropic-b"]),
      queued(3, 12, [
        { upstream: "anthropic-a", skip: "throttled", until_ms: T0 + 60_000 },
        { upstream: "anthropic-b", skip: "window_full", until_ms: T0 + 20_000 },
      ]),
    ]);
    const st = m.statusOf(s.requests[3]);
    assert.equal(st.label, "queued: anthropic-a paused by an operator, anthropic-b window full");
    assert.equal(st.until, T0 + 20_000);
    assert.equal(m.providerQueue(s, "anthropic-b").waiting, 1);
  });

  test("a request waiting for its key's window names the key", () => {
    const s = fresh();
    feed(s, [started(4, 0), queued(4, 1, [{ upstream: "alice", skip: "key_window", until_ms: T0 + 30_000 }])]);
    assert.equal(m.statusOf(s.requests[4]).label, "queued: alice key window full");
  });
});

describe("ends", () => {
  test("cancelled while queued: the queue wait ends at the cancel, the end says cancelled", () => {
    const s = fresh();
    feed(s, [
      started(8, 0),
      routed(8, 1, ["anthropic-a"]),
      queued(8, 2, [{ upstream: "anthropic-a", skip: "busy" }]),
      cancelled(8, 4000),
    ]);
    const r = s.requests[8];
    assert.equal(r.state, "cancelled");
    assert.equal(m.statusOf(r).label, "cancelled");
    const tl = m.timelineOf(r, T0 + 10_000);
    assert.deepEqual(kinds(tl), ["queue", "end"]);
    assert.equal(tl.phases[0].end, T0 + 4000);
    assert.equal(tl.phases[0].open, false);
    assert.equal(tl.phases[0].label, "queued: anthropic-a busy 4.0 s");
    assert.equal(tl.phases[1].label, "cancelled after 4.0 s");
    assert.equal(m.providerQueue(s, "anthropic-a").waiting, 0);
  });

  test("failed with sluice's own error: the code and source, and its text as detail", () => {
    const s = fresh();
    const why = msg(
      "gw.wait.rate_limited",
      "sluice: the upstreams for this model are rate limited and none can take the request before its deadline",
    );
    feed(s, [
      started(9, 0),
      routed(9, 1, ["anthropic-a"]),
      attempt(9, 50, { provider: "anthropic-a", outcome: "status", status: 429, ms: 49 }),
      failed(9, 51, "rate_limited", why),
    ]);
    const r = s.requests[9];
    assert.equal(r.state, "failed");
    assert.equal(m.statusOf(r).label, "failed: gw.wait.rate_limited");
    const end = m.timelineOf(r, T0 + 100).phases.at(-1);
    assert.equal(end.kind, "end");
    assert.equal(end.label, "failed gw.wait.rate_limited (rate_limited) after 51 ms");
    assert.equal(end.detail, why.text);
    assert.equal(end.tone, "bad");
  });

  test("failover: a skipped candidate and a broken hop, then served by the next", () => {
    const s = fresh();
    feed(s, [
      started(11, 0),
      routed(11, 1, ["anthropic-a", "anthropic-b", "relay"]),
      attempt(11, 2, { provider: "anthropic-a", outcome: "skipped", skipped: "cooling", ms: 0 }),
    ]);
    assert.equal(m.statusOf(s.requests[11]).label, "attempt 1 on anthropic-b", "the skip moved the guess on");
    feed(s, [
      attempt(11, 300, {
        provider: "anthropic-b",
        outcome: "error",
        ms: 298,
        error: msg("gw.upstream.broken_before_content", "sluice: the stream from anthropic-b broke before any content"),
      }),
    ]);
    assert.equal(m.statusOf(s.requests[11]).label, "attempt 2 on relay");
    feed(s, [
      firstToken(11, 900),
      attempt(11, 1500, { provider: "relay", outcome: "served", status: 200, ms: 1199 }),
      finished(11, 1501),
    ]);
    const tl = m.timelineOf(s.requests[11], T0 + 2000);
    assert.deepEqual(kinds(tl), ["skip", "attempt", "attempt", "first-token", "end"]);
    assert.equal(tl.phases[0].label, "skipped anthropic-a: cooling (breaker open)");
    assert.equal(tl.phases[1].label, "attempt 1 anthropic-b gw.upstream.broken_before_content 298 ms");
    assert.equal(tl.phases[2].label, "attempt 2 relay served 1.2 s");
  });

  test("a hop in flight is an open attempt phase that grows with now", () => {
    const s = fresh();
    feed(s, [started(12, 0), routed(12, 5, ["anthropic-b"])]);
    const tl = m.timelineOf(s.requests[12], T0 + 1500);
    assert.equal(tl.live, true);
    assert.equal(tl.end, T0 + 1500);
    const p = tl.phases.at(-1);
    assert.deepEqual([p.kind, p.open, p.start, p.end], ["attempt", true, T0, T0 + 1500]);
    assert.equal(p.label, "attempt 1 anthropic-b in flight 1.5 s");
  });
});

describe("resync", () => {
  test("a seq gap and events_dropped both mark the state unsynced until the next snapshot", () => {
    const s = fresh();
    m.applyEnvelope(s, 11, started(1, 0), T0);
    assert.equal(s.synced, true);
    m.applyEnvelope(s, 13, routed(1, 1, ["anthropic-a"]), T0);
    assert.equal(s.synced, false, "event 12 is missing");
    m.applySnapshot(s, snapshot({ seq: 200, providers: [provider("anthropic-a")], in_flight: [{ id: 1, events: [started(1, 0)] }] }));
    assert.equal(s.synced, true);
    m.applyEventsDropped(s, 37, T0 + 10);
    assert.equal(s.synced, false);
    assert.equal(s.droppedEvents, 37);
    assert.match(s.notices.at(-1).text, /37 events were dropped/);
  });

  test("after events_dropped, a request the new snapshot no longer lists is marked gone; listed ones go on", () => {
    const s = fresh();
    feed(s, [started(1, 0), routed(1, 1, ["anthropic-a"]), started(2, 5), routed(2, 6, ["anthropic-b"])]);
    m.applyEventsDropped(s, 500, T0 + 100);
    m.applySnapshot(
      s,
      snapshot({
        now_ms: T0 + 2000,
        seq: 900,
        providers: [provider("anthropic-a"), provider("anthropic-b")],
        in_flight: [{ id: 2, events: [started(2, 5), routed(2, 6, ["anthropic-b"]), firstToken(2, 1500)] }],
      }),
    );
    assert.equal(s.requests[1].state, "gone");
    assert.equal(s.requests[1].endedAt, T0 + 2000);
    assert.equal(m.timelineOf(s.requests[1], T0 + 2000).phases.at(-1).label, "ended while the app was resyncing (outcome not seen)");
    assert.equal(s.requests[2].state, "streaming");
    m.applyEnvelope(s, 901, finished(2, 2500), T0 + 2500);
    assert.equal(s.requests[2].state, "done");
    assert.equal(s.synced, true);
  });

  test("events of a request whose start was lost make a partial row; late events of a recent one are ignored", () => {
    const s = fresh();
    feed(s, [attempt(30, 100, { provider: "anthropic-a", outcome: "status", status: 503, ms: 50 })]);
    assert.equal(s.requests[30].partial, true);
    assert.equal(s.requests[30].client, "?");
    feed(s, [started(31, 0), finished(31, 10)]);
    m.tick(s, T0 + 10 + m.BOARD_KEEP_MS + 1);
    assert.equal(s.requests[31], undefined);
    feed(s, [attempt(31, 20, { provider: "anthropic-a", outcome: "served", ms: 5 })], T0 + 70_000);
    assert.equal(s.requests[31], undefined, "not resurrected on the board");
    assert.equal(s.recent[0].id, 31);
  });
});

describe("the board", () => {
  test("ended requests leave for recent after BOARD_KEEP_MS; live ones stay however old", () => {
    const s = fresh();
    feed(s, [started(1, 0), routed(1, 1, ["anthropic-a"]), started(2, 10), finished(2, 20)]);
    m.tick(s, T0 + 20 + m.BOARD_KEEP_MS);
    assert.ok(s.requests[2], "still on the board at exactly the limit");
    m.tick(s, T0 + 21 + m.BOARD_KEEP_MS + 10 * m.BOARD_KEEP_MS);
    assert.equal(s.requests[2], undefined);
    assert.deepEqual(s.recent.map((r) => r.id), [2]);
    assert.ok(s.requests[1], "live");
    assert.equal(m.findRequest(s, 2).state, "done");
  });

  test("at most BOARD_KEEP_ENDED ended requests stay; the oldest go first", () => {
    const s = fresh();
    const evs = [];
    for (let i = 1; i <= m.BOARD_KEEP_ENDED + 5; i++) evs.push(started(i, i), finished(i, i + 1));
    feed(s, evs, T0 + 1000);
    const ended = m.boardRows(s);
    assert.equal(ended.length, m.BOARD_KEEP_ENDED);
    assert.equal(ended[0].id, m.BOARD_KEEP_ENDED + 5, "newest first");
    assert.deepEqual(s.recent.map((r) => r.id), [5, 4, 3, 2, 1]);
  });

  test("order: live requests oldest first, then ended ones newest first; clients seen most recent first", () => {
    const s = fresh();
    feed(s, [
      started(1, 0, { client: "bob" }),
      started(2, 10),
      started(3, 20, { client: "carol" }),
      finished(1, 30),
      started(4, 40, { client: "bob" }),
      failed(3, 50, "upstream", msg("gw.upstream.status", "x")),
    ]);
    assert.deepEqual(m.boardRows(s).map((r) => r.id), [2, 4, 3, 1]);
    assert.deepEqual(m.clientNames(s), ["bob", "carol", "alice"]);
    assert.equal(m.elapsedOf(s.requests[2], T0 + 1010), 1000);
    assert.equal(m.elapsedOf(s.requests[1], T0 + 99_999), 30);
  });
});

describe("providers", () => {
  test("health_changed sets state, until and reason; provider_changed keeps them while the health is the same", () => {
    const s = fresh();
    const reason = msg("gw.breaker.failures", "anthropic-b failed 3 times in a row");
    feed(s, [{ kind: "health_changed", at_ms: T0, provider: "anthropic-b", state: "open", until_ms: T0 + 60_000, reason }]);
    const p = s.providers["anthropic-b"];
    assert.equal(p.health, "open");
    assert.equal(p.healthUntil, T0 + 60_000);
    feed(s, [{ kind: "provider_changed", at_ms: T0 + 5, view: provider("anthropic-b", { health: "open", in_flight: 0, queued: 3 }) }]);
    const q = s.providers["anthropic-b"];
    assert.equal(q.queued, 3);
    assert.equal(q.healthUntil, T0 + 60_000);
    assert.equal(q.healthReason.code, "gw.breaker.failures");
    feed(s, [{ kind: "provider_changed", at_ms: T0 + 6, view: provider("anthropic-b", { health: "ok" }) }]);
    assert.equal(s.providers["anthropic-b"].healthUntil, undefined);
  });

  test("limits_changed: a provider's limits are replaced (use kept for an unchanged limit), a key's are recorded", () => {
    const s = fresh([
      provider("anthropic-a", {
        limits: [
          { per: "minute", every: 1, requests: 10, used: 4, resets_at_ms: T0 + 30_000 },
          { per: "day", every: 1, cost_micros: 20_000_000, used: 1_500_000, resets_at_ms: T0 + 3_600_000 },
        ],
      }),
    ]);
    feed(s, [
      {
        kind: "limits_changed",
        at_ms: T0 + 1,
        target: "provider",
        name: "anthropic-a",
        limits: [
          { per: "minute", every: 1, requests: 10 },
          { per: "hour", every: 1, tokens: 1_000_000 },
        ],
      },
      { kind: "limits_changed", at_ms: T0 + 2, target: "client", name: "alice", limits: [{ per: "minute", every: 5, requests: 3 }] },
    ]);
    assert.deepEqual(s.providers["anthropic-a"].limits, [
      { per: "minute", every: 1, requests: 10, used: 4, resets_at_ms: T0 + 30_000 },
      { per: "hour", every: 1, tokens: 1_000_000, used: 0, resets_at_ms: 0 },
    ]);
    assert.deepEqual(s.clientLimits.alice, [{ per: "minute", every: 5, requests: 3 }]);
    assert.deepEqual(
      s.limitsApplied.map((a) => [a.n, a.target, a.name]),
      [
        [1, "provider", "anthropic-a"],
        [2, "client", "alice"],
      ],
    );
    assert.equal(s.limitsAppliedTotal, 2, "counts on past the kept window, for the editor's 'applied' match");
  });
});

describe("cluster mode", () => {
  const lost = msg("gw.cluster.lost", "Redis at 127.0.0.1:6379 does not answer", { address: "127.0.0.1:6379" });

  test("get_instances: the cluster and its instances, this one first; without a cluster: not in cluster mode", () => {
    const s = fresh();
    assert.equal(s.cluster, null, "nothing until get_instances answers");
    m.applyInstances(s, instancesOk(), T0 + 10);
    assert.equal(s.cluster.name, "prod");
    assert.equal(s.cluster.instance, "gw-a");
    assert.equal(s.cluster.state, "joined");
    assert.equal(s.cluster.instances, 2);
    assert.equal(s.cluster.fetchedAt, T0 + 10);
    assert.deepEqual(m.clusterMembers(s).map((i) => [i.name, i.self, i.in_flight, i.queued]), [
      ["gw-a", true, 3, 0],
      ["gw-b", false, 4, 1],
    ]);
    m.applyInstances(s, { kind: "ok", req: 3 }, T0 + 20);
    assert.equal(s.cluster, null);
    assert.deepEqual(m.clusterMembers(s), []);
  });

  test("cluster_changed: state and count updated, the reason kept while degraded, and a notice each time", () => {
    const s = fresh();
    m.applyInstances(s, instancesOk(), T0);
    feed(s, [clusterChanged(100, "degraded", 1, lost)]);
    assert.equal(s.cluster.state, "degraded");
    assert.equal(s.cluster.instances, 1);
    assert.equal(s.cluster.reason.code, "gw.cluster.lost");
    assert.equal(s.notices.at(-1).text, "cluster degraded: 1 live instance — Redis at 127.0.0.1:6379 does not answer (gw.cluster.lost)");
    assert.equal(s.notices.at(-1).code, "gw.cluster.lost");
    assert.equal(s.notices.at(-1).at, T0 + 100);
    // the refresh that follows the event answers degraded too: the reason stays
    m.applyInstances(s, instancesOk({ cluster: { name: "prod", instance: "gw-a", state: "degraded", instances: 1 }, instances: [instance("gw-a", { self: true })] }), T0 + 150);
    assert.equal(s.cluster.reason?.code, "gw.cluster.lost");
    assert.equal(s.cluster.members.length, 1);
    feed(s, [clusterChanged(200, "joined", 3)]);
    assert.equal(s.cluster.state, "joined");
    assert.equal(s.cluster.instances, 3);
    assert.equal(s.cluster.reason, undefined, "joined again: no reason");
    assert.equal(s.notices.at(-1).text, "cluster joined: 3 live instances");
    assert.equal(s.synced, true, "a state event: the stream goes on, no resync");
  });

  test("cluster_changed before get_instances answered: only the notice; the board is untouched", () => {
    const s = fresh();
    feed(s, [started(1, 0), clusterChanged(10, "alone", 1)]);
    assert.equal(s.cluster, null);
    assert.equal(s.notices.at(-1).text, "cluster alone: 1 live instance");
    assert.deepEqual(m.boardRows(s).map((r) => r.id), [1]);
  });

  test("provider views carry the cluster's totals; request_started its instance", () => {
    const s = fresh([provider("anthropic-a", { in_flight: 3, max_concurrent: 8, queued: 1, cluster_in_flight: 7, cluster_queued: 5 })]);
    assert.equal(s.providers["anthropic-a"].cluster_in_flight, 7);
    assert.equal(s.providers["anthropic-a"].cluster_queued, 5);
    feed(s, [{ kind: "provider_changed", at_ms: T0 + 1, view: provider("anthropic-a", { in_flight: 2, queued: 0, cluster_in_flight: 2, cluster_queued: 0 }) }]);
    assert.equal(s.providers["anthropic-a"].cluster_in_flight, 2);
    assert.equal(s.providers["anthropic-a"].cluster_queued, 0);
    feed(s, [started(9, 2, { instance: "gw-b" }), started(10, 3)]);
    assert.equal(s.requests[9].instance, "gw-b");
    assert.equal(s.requests[10].instance, undefined);
  });
});

describe("request DB", () => {
  test("get_providers' store: the banner says nothing while ok, reason and spool while degraded", () => {
    const s = fresh();
    assert.equal(s.store, null, "nothing until get_providers answers");
    assert.equal(m.storeBanner(s.store), null);
    m.applyStore(s, providersOk({ kind: "sqlite", state: "ok" }));
    assert.equal(s.store.kind, "sqlite");
    assert.equal(m.storeBanner(s.store), null);
    m.applyStore(s, providersOk({ kind: "postgres", state: "degraded", spooled_rows: 120, spool_bytes: 48_213, reason: "connection refused" }));
    assert.equal(s.store.spool_bytes, 48_213);
    assert.equal(m.storeBanner(s.store), "request DB degraded: connection refused (120 rows spooled)");
    m.applyStore(s, providersOk());
    assert.equal(s.store, null, "an answer without a store forgets it");
  });

  test("store_changed: degraded then ok, a notice each time; the latest says what the banner shows", () => {
    const s = fresh();
    m.applyStore(s, providersOk({ kind: "postgres", state: "ok" }));
    feed(s, [storeChanged(100, "degraded", { reason: "connection refused", spooled_rows: 1 })]);
    assert.equal(s.store.state, "degraded");
    assert.equal(s.store.kind, "postgres");
    assert.equal(m.storeBanner(s.store), "request DB degraded: connection refused (1 row spooled)");
    assert.equal(s.notices.at(-1).text, "request DB degraded: connection refused (1 row spooled)");
    assert.equal(s.notices.at(-1).at, T0 + 100);
    feed(s, [storeChanged(200, "degraded", { reason: "timeout expired", spooled_rows: 120 })]);
    assert.equal(m.storeBanner(s.store), "request DB degraded: timeout expired (120 rows spooled)");
    feed(s, [storeChanged(300, "degraded")]);
    assert.equal(m.storeBanner(s.store), "request DB degraded: unreachable", "no reason, no count: neither made up");
    feed(s, [storeChanged(400, "ok", { spooled_rows: 0 })]);
    assert.equal(s.store.state, "ok");
    assert.equal(s.store.reason, undefined, "ok again: no reason");
    assert.equal(m.storeBanner(s.store), null);
    assert.equal(s.notices.at(-1).text, "request DB ok (postgres)");
    assert.equal(s.synced, true, "a state event: the stream goes on, no resync");
  });

  test("store_changed before get_providers answered sets the store; the board is untouched", () => {
    const s = fresh();
    feed(s, [started(1, 0), storeChanged(10, "degraded", { reason: "connection refused" })]);
    assert.equal(m.storeBanner(s.store), "request DB degraded: connection refused");
    assert.deepEqual(m.boardRows(s).map((r) => r.id), [1]);
  });
});

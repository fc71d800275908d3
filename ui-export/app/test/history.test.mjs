// Timelines rebuilt from request DB rows (HistoryRow.attempts), and the axis under them.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import { T0, msg } from "./events.mjs";
import { load } from "./load.mjs";

let m;
before(async () => {
  m = await load();
});

const row = (over) => ({
  id: 41,
  at_ms: T0,
  client: "alice",
  dialect: "anthropic",
  model: "claude-sonnet-4",
  status: 200,
  duration_ms: 9000,
  attempts: [],
  ...over,
});

test("a history row's timeline: the hops laid end to end, with their backoff and queue waits before them", () => {
  const tl = m.timelineFromHistory(
    row({
      provider: "anthropic-b",
      ttft_ms: 8200,
      attempts: [
        { provider: "anthropic-a", outcome: "status", status: 529, ms: 120,
          error: msg("gw.upstream.status", "sluice: anthropic-a answered 529") },
        { provider: "anthropic-b", outcome: "skipped", skipped: "throttled", ms: 0, retry: 1, backoff_ms: 2100 },
        { provider: "anthropic-a", outcome: "served", status: 200, ms: 3000, retry: 1, pause_ms: 3200 },
      ],
    }),
  );
  assert.equal(tl.fromHistory, true);
  assert.equal(tl.live, false);
  assert.deepEqual(
    tl.phases.map((p) => [p.kind, p.start - T0, p.end - T0, p.label]),
    [
      ["attempt", 0, 120, "attempt 1 anthropic-a 529 overloaded 120 ms"],
      ["backoff", 120, 2220, "backoff 2.1 s before retry 1"],
      ["skip", 2220, 2220, "skipped anthropic-b: throttled"],
      ["queue", 2220, 5420, "queued 3.2 s before anthropic-a"],
      ["attempt", 5420, 8420, "attempt 2 anthropic-a served 3.0 s (retry 1)"],
      ["first-token", 8200, 8200, "first token 8.2 s"],
      ["end", 9000, 9000, "done 200 in 9.0 s"],
    ],
  );
  assert.equal(tl.title, "#41 alice · claude-sonnet-4 · anthropic-b");
  assert.equal(tl.end, T0 + 9000);
});

test("a history row answered with an error status ends in a bad tone", () => {
  const tl = m.timelineFromHistory(
    row({ status: 429, duration_ms: 40, attempts: [{ provider: "a", outcome: "status", status: 429, ms: 39 }] }),
  );
  const end = tl.phases.at(-1);
  assert.equal(end.label, "answered 429 rate limited in 40 ms");
  assert.equal(end.tone, "bad");
  assert.equal(tl.phases[0].tone, "bad");
});

test("axis ticks: round steps, about six of them, starting at 0", () => {
  assert.deepEqual(m.axisTicks(5000), [0, 1000, 2000, 3000, 4000, 5000]);
  assert.deepEqual(m.axisTicks(500), [0, 100, 200, 300, 400, 500]);
  assert.deepEqual(m.axisTicks(100_000), [0, 30_000, 60_000, 90_000]);
  assert.deepEqual(m.axisTicks(0), [0]);
});

test("the instance column: only when some row has an instance (a PostgreSQL request DB)", () => {
  assert.equal(m.historyHasInstance([]), false);
  assert.equal(m.historyHasInstance([row(), row({ id: 42 })]), false, "SQLite: no instance, no column");
  assert.equal(m.historyHasInstance([row(), row({ id: 42, instance: "gw-b" })]), true);
});

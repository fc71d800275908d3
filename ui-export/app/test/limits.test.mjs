// The limits editor's pure half (rows ↔ limits, the diff shown before a push) and the text helpers.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import { load } from "./load.mjs";

let m;
before(async () => {
  m = await load();
});

test("rows from LimitViews and back give the same wire limits; cost is edited in USD, sent in micro-dollars", () => {
  const views = [
    { per: "minute", every: 5, tokens: 10_000_000, used: 12, resets_at_ms: 1 },
    { per: "day", every: 1, cost_micros: 20_500_000, used: 0, resets_at_ms: 2 },
  ];
  const rows = m.rowsOf(views);
  assert.deepEqual(rows, [
    { per: "minute", every: "5", measure: "tokens", value: "10000000" },
    { per: "day", every: "1", measure: "cost", value: "20.5" },
  ]);
  assert.deepEqual(m.limitsOf(rows), {
    limits: [
      { per: "minute", every: 5, tokens: 10_000_000 },
      { per: "day", every: 1, cost_micros: 20_500_000 },
    ],
    problems: [],
  });
});

test("rows that cannot be sent say why, by row number; an empty every means 1", () => {
  const r = m.limitsOf([
    { per: "minute", every: "", measure: "requests", value: "10" },
    { per: "hour", every: "0", measure: "requests", value: "5" },
    { per: "hour", every: "1", measure: "tokens", value: "2.5" },
    { per: "day", every: "1", measure: "requests", value: "" },
  ]);
  assert.deepEqual(r.limits[0], { per: "minute", every: 1, requests: 10 });
  assert.deepEqual(r.problems, [
    'row 2: "every" must be a whole number ≥ 1',
    "row 3: tokens must be a whole number",
    "row 4: the value must be a number ≥ 0",
  ]);
});

test("the diff before a push: kept, removed and added limits; a changed value is a removal and an addition", () => {
  const before = [
    { per: "minute", every: 1, requests: 10, used: 3, resets_at_ms: 9 },
    { per: "day", every: 1, cost_micros: 5_000_000, used: 0, resets_at_ms: 9 },
  ];
  const after = [
    { per: "minute", every: 1, requests: 5 },
    { per: "day", every: 1, cost_micros: 5_000_000 },
  ];
  const d = m.diffLimits(before, after);
  assert.deepEqual(
    d.map((l) => `${l.op} ${l.text}`),
    ["- 10 requests / minute", "= $5.00 / day", "+ 5 requests / minute"],
  );
  assert.equal(m.diffChanges(d), true);
  assert.equal(m.diffChanges(m.diffLimits(before, [after[1], { per: "minute", every: 1, requests: 10 }])), false, "a reorder is no change");
  assert.deepEqual(m.diffLimits([], []), []);
});

test("text: durations, countdowns, statuses, limits", () => {
  assert.equal(m.fmtDuration(0), "0 ms");
  assert.equal(m.fmtDuration(999), "999 ms");
  assert.equal(m.fmtDuration(3240), "3.2 s");
  assert.equal(m.fmtDuration(125_000), "2 m 05 s");
  assert.equal(m.fmtDuration(3_720_000), "1 h 02 m");
  assert.equal(m.fmtDuration(-5), "0 ms");
  assert.equal(m.fmtCountdown(10_000, 7_000), "3.0 s");
  assert.equal(m.fmtCountdown(10_000, 10_001), "now");
  assert.equal(m.fmtStatus(529), "529 overloaded");
  assert.equal(m.fmtStatus(299), "299");
  assert.equal(m.fmtLimit({ per: "minute", every: 5, tokens: 10_000_000 }), "10M tokens / 5 minutes");
  assert.equal(m.fmtLimit({ per: "hour", every: 1, requests: 100 }), "100 requests / hour");
  assert.equal(m.fmtMicros(1234), "$0.00123");
  assert.equal(m.gateText("throttled", "paused"), "paused (429)");
  assert.equal(m.gateText("throttled"), "throttled");
  assert.equal(m.gateText("window_full"), "window full");
});

test("text: a provider's load with the cluster's total, heartbeat ages", () => {
  assert.equal(m.withClusterTotal("3 / 64", 7), "3 / 64 · cluster 7");
  assert.equal(m.withClusterTotal("12", 0), "12 · cluster 0", "a cluster total of 0 is shown");
  assert.equal(m.withClusterTotal("3 / ∞", undefined), "3 / ∞", "outside cluster mode: this instance's only");
  assert.equal(m.fmtAgo(9_600, 10_000), "400 ms ago");
  assert.equal(m.fmtAgo(7_000, 10_000), "3.0 s ago");
  assert.equal(m.fmtAgo(10_300, 10_000), "now", "a heartbeat from a clock a little ahead");
});

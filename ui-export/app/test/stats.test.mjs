// The stats topic's reducer and what the Trouble absorbed panel and the provider charts read.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { T0, snapshot } from "./events.mjs";
import { load } from "./load.mjs";

let m;
before(async () => {
  m = await load();
});

const B = Math.floor(T0 / 10_000) * 10_000; // a 10 s boundary

function interval(i, over = {}) {
  return {
    start_ms: B + i * 10_000,
    ms: 10_000,
    providers: [{ name: "a", requests: 10, temporary: 1, rate_limited: 2, first_tokens: 8, ttft_p50_ms: 400, ttft_p95_ms: 900, input_tokens: 100, output_tokens: 50, paused_ms: 0 }],
    rescued: [],
    lost: [],
    ...over,
  };
}
const reported = (iv) => ({ kind: "stats_reported", at_ms: iv.start_ms + iv.ms, interval: iv });
const totals = (rescued = [], lost = []) => ({ since_ms: B - 3_600_000 * 2, rescued, lost });

describe("stats", () => {
  test("a stats snapshot replaces the hour and the totals; a snapshot without stats keeps them", () => {
    const s = m.initialState();
    m.applySnapshot(s, snapshot({ stats: [interval(1), interval(0)], stats_totals: totals([{ cause: "retried", count: 7 }]) }));
    assert.deepEqual(s.stats.intervals.map((iv) => iv.start_ms), [B, B + 10_000], "oldest first");
    assert.equal(s.stats.rescuedTotal.retried, 7);
    assert.equal(s.stats.sinceMs, B - 7_200_000);
    m.applySnapshot(s, snapshot());
    assert.equal(s.stats.intervals.length, 2);
  });

  test("each StatsReported appends once and adds to the totals since start", () => {
    const s = m.initialState();
    m.applySnapshot(s, snapshot({ stats: [interval(0)], stats_totals: totals([{ cause: "retried", count: 1 }]) }));
    const iv = interval(1, { rescued: [{ cause: "retried", count: 2 }, { cause: "queued_429", count: 3 }], lost: [{ cause: "queued_429", count: 1 }] });
    m.applyEvent(s, reported(iv), B + 20_000);
    m.applyEvent(s, reported(iv), B + 20_000); // sent again after a resync: not counted twice
    assert.equal(s.stats.intervals.length, 2);
    const start = m.troubleSinceStart(s.stats);
    assert.equal(start.rescued.retried, 3);
    assert.equal(start.rescued.queued_429, 3);
    assert.equal(start.rescuedSum, 6);
    assert.equal(start.lostSum, 1);
    assert.equal(start.share, 6 / 7);
  });

  test("the last hour counts only intervals that ended within it; an hour is all that is kept", () => {
    const s = m.initialState();
    const ivs = Array.from({ length: 400 }, (_, i) => interval(i, { rescued: [{ cause: "failed_over", count: 1 }] }));
    m.applySnapshot(s, snapshot({ stats: [], stats_totals: totals() }));
    for (const iv of ivs) m.applyEvent(s, reported(iv), iv.start_ms + iv.ms);
    assert.equal(s.stats.intervals.length, 360);
    const now = B + 400 * 10_000;
    const hour = m.troubleSince(s.stats, now - 3_600_000);
    assert.equal(hour.rescued.failed_over, 360);
    assert.equal(m.troubleSinceStart(s.stats).rescued.failed_over, 400, "since start counts what was let go too");
    assert.equal(m.troubleSince(s.stats, now - 60_000).rescuedSum, 6);
    assert.equal(m.troubleSince(s.stats, now).share, null, "nothing rescued or lost: no share");
  });

  test("a provider's chart: the last 15 minutes, one point per interval, zeros where it is absent", () => {
    const s = m.initialState();
    const ivs = Array.from({ length: 100 }, (_, i) => interval(i, i === 99 ? { providers: [] } : {}));
    m.applySnapshot(s, snapshot({ stats: ivs, stats_totals: totals() }));
    const now = B + 100 * 10_000;
    const pts = m.providerSeries(s.stats, "a", now);
    assert.equal(pts.length, 90);
    assert.deepEqual(pts.at(-2), { start: B + 980_000, end: B + 990_000, requests: 10, temporary: 1, rateLimited: 2, ttftP50: 400, pausedMs: 0 });
    assert.deepEqual(pts.at(-1), { start: B + 990_000, end: B + 1_000_000, requests: 0, temporary: 0, rateLimited: 0, pausedMs: 0 });
    assert.deepEqual(m.statsProviders(s.stats), ["a"]);
  });

  test("paused time becomes shaded spans: at an interval's end, going on into the next from its start", () => {
    const pt = (i, pausedMs) => ({ start: B + i * 10_000, end: B + (i + 1) * 10_000, requests: 0, temporary: 0, rateLimited: 0, pausedMs });
    assert.deepEqual(m.pauseSpans([pt(0, 0), pt(1, 4000), pt(2, 10_000), pt(3, 2500), pt(4, 0), pt(5, 1000)]), [
      [B + 16_000, B + 32_500],
      [B + 59_000, B + 60_000],
    ]);
    assert.deepEqual(m.pauseSpans([pt(0, 0)]), []);
  });
});

// The stats topic's state (protocol.md, observability.md "In the web app"): the last hour of 10 s
// intervals and the rescued / lost totals since start, and what the Trouble absorbed panel and
// the provider charts read from them.
//
// Pure: no DOM, no clock reads. The snapshot of a stats subscription replaces the state; each
// StatsReported appends its interval (once: a resync may send one again) and adds to the totals.
import type { StatsInterval, StatsTotals, TroubleCause, TroubleCount } from "../../src/protocol.js";
import { TROUBLE_CAUSE_VALUES } from "../../src/protocol.js";

/** Intervals older than this (from the newest one's end) are let go. */
export const STATS_KEEP_MS = 3_600_000;
/** The provider charts' span: one point per interval. */
export const CHART_SPAN_MS = 15 * 60_000;

export type ByCause = Record<TroubleCause, number>;

export interface Stats {
  /** oldest first, by start_ms */
  intervals: StatsInterval[];
  /** when sluice started counting; null before a stats snapshot */
  sinceMs: number | null;
  rescuedTotal: ByCause;
  lostTotal: ByCause;
  rev: number;
}

export function noCauses(): ByCause {
  return { retried: 0, failed_over: 0, queued_429: 0, queued_window: 0, queued_slot: 0 };
}

export function initialStats(): Stats {
  return { intervals: [], sinceMs: null, rescuedTotal: noCauses(), lostTotal: noCauses(), rev: 0 };
}

function add(into: ByCause, counts: readonly TroubleCount[]): void {
  for (const c of counts) into[c.cause] += c.count;
}

function trim(st: Stats): void {
  const last = st.intervals.at(-1);
  if (!last) return;
  const from = last.start_ms + last.ms - STATS_KEEP_MS;
  const keep = st.intervals.findIndex((iv) => iv.start_ms >= from);
  if (keep > 0) st.intervals.splice(0, keep);
}

/** A stats subscription's snapshot: its hour and totals replace what was kept. */
export function applyStatsSnapshot(st: Stats, stats: readonly StatsInterval[], totals: StatsTotals): Stats {
  st.intervals = [...stats].sort((a, b) => a.start_ms - b.start_ms);
  st.sinceMs = totals.since_ms;
  st.rescuedTotal = noCauses();
  st.lostTotal = noCauses();
  add(st.rescuedTotal, totals.rescued);
  add(st.lostTotal, totals.lost);
  trim(st);
  st.rev++;
  return st;
}

/** A StatsReported: its interval goes last and counts in the totals; one already kept changes nothing. */
export function applyStatsInterval(st: Stats, iv: StatsInterval): Stats {
  const last = st.intervals.at(-1);
  if (last && iv.start_ms < last.start_ms + last.ms) return st;
  st.intervals.push(iv);
  add(st.rescuedTotal, iv.rescued);
  add(st.lostTotal, iv.lost);
  trim(st);
  st.rev++;
  return st;
}

export interface TroubleSummary {
  rescued: ByCause;
  lost: ByCause;
  rescuedSum: number;
  lostSum: number;
  /** rescued ÷ (rescued + lost); null when neither happened */
  share: number | null;
}

function summary(rescued: ByCause, lost: ByCause): TroubleSummary {
  const sum = (b: ByCause) => TROUBLE_CAUSE_VALUES.reduce((n, c) => n + b[c], 0);
  const rescuedSum = sum(rescued);
  const lostSum = sum(lost);
  return { rescued, lost, rescuedSum, lostSum, share: rescuedSum + lostSum > 0 ? rescuedSum / (rescuedSum + lostSum) : null };
}

/** Rescued and lost over the intervals that ended after `fromMs` (the last hour: now − 1 h). */
export function troubleSince(st: Stats, fromMs: number): TroubleSummary {
  const rescued = noCauses();
  const lost = noCauses();
  for (const iv of st.intervals) {
    if (iv.start_ms + iv.ms <= fromMs) continue;
    add(rescued, iv.rescued);
    add(lost, iv.lost);
  }
  return summary(rescued, lost);
}

/** Rescued and lost since sluice started. */
export function troubleSinceStart(st: Stats): TroubleSummary {
  return summary({ ...st.rescuedTotal }, { ...st.lostTotal });
}

/** One point of a provider's chart: one interval. */
export interface ChartPoint {
  start: number;
  end: number;
  requests: number;
  temporary: number;
  rateLimited: number;
  ttftP50?: number;
  pausedMs: number;
}

/** The providers the kept intervals name, in the order they first appear. */
export function statsProviders(st: Stats): string[] {
  const seen = new Set<string>();
  for (const iv of st.intervals) for (const p of iv.providers) seen.add(p.name);
  return [...seen];
}

/** A provider's points over the CHART_SPAN_MS before `nowMs`, oldest first (an interval without it: zeros). */
export function providerSeries(st: Stats, name: string, nowMs: number, spanMs: number = CHART_SPAN_MS): ChartPoint[] {
  const out: ChartPoint[] = [];
  for (const iv of st.intervals) {
    const end = iv.start_ms + iv.ms;
    if (end <= nowMs - spanMs) continue;
    const p = iv.providers.find((x) => x.name === name);
    const point: ChartPoint = {
      start: iv.start_ms,
      end,
      requests: p?.requests ?? 0,
      temporary: p?.temporary ?? 0,
      rateLimited: p?.rate_limited ?? 0,
      pausedMs: p?.paused_ms ?? 0,
    };
    if (p?.ttft_p50_ms !== undefined) point.ttftP50 = p.ttft_p50_ms;
    out.push(point);
  }
  return out;
}

/**
 * The paused stretches of a series, [start, end] in ms. An interval says only how long it was
 * paused, not when: a pause is drawn at the interval's end, and one in the interval right after
 * (the pause went on) follows on from its start.
 */
export function pauseSpans(points: readonly ChartPoint[]): [number, number][] {
  const spans: [number, number][] = [];
  for (const p of points) {
    const d = Math.min(p.pausedMs, p.end - p.start);
    if (d <= 0) continue;
    const last = spans.at(-1);
    if (last && last[1] === p.start) last[1] = p.start + d;
    else spans.push([p.end - d, p.end]);
  }
  return spans;
}

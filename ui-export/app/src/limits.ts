// The limits editor's pure half: editable rows ↔ wire limits, and the diff shown before a push.
import type { Limit, LimitView, Period } from "../../src/protocol.js";

import { fmtLimit, measureOf, valueOf, type Measure } from "./format.js";

/** One editable row: text fields as the user typed them. Cost is in USD (the wire has micro-dollars). */
export interface LimitRow {
  per: Period;
  every: string;
  measure: Measure;
  value: string;
}

export const PERIODS: readonly Period[] = ["minute", "hour", "day", "week", "month"];
export const MEASURES: readonly Measure[] = ["requests", "tokens", "cost"];

/** The rows for limits as sluice has them (LimitView's use fields are dropped). */
export function rowsOf(limits: readonly (Limit | LimitView)[]): LimitRow[] {
  return limits.map((l) => {
    const m = measureOf(l);
    const v = valueOf(l);
    return { per: l.per, every: String(l.every), measure: m, value: m === "cost" ? String(v / 1e6) : String(v) };
  });
}

/** Only the wire fields of a limit, in schema order. */
export function plainLimit(l: Limit | LimitView): Limit {
  const out: Limit = { per: l.per, every: l.every };
  if (l.requests !== undefined) out.requests = l.requests;
  if (l.tokens !== undefined) out.tokens = l.tokens;
  if (l.cost_micros !== undefined) out.cost_micros = l.cost_micros;
  return out;
}

/**
 * The limits the rows say, or the problems that keep them from being sent (row numbers from 1).
 * Checks only what the wire needs (whole numbers, ≥ 0); sluice judges the rest and its error is shown.
 */
export function limitsOf(rows: readonly LimitRow[]): { limits: Limit[]; problems: string[] } {
  const limits: Limit[] = [];
  const problems: string[] = [];
  rows.forEach((r, i) => {
    const at = `row ${i + 1}`;
    const every = r.every.trim() === "" ? 1 : Number(r.every);
    if (!Number.isInteger(every) || every < 1) problems.push(`${at}: "every" must be a whole number ≥ 1`);
    const text = r.value.trim();
    const v = Number(text);
    if (text === "" || !Number.isFinite(v) || v < 0) {
      problems.push(`${at}: the value must be a number ≥ 0`);
      return;
    }
    const l: Limit = { per: r.per, every: Number.isInteger(every) && every >= 1 ? every : 1 };
    if (r.measure === "cost") {
      l.cost_micros = Math.round(v * 1e6);
    } else if (!Number.isInteger(v)) {
      problems.push(`${at}: ${r.measure} must be a whole number`);
      return;
    } else if (r.measure === "tokens") {
      l.tokens = v;
    } else {
      l.requests = v;
    }
    limits.push(l);
  });
  return { limits, problems };
}

export function sameLimit(a: Limit, b: Limit): boolean {
  return (
    a.per === b.per &&
    a.every === b.every &&
    a.requests === b.requests &&
    a.tokens === b.tokens &&
    a.cost_micros === b.cost_micros
  );
}

export interface DiffLine {
  op: "+" | "-" | "=";
  limit: Limit;
  text: string;
}

/**
 * What a push changes: limits kept (=), removed (-) and added (+). A changed value shows as a
 * removal and an addition. `before` may be LimitViews.
 */
export function diffLimits(before: readonly (Limit | LimitView)[], after: readonly Limit[]): DiffLine[] {
  const old = before.map(plainLimit);
  const left = [...after];
  const out: DiffLine[] = [];
  for (const o of old) {
    const i = left.findIndex((n) => sameLimit(n, o));
    if (i >= 0) {
      left.splice(i, 1);
      out.push({ op: "=", limit: o, text: fmtLimit(o) });
    } else {
      out.push({ op: "-", limit: o, text: fmtLimit(o) });
    }
  }
  for (const n of left) out.push({ op: "+", limit: n, text: fmtLimit(n) });
  return out;
}

/** Whether a diff changes anything (a reorder alone does not). */
export function diffChanges(d: readonly DiffLine[]): boolean {
  return d.some((l) => l.op !== "=");
}

// Pure text helpers for the views and the timeline: durations, countdowns, statuses, limits.
// No clock reads: every "now" is a parameter.
import type { Limit, LimitView, ServeSkip, StepReason, ThrottleKind } from "../../src/protocol.js";

/** A duration for humans: "120 ms", "3.2 s", "2 m 05 s", "1 h 02 m". Negative counts as 0. */
export function fmtDuration(ms: number): string {
  const v = Math.max(0, Math.round(ms));
  if (v < 1000) return `${v} ms`;
  if (v < 59_950) return `${(Math.round(v / 100) / 10).toFixed(1)} s`;
  const s = Math.floor(v / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(s % 60).padStart(2, "0")} s`;
  const m = Math.floor(s / 60);
  if (m < 48 * 60) return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} m`;
  return `${Math.floor(m / 1440)} d ${String(Math.floor(m / 60) % 24).padStart(2, "0")} h`;
}

/** Time left until `untilMs`: "3.2 s", "1 m 05 s"; "now" once it has passed. */
export function fmtCountdown(untilMs: number, nowMs: number): string {
  const left = untilMs - nowMs;
  return left <= 0 ? "now" : fmtDuration(left);
}

/** Wall-clock time of day, HH:MM:SS in the browser's zone (formatting only, no clock read). */
export function fmtClock(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Date and time, "2026-11-29 14:03:07", in the browser's zone. */
export function fmtDateTime(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${fmtClock(ms)}`;
}

const STATUS_NAMES: Record<number, string> = {
  400: "bad request",
  401: "unauthorized",
  403: "forbidden",
  404: "not found",
  408: "timeout",
  413: "too large",
  422: "unprocessable",
  429: "rate limited",
  500: "server error",
  501: "not implemented",
  502: "bad gateway",
  503: "unavailable",
  504: "gateway timeout",
  529: "overloaded",
};

/** "529 overloaded", "200", "418". */
export function fmtStatus(status: number): string {
  const name = STATUS_NAMES[status];
  return name ? `${status} ${name}` : String(status);
}

/** The words for what holds a queued request on one upstream; `throttle` is the upstream's throttle kind then. */
export function gateText(skip: ServeSkip, throttle?: ThrottleKind): string {
  if (skip === "throttled") {
    switch (throttle) {
      case "paused":
        return "paused (429)";
      case "manual":
        return "paused by an operator";
      case "probing":
        return "probing";
      case "window_full":
        return "window full";
      case "period_used_up":
        return "period used up";
      default:
        return "throttled";
    }
  }
  return SKIP_TEXT[skip];
}

const SKIP_TEXT: Record<ServeSkip, string> = {
  disabled: "disabled",
  not_offered: "not offered",
  pinned_elsewhere: "pinned to another upstream",
  cooling: "cooling (breaker open)",
  throttled: "throttled",
  busy: "busy",
  window_full: "window full",
  period_used_up: "period used up",
  key_window: "key window full",
};

export function skipText(skip: ServeSkip): string {
  return SKIP_TEXT[skip];
}

const STEP_TEXT: Record<StepReason, string> = {
  stale_connection: "a stale keep-alive connection: sent again on a fresh one",
  rate_limited: "429: the upstream pauses",
  next_candidate: "on to the next candidate",
  pinned_retry: "the conversation stays: retried after a pause",
  retry_round: "retried after a pause",
  request_error: "the client's own error: handed back",
  not_retried: "not retried",
  no_waiting: "this request may not wait",
  deadline: "no time left before the deadline",
  context_fallback: "longer than this model's context: on to the route's context fallback",
  back_to_earlier: "back to the upstream it failed over from, which can take it again",
  hedge_failed: "the first-token hedge failed before content: the first hop goes on",
  hedge_goes_on: "failed before content: its first-token hedge goes on alone",
};

/** Why the request went on as it did after a failed attempt. */
export function stepText(reason: StepReason): string {
  return STEP_TEXT[reason];
}

export const THROTTLE_TEXT: Record<ThrottleKind, string> = {
  paused: "paused",
  probing: "probing",
  window_full: "window full",
  period_used_up: "period used up",
  manual: "paused by hand",
};

/** 1234 → "1,234"; 10000000 → "10M"; 2500 → "2.5k" when `short`. */
export function fmtCount(n: number, short = false): string {
  if (!short) return n.toLocaleString("en-US");
  if (n >= 1e9) return `${trim(n / 1e9)}G`;
  if (n >= 1e6) return `${trim(n / 1e6)}M`;
  if (n >= 1e4) return `${trim(n / 1e3)}k`;
  return String(n);
}

function trim(v: number): string {
  return v >= 100 ? String(Math.round(v)) : String(Math.round(v * 10) / 10);
}

/** Integer micro-dollars as dollars: 12345 → "$0.012345" trimmed to "$0.0123". */
export function fmtMicros(micros: number): string {
  const usd = micros / 1e6;
  if (usd === 0) return "$0";
  if (usd >= 100) return `$${usd.toFixed(0)}`;
  if (usd >= 1) return `$${usd.toFixed(2)}`;
  return `$${Number(usd.toPrecision(3))}`;
}

export type Measure = "requests" | "tokens" | "cost";

/** Which measure a limit counts (exactly one is present on the wire; requests when none is). */
export function measureOf(l: Limit | LimitView): Measure {
  if (l.tokens !== undefined) return "tokens";
  if (l.cost_micros !== undefined) return "cost";
  return "requests";
}

/** The limit's value in its measure (micro-dollars for cost). */
export function valueOf(l: Limit | LimitView): number {
  return l.requests ?? l.tokens ?? l.cost_micros ?? 0;
}

/** "10 requests / minute", "10M tokens / 5 minutes", "$20 / day". */
export function fmtLimit(l: Limit | LimitView): string {
  const m = measureOf(l);
  const v = valueOf(l);
  const amount = m === "cost" ? fmtMicros(v) : `${fmtCount(v, true)} ${m}`;
  const window = l.every > 1 ? `${l.every} ${l.per}s` : l.per;
  return `${amount} / ${window}`;
}

/** A used amount in the limit's measure: "3", "1.2M", "$0.52". */
export function fmtAmount(l: Limit | LimitView, v: number): string {
  return measureOf(l) === "cost" ? fmtMicros(v) : fmtCount(v, true);
}

/** A provider's load with the whole cluster's beside it: "3 / 64 · cluster 7"; just `local` outside cluster mode. */
export function withClusterTotal(local: string, cluster: number | undefined): string {
  return cluster === undefined ? local : `${local} · cluster ${cluster}`;
}

/** How long ago a heartbeat came: "0.4 s ago"; "now" for one from a clock a little ahead. */
export function fmtAgo(atMs: number, nowMs: number): string {
  return atMs >= nowMs ? "now" : `${fmtDuration(nowMs - atMs)} ago`;
}

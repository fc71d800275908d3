// A request's timeline: labelled phases on one time axis, from the live events (a Req's segments)
// or from a request DB row (HistoryRow.attempts). Pure: `nowMs` closes the phases still going on.
import type { AttemptView, HistoryRow } from "../../src/protocol.js";

import { fmtDuration, fmtStatus, skipText, stepText } from "./format.js";
import { gateLabel, type Req, type Segment } from "./state.js";

export type PhaseKind = "queue" | "attempt" | "backoff" | "skip" | "first-token" | "end";
export type Tone = "wait" | "ok" | "bad" | "warn" | "info";

export interface Phase {
  kind: PhaseKind;
  /** sluice's clock, ms; points (skip, first-token, end) have end === start */
  start: number;
  end: number;
  /** still going on: `end` is now */
  open: boolean;
  /** the line the timeline shows, e.g. "attempt 1 anthropic-a 529 overloaded 120 ms" */
  label: string;
  /** a second, quieter line: reasons and error texts as sluice sent them */
  detail?: string;
  tone: Tone;
  provider?: string;
}

export interface Timeline {
  id: number;
  title: string;
  start: number;
  end: number;
  /** the request is still going on */
  live: boolean;
  phases: Phase[];
  /** the timeline was rebuilt from a request DB row: queue gates and backoff causes are not known */
  fromHistory: boolean;
}

function attemptOutcome(v: AttemptView): { text: string; tone: Tone } {
  switch (v.outcome) {
    case "served":
      return { text: "served", tone: "ok" };
    case "status":
      return { text: v.status !== undefined ? fmtStatus(v.status) : "status", tone: "bad" };
    case "error": {
      const parts = [v.error?.code ?? "error"];
      if (v.status !== undefined) parts.push(`(${v.status})`);
      return { text: parts.join(" "), tone: "bad" };
    }
    case "estimated":
      return { text: "estimated locally", tone: "info" };
    case "cancelled":
      return { text: "cancelled", tone: "warn" };
    case "client_left":
      return { text: "the client left", tone: "warn" };
    case "stale_connection":
      return { text: "stale keep-alive connection", tone: "info" };
    case "hedge_lost":
      return { text: "closed: the other hop of its hedge had content first", tone: "info" };
    case "skipped":
      return { text: `skipped: ${v.skipped ? skipText(v.skipped) : "?"}`, tone: "info" };
  }
}

function attemptPhase(n: number, start: number, end: number, v: AttemptView): Phase {
  const o = attemptOutcome(v);
  const parts = [`attempt ${n}`, v.provider];
  if (v.hedge) parts.push("(first-token hedge)");
  parts.push(o.text, fmtDuration(end - start));
  if (v.retry !== undefined) parts.push(`(retry ${v.retry})`);
  const details: string[] = [];
  if (v.error) details.push(`${v.error.code}: ${v.error.text}`);
  if (v.reason) details.push(`then: ${stepText(v.reason)}`);
  if (v.model) details.push(`model ${v.model}`);
  if (v.pause_ms !== undefined) details.push(`queued ${fmtDuration(v.pause_ms)} before it`);
  if (v.backoff_ms !== undefined) details.push(`backoff ${fmtDuration(v.backoff_ms)} before it`);
  const p: Phase = { kind: "attempt", start, end, open: false, label: parts.join(" "), tone: o.tone, provider: v.provider };
  if (details.length > 0) p.detail = details.join(" · ");
  return p;
}

function skipPhase(at: number, v: AttemptView): Phase {
  return {
    kind: "skip",
    start: at,
    end: at,
    open: false,
    label: `skipped ${v.provider}: ${v.skipped ? skipText(v.skipped) : "?"}`,
    tone: "info",
    provider: v.provider,
  };
}

function firstTokenPhase(at: number, ttftMs: number): Phase {
  return { kind: "first-token", start: at, end: at, open: false, label: `first token ${fmtDuration(ttftMs)}`, tone: "ok" };
}

function segmentPhase(req: Req, s: Segment, nowMs: number): Phase {
  switch (s.kind) {
    case "queue": {
      const end = s.end ?? Math.max(s.start, nowMs);
      const gates = s.gates.map((g) => `${g.upstream} ${gateLabel(g)}`).join(", ") || "waiting";
      const details = s.gates
        .map((g) => {
          const bits: string[] = [];
          if (g.reason) bits.push(g.reason.text);
          if (g.until_ms !== undefined) bits.push(`${g.upstream} free in ${fmtDuration(g.until_ms - s.start)}`);
          return bits.join(", ");
        })
        .filter((t) => t !== "");
      if (s.to !== undefined) details.push(`went to ${s.to}`);
      const p: Phase = {
        kind: "queue",
        start: s.start,
        end,
        open: s.end === undefined,
        label: `queued: ${gates} ${fmtDuration(end - s.start)}${s.end === undefined ? " so far" : ""}`,
        tone: "wait",
      };
      if (details.length > 0) p.detail = details.join(" · ");
      return p;
    }
    case "backoff": {
      const end = s.end ?? Math.max(s.start, nowMs);
      const planned = s.retryAt - s.start;
      return {
        kind: "backoff",
        start: s.start,
        end,
        open: s.end === undefined,
        label:
          s.end === undefined
            ? `backoff ${fmtDuration(planned)} (${s.cause}) after ${s.lastError.code}: retry ${s.round} in ${fmtDuration(s.retryAt - nowMs)}`
            : `backoff ${fmtDuration(end - s.start)} (${s.cause}) after ${s.lastError.code}`,
        detail: `${s.lastError.text} · retry ${s.round} on ${s.upstreams.join(", ")}`,
        tone: "warn",
      };
    }
    case "attempt":
      return attemptPhase(s.n, s.start, s.end, s.view);
    case "skip":
      return skipPhase(s.at, s.view);
    case "first-token":
      return firstTokenPhase(s.at, s.ttftMs);
    case "end": {
      const took = s.durationMs ?? s.at - req.startedAt;
      switch (s.outcome) {
        case "done": {
          const bad = s.status !== undefined && s.status >= 400;
          return {
            kind: "end",
            start: s.at,
            end: s.at,
            open: false,
            label: `done ${s.status !== undefined ? fmtStatus(s.status) : ""} in ${fmtDuration(took)}`.replace("  ", " "),
            tone: bad ? "bad" : "ok",
          };
        }
        case "failed": {
          const p: Phase = {
            kind: "end",
            start: s.at,
            end: s.at,
            open: false,
            label: `failed ${s.message?.code ?? ""} (${s.source ?? "?"}) after ${fmtDuration(took)}`,
            tone: "bad",
          };
          if (s.message) p.detail = s.message.text;
          return p;
        }
        case "cancelled":
          return { kind: "end", start: s.at, end: s.at, open: false, label: `cancelled after ${fmtDuration(took)}`, tone: "warn" };
        case "gone":
          return {
            kind: "end",
            start: s.at,
            end: s.at,
            open: false,
            label: "ended while the app was resyncing (outcome not seen)",
            tone: "info",
          };
      }
    }
  }
}

const RANK: Record<PhaseKind, number> = { skip: 0, backoff: 1, queue: 2, attempt: 3, "first-token": 4, end: 5 };

/** Time order; at the same instant, in the order a request lives them. */
function sortPhases(phases: Phase[]): void {
  phases.sort((a, b) => a.start - b.start || RANK[a.kind] - RANK[b.kind]);
}

/** The timeline of a live (or recently ended) request; open phases end at `nowMs`. */
export function timelineOf(req: Req, nowMs: number): Timeline {
  const phases = req.segments.map((s) => segmentPhase(req, s, nowMs));
  const live = req.endedAt === undefined;
  if (live && (req.state === "attempting" || req.state === "streaming")) {
    // The hop in flight has no Attempt event yet (it comes when the hop ends): it began when
    // the last wait or hop ended.
    const last = phases
      .filter((p) => p.kind !== "first-token")
      .reduce((t, p) => Math.max(t, p.end), req.startedAt);
    const streaming = req.state === "streaming";
    const p: Phase = {
      kind: "attempt",
      start: last,
      end: Math.max(last, nowMs),
      open: true,
      label: `attempt ${req.hops + 1} ${req.provider ?? "?"} ${streaming ? "streaming" : "in flight"} ${fmtDuration(nowMs - last)}`,
      tone: streaming ? "ok" : "info",
    };
    if (req.provider !== undefined) p.provider = req.provider;
    phases.push(p);
  }
  sortPhases(phases);
  const end = live ? Math.max(nowMs, req.startedAt) : (req.endedAt ?? nowMs);
  return {
    id: req.id,
    title: `#${req.id} ${req.client} · ${req.model}${req.stream ? " · stream" : ""}`,
    start: req.startedAt,
    end: Math.max(end, ...phases.map((p) => p.end)),
    live,
    phases,
    fromHistory: false,
  };
}

/**
 * The timeline of a request DB row. Rows keep each hop's ms, pause_ms (queued before it) and
 * backoff_ms (the pause before its round), not when each began: the phases are laid end to end
 * from the request's start, backoff before queue wait before hop.
 */
export function timelineFromHistory(row: HistoryRow): Timeline {
  const phases: Phase[] = [];
  let t = row.at_ms;
  let n = 0;
  for (const a of row.attempts) {
    if (a.backoff_ms !== undefined && a.backoff_ms > 0) {
      phases.push({
        kind: "backoff",
        start: t,
        end: t + a.backoff_ms,
        open: false,
        label: `backoff ${fmtDuration(a.backoff_ms)} before retry ${a.retry ?? "?"}`,
        tone: "warn",
      });
      t += a.backoff_ms;
    }
    if (a.pause_ms !== undefined && a.pause_ms > 0) {
      phases.push({
        kind: "queue",
        start: t,
        end: t + a.pause_ms,
        open: false,
        label: `queued ${fmtDuration(a.pause_ms)} before ${a.provider}`,
        tone: "wait",
        provider: a.provider,
      });
      t += a.pause_ms;
    }
    if (a.outcome === "skipped") {
      phases.push(skipPhase(t, a));
      continue;
    }
    n++;
    phases.push(attemptPhase(n, t, t + a.ms, a));
    t += a.ms;
  }
  if (row.ttft_ms !== undefined) phases.push(firstTokenPhase(row.at_ms + row.ttft_ms, row.ttft_ms));
  sortPhases(phases);
  const endAt = row.at_ms + row.duration_ms;
  phases.push({
    kind: "end",
    start: endAt,
    end: endAt,
    open: false,
    label: `${row.status < 400 ? "done" : "answered"} ${fmtStatus(row.status)} in ${fmtDuration(row.duration_ms)}`,
    tone: row.status < 400 ? "ok" : "bad",
  });
  return {
    id: row.id,
    title: `#${row.id} ${row.client} · ${row.model}${row.provider ? ` · ${row.provider}` : ""}`,
    start: row.at_ms,
    end: Math.max(endAt, t),
    live: false,
    phases,
    fromHistory: true,
  };
}

/** Axis ticks for a span: round steps (100 ms … 10 min), about `want` of them, relative ms. */
export function axisTicks(spanMs: number, want = 6): number[] {
  const steps = [100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000];
  const step = steps.find((s) => spanMs / s <= want) ?? steps[steps.length - 1];
  const out: number[] = [];
  for (let v = 0; v <= spanMs; v += step) out.push(v);
  return out;
}

// The app's state and its reducer: the snapshot and the event stream in, the board out.
//
// Pure: no DOM, no clock reads, no IO. Every "now" is a parameter, in sluice's clock (ms since the
// Unix epoch as the server counts them; the connection corrects the browser's clock by the
// welcome's now_ms). The functions mutate the State they are given and return it, so that a
// high event rate costs no copying; `rev` counters tell the views what changed.
import type {
  AttemptView,
  ClusterView,
  Dialect,
  Event,
  FailureSource,
  Gate,
  HealthState,
  HistoryRow,
  InstanceView,
  Limit,
  LimitTarget,
  LimitView,
  Msg,
  ProviderView,
  RetryCause,
  SnapshotMessage,
  StoreView,
  ThrottleKind,
  Usage,
  Affinity,
  ClusterState,
} from "../../src/protocol.js";

import { fmtDuration, gateText } from "./format.js";
import { applyStatsInterval, applyStatsSnapshot, initialStats, type Stats } from "./stats.js";

/** Where a request is in its life, as the board shows it. */
export type ReqState =
  | "starting" // accepted, not routed yet
  | "queued" // waiting on throttled / busy / window-full upstreams (or its key's window)
  | "attempting" // a hop is in flight (sent, or held until its first content)
  | "backoff" // pausing before a retry round
  | "streaming" // its first content reached the client
  | "done"
  | "failed"
  | "cancelled"
  | "gone"; // it ended while we were not listening (seen live before a resync, absent from the snapshot)

export const ENDED: ReadonlySet<ReqState> = new Set(["done", "failed", "cancelled", "gone"]);

/** A gate of a queue wait, with the upstream's throttle at the time it was queued. */
export interface GateInfo extends Gate {
  throttle?: ThrottleKind;
  reason?: Msg;
}

/** One piece of a request's timeline, as the events told it; `end` absent = still going on. */
export type Segment =
  | { kind: "queue"; start: number; end?: number; gates: GateInfo[]; deadline: number; to?: string }
  | {
      kind: "backoff";
      start: number;
      end?: number;
      retryAt: number;
      round: number;
      cause: RetryCause;
      lastError: Msg;
      upstreams: string[];
      deadline: number;
    }
  | { kind: "attempt"; start: number; end: number; n: number; view: AttemptView }
  | { kind: "skip"; at: number; view: AttemptView }
  | { kind: "first-token"; at: number; ttftMs: number }
  | {
      kind: "end";
      at: number;
      outcome: "done" | "failed" | "cancelled" | "gone";
      status?: number;
      source?: FailureSource;
      message?: Msg;
      durationMs?: number;
    };

export interface Req {
  id: number;
  client: string;
  keyMasked?: string;
  dialect?: Dialect;
  model: string;
  stream: boolean;
  path: string;
  session?: string;
  /** in cluster mode: the instance serving it */
  instance?: string;
  route?: string;
  candidates: string[];
  affinity?: Affinity;
  startedAt: number;
  state: ReqState;
  /** hops sent so far (attempts that were not skips) */
  hops: number;
  /** the upstream of the hop in flight (a best guess until its Attempt event), or of the last hop */
  provider?: string;
  segments: Segment[];
  headers?: { at: number; status: number; ttfbMs: number };
  ttftMs?: number;
  endedAt?: number;
  status?: number;
  durationMs?: number;
  bytes?: number;
  usage?: Usage;
  costMicros?: number;
  failure?: { source: FailureSource; message: Msg };
  secrets: number;
  rules: string[];
  /** its RequestStarted was not seen (joined mid-way after a gap) */
  partial: boolean;
  rev: number;
}

export interface Provider extends ProviderView {
  healthUntil?: number;
  healthReason?: Msg;
  /** when the current throttle began, if seen */
  throttleSince?: number;
  rev: number;
}

export interface LimitsApplied {
  /** 1 for the first LimitsChanged seen, counting up */
  n: number;
  at: number;
  target: LimitTarget;
  name: string;
  limits: Limit[];
}

/** The cluster as this instance sees it (cluster mode only), from get_instances and ClusterChanged. */
export interface Cluster extends ClusterView {
  members: InstanceView[];
  /** why it degraded, from the last ClusterChanged (kept while it stays degraded) */
  reason?: Msg;
  /** when get_instances last answered (sluice's clock) */
  fetchedAt: number;
  rev: number;
}

/** The request DB as this instance sees it, from get_providers' `store` and StoreChanged. */
export interface Store extends StoreView {
  rev: number;
}

export interface Notice {
  at: number;
  text: string;
  code?: string;
}

export interface State {
  /** seq of the last event applied (the snapshot's seq right after it) */
  seq: number;
  /** false from events_dropped or a seq gap until the next snapshot */
  synced: boolean;
  /** whether a snapshot was ever applied */
  loaded: boolean;
  providers: Record<string, Provider>;
  providerOrder: string[];
  /** requests on the board: live ones and those ended recently */
  requests: Record<number, Req>;
  /** requests moved off the board, newest first */
  recent: Req[];
  /** client key names seen, with when last seen */
  clients: Record<string, number>;
  /** a client key's limits as its last LimitsChanged said (sluice reports no other way) */
  clientLimits: Record<string, Limit[]>;
  /** the last LimitsChanged events seen, newest last */
  limitsApplied: LimitsApplied[];
  /** how many LimitsChanged events were seen in all */
  limitsAppliedTotal: number;
  notices: Notice[];
  droppedEvents: number;
  /** null outside cluster mode, and until get_instances first answers with a cluster */
  cluster: Cluster | null;
  /** null until get_providers answers with a store (or a StoreChanged arrives) */
  store: Store | null;
  /** the stats topic: the last hour's intervals and the totals since start */
  stats: Stats;
  rev: number;
}

/** A done request stays on the board this long after it ended… */
export const BOARD_KEEP_MS = 60_000;
/** …and at most this many ended requests stay on it. */
export const BOARD_KEEP_ENDED = 200;
export const RECENT_MAX = 500;
const NOTICES_MAX = 50;
const LIMITS_APPLIED_MAX = 50;

export function initialState(): State {
  return {
    seq: 0,
    synced: false,
    loaded: false,
    providers: {},
    providerOrder: [],
    requests: {},
    recent: [],
    clients: {},
    clientLimits: {},
    limitsApplied: [],
    limitsAppliedTotal: 0,
    notices: [],
    droppedEvents: 0,
    cluster: null,
    store: null,
    stats: initialStats(),
    rev: 0,
  };
}

function newReq(id: number, at: number): Req {
  return {
    id,
    client: "?",
    model: "?",
    stream: false,
    path: "",
    candidates: [],
    startedAt: at,
    state: "starting",
    hops: 0,
    segments: [],
    secrets: 0,
    rules: [],
    partial: true,
    rev: 0,
  };
}

function providerOf(view: ProviderView, old?: Provider): Provider {
  const p: Provider = { ...view, rev: (old?.rev ?? 0) + 1 };
  if (old && old.health === view.health) {
    if (old.healthUntil !== undefined) p.healthUntil = old.healthUntil;
    if (old.healthReason !== undefined) p.healthReason = old.healthReason;
  }
  if (old?.throttle && view.throttle && old.throttle.kind === view.throttle.kind && old.throttleSince !== undefined)
    p.throttleSince = old.throttleSince;
  return p;
}

function setProvider(state: State, view: ProviderView): Provider {
  const old = state.providers[view.name];
  const p = providerOf(view, old);
  state.providers[view.name] = p;
  if (!old) state.providerOrder.push(view.name);
  return p;
}

/**
 * The provider an event names, or undefined before any view of it arrived (a provider added by a
 * reload): the providers topic's ProviderChanged brings its whole view within 250 ms, so the event
 * adds nothing a made-up entry could show correctly.
 */
function knownProvider(state: State, name: string): Provider | undefined {
  return state.providers[name];
}

/**
 * The snapshot replaces the state: providers as it lists them, live requests rebuilt by replaying
 * their events. A request we had live that the snapshot does not list ended while we were not
 * listening: it is marked "gone". Ended requests stay where they were. `nowMs` (sluice's clock)
 * ages the board; it defaults to the snapshot's now_ms.
 */
export function applySnapshot(state: State, snap: SnapshotMessage, nowMs: number = snap.now_ms): State {
  const providers: Record<string, Provider> = {};
  const order: string[] = [];
  for (const v of snap.providers) {
    providers[v.name] = providerOf(v, state.providers[v.name]);
    order.push(v.name);
  }
  state.providers = providers;
  state.providerOrder = order;

  const live = new Set(snap.in_flight.map((r) => r.id));
  for (const req of Object.values(state.requests)) {
    if (ENDED.has(req.state)) continue;
    if (live.has(req.id)) {
      delete state.requests[req.id]; // rebuilt from its replayed events below
    } else {
      closeOpen(req, snap.now_ms);
      req.state = "gone";
      req.endedAt = snap.now_ms;
      req.segments.push({ kind: "end", at: snap.now_ms, outcome: "gone" });
      req.rev++;
    }
  }
  for (const r of snap.in_flight) {
    delete state.requests[r.id];
    for (const ev of r.events) applyRequestEvent(state, ev);
    // A replay that lacks RequestStarted still yields a row, from whatever was kept.
    if (!state.requests[r.id]) state.requests[r.id] = newReq(r.id, snap.now_ms);
  }
  if (snap.stats && snap.stats_totals) applyStatsSnapshot(state.stats, snap.stats, snap.stats_totals);
  state.seq = snap.seq;
  state.synced = true;
  state.loaded = true;
  ageBoard(state, nowMs);
  state.rev++;
  return state;
}

/**
 * One `event` envelope: checks that seq follows on (a gap means events were lost: `synced`
 * turns false and the caller resubscribes), then applies the event.
 */
export function applyEnvelope(state: State, seq: number, ev: Event, nowMs: number): State {
  if (state.synced && seq !== state.seq + 1) {
    state.synced = false;
    state.notices.push({ at: ev.at_ms, text: `event ${state.seq + 1} missing (got ${seq}): resyncing` });
  }
  state.seq = seq;
  return applyEvent(state, ev, nowMs);
}

/** `events_dropped`: the state is stale until the next snapshot. */
export function applyEventsDropped(state: State, count: number, nowMs: number): State {
  state.synced = false;
  state.droppedEvents += count;
  pushNotice(state, { at: nowMs, text: `${count} events were dropped: resyncing` });
  state.rev++;
  return state;
}

/** Applies one event (from the stream or a replay) and ages the board at `nowMs`. */
export function applyEvent(state: State, ev: Event, nowMs: number): State {
  switch (ev.kind) {
    case "throttle_changed": {
      const p = knownProvider(state, ev.provider);
      if (!p) break;
      if (ev.throttle) {
        if (!p.throttle || p.throttle.kind !== ev.throttle.kind) p.throttleSince = ev.at_ms;
        p.throttle = ev.throttle;
      } else {
        delete p.throttle;
        delete p.throttleSince;
      }
      p.rev++;
      break;
    }
    case "health_changed": {
      const p = knownProvider(state, ev.provider);
      if (!p) break;
      p.health = ev.state;
      if (ev.until_ms !== undefined) p.healthUntil = ev.until_ms;
      else delete p.healthUntil;
      if (ev.reason !== undefined) p.healthReason = ev.reason;
      else delete p.healthReason;
      p.rev++;
      break;
    }
    case "provider_changed":
      setProvider(state, ev.view);
      break;
    case "limits_changed": {
      if (ev.target === "provider") {
        const p = knownProvider(state, ev.name);
        if (p) {
          p.limits = mergeLimits(p.limits, ev.limits);
          p.rev++;
        }
      } else {
        state.clientLimits[ev.name] = ev.limits;
      }
      state.limitsAppliedTotal++;
      state.limitsApplied.push({ n: state.limitsAppliedTotal, at: ev.at_ms, target: ev.target, name: ev.name, limits: ev.limits });
      if (state.limitsApplied.length > LIMITS_APPLIED_MAX) state.limitsApplied.shift();
      break;
    }
    case "cluster_changed": {
      const c = state.cluster;
      if (c) {
        c.state = ev.state;
        c.instances = ev.instances;
        if (ev.reason !== undefined) c.reason = ev.reason;
        else if (ev.state !== "degraded") delete c.reason;
        c.rev++;
      }
      pushNotice(state, { at: ev.at_ms, text: clusterNotice(ev.state, ev.instances, ev.reason), code: ev.reason?.code });
      break;
    }
    case "store_changed": {
      const st: Store = { kind: ev.store_kind, state: ev.state, rev: (state.store?.rev ?? 0) + 1 };
      if (ev.spooled_rows !== undefined) st.spooled_rows = ev.spooled_rows;
      if (ev.reason !== undefined) st.reason = ev.reason;
      state.store = st;
      pushNotice(state, { at: ev.at_ms, text: storeNotice(st), code: "store_changed" });
      break;
    }
    case "rows_dropped":
      pushNotice(state, { at: ev.at_ms, text: `${ev.count} request DB rows could not be written`, code: "rows_dropped" });
      break;
    case "config_reloaded":
      pushNotice(state, { at: ev.at_ms, text: `configuration revision ${ev.revision} applied (from ${ev.source})` });
      break;
    case "stats_reported":
      applyStatsInterval(state.stats, ev.interval);
      break;
    case "config_rejected":
      pushNotice(state, {
        at: ev.at_ms,
        text: `configuration from ${ev.source} rejected: ${ev.problems.map((p) => p.text).join("; ")}`,
        code: ev.problems[0]?.code,
      });
      break;
    default:
      applyRequestEvent(state, ev);
      if (ev.kind === "request_finished" || ev.kind === "request_failed" || ev.kind === "request_cancelled")
        ageBoard(state, nowMs);
  }
  state.rev++;
  return state;
}

/** "cluster degraded: 1 live instance — Redis at … does not answer (gw.cluster.lost)". */
function clusterNotice(st: ClusterState, instances: number, reason?: Msg): string {
  const live = `${instances} live instance${instances === 1 ? "" : "s"}`;
  return `cluster ${st}: ${live}${reason ? ` — ${reason.text} (${reason.code})` : ""}`;
}

/** "N rows spooled" (1 row). */
function spooledText(n: number): string {
  return `${n} row${n === 1 ? "" : "s"} spooled`;
}

/** "request DB degraded: connection refused (120 rows spooled)", "request DB ok (postgres)". */
function storeNotice(st: StoreView): string {
  if (st.state !== "degraded") return `request DB ${st.state} (${st.kind})${st.spooled_rows ? `, ${spooledText(st.spooled_rows)}` : ""}`;
  return storeBanner(st) ?? "";
}

/**
 * get_providers answered: its `store` is the request DB's state now; a reply without one (a gateway
 * that does not report it) forgets what was known.
 */
export function applyStore(state: State, reply: { store?: StoreView }): State {
  const old = state.store;
  state.store = reply.store ? { ...reply.store, rev: (old?.rev ?? 0) + 1 } : null;
  state.rev++;
  return state;
}

/**
 * get_instances answered: the cluster and its live instances, or (neither present) not in
 * cluster mode. `nowMs` is when the answer came (sluice's clock).
 */
export function applyInstances(state: State, reply: { cluster?: ClusterView; instances?: InstanceView[] }, nowMs: number): State {
  const old = state.cluster;
  if (!reply.cluster) {
    state.cluster = null;
  } else {
    const c: Cluster = { ...reply.cluster, members: reply.instances ?? [], fetchedAt: nowMs, rev: (old?.rev ?? 0) + 1 };
    if (old?.reason && c.state === "degraded") c.reason = old.reason;
    state.cluster = c;
  }
  state.rev++;
  return state;
}

type RequestEvent = Extract<Event, { id: number }>;

/** Limit views for new limits: use and reset time carried over where the same limit existed. */
export function mergeLimits(old: LimitView[], limits: Limit[]): LimitView[] {
  return limits.map((l) => {
    const same = old.find(
      (o) =>
        o.per === l.per &&
        o.every === l.every &&
        (o.requests !== undefined) === (l.requests !== undefined) &&
        (o.tokens !== undefined) === (l.tokens !== undefined) &&
        (o.cost_micros !== undefined) === (l.cost_micros !== undefined),
    );
    return { ...l, used: same?.used ?? 0, resets_at_ms: same?.resets_at_ms ?? 0 };
  });
}

function pushNotice(state: State, n: Notice): void {
  state.notices.push(n);
  if (state.notices.length > NOTICES_MAX) state.notices.shift();
}

/** Ends the open queue wait or backoff (if any) at `at`. */
function closeOpen(req: Req, at: number, to?: string): void {
  for (let i = req.segments.length - 1; i >= 0; i--) {
    const s = req.segments[i];
    if ((s.kind === "queue" || s.kind === "backoff") && s.end === undefined) {
      s.end = Math.max(s.start, at);
      if (s.kind === "queue" && to !== undefined) s.to = to;
      return;
    }
  }
}

/** The candidate after `provider` in the request's list, as a guess for its next hop. */
function nextCandidate(req: Req, provider: string): string | undefined {
  const i = req.candidates.indexOf(provider);
  return i >= 0 ? req.candidates[i + 1] : undefined;
}

function applyRequestEvent(state: State, ev: Event): void {
  if (!("id" in ev)) return;
  const e = ev as RequestEvent;
  let req = state.requests[e.id];
  if (!req) {
    // An event of a request already moved to "recent" is late: leave that request be.
    if (e.kind !== "request_started" && state.recent.some((r) => r.id === e.id)) return;
    req = newReq(e.id, e.at_ms);
    state.requests[e.id] = req;
  }
  if (ENDED.has(req.state)) return;
  req.rev++;
  switch (e.kind) {
    case "request_started":
      req.client = e.client;
      if (e.key_masked !== undefined) req.keyMasked = e.key_masked;
      req.dialect = e.dialect;
      req.model = e.model;
      req.stream = e.stream;
      req.path = e.path;
      if (e.session !== undefined) req.session = e.session;
      if (e.instance !== undefined) req.instance = e.instance;
      req.startedAt = e.at_ms;
      req.partial = false;
      state.clients[e.client] = e.at_ms;
      break;
    case "request_routed":
      req.route = e.route;
      req.candidates = e.candidates;
      if (e.affinity !== undefined) req.affinity = e.affinity;
      if (req.state === "starting") {
        req.state = "attempting";
        req.provider = e.candidates[0];
      }
      break;
    case "request_queued": {
      closeOpen(req, e.at_ms);
      const gates: GateInfo[] = e.gates.map((g) => {
        const gi: GateInfo = { ...g };
        const t = state.providers[g.upstream]?.throttle;
        if (g.skip === "throttled" && t) {
          gi.throttle = t.kind;
          gi.reason = t.reason;
        }
        return gi;
      });
      req.segments.push({ kind: "queue", start: e.at_ms, gates, deadline: e.until_ms });
      req.state = "queued";
      break;
    }
    case "request_dequeued": {
      closeOpen(req, e.at_ms, e.upstream);
      const back = lastOpenable(req);
      if (e.upstream !== undefined) req.provider = e.upstream;
      else if (back?.kind === "backoff") req.provider = back.upstreams[0];
      if (req.state === "queued" || req.state === "backoff") req.state = "attempting";
      break;
    }
    case "request_retrying":
      closeOpen(req, e.at_ms);
      req.segments.push({
        kind: "backoff",
        start: e.at_ms,
        retryAt: e.retry_at_ms,
        round: e.attempt,
        cause: e.cause,
        lastError: e.last_error,
        upstreams: e.upstreams,
        deadline: e.until_ms,
      });
      req.state = "backoff";
      req.provider = e.upstreams[0];
      break;
    case "attempt": {
      const v = e.view;
      if (v.outcome === "skipped") {
        req.segments.push({ kind: "skip", at: e.at_ms, view: v });
        if (req.state === "attempting" && req.provider === v.provider) req.provider = nextCandidate(req, v.provider);
        break;
      }
      const start = e.at_ms - v.ms;
      closeOpen(req, start);
      req.hops++;
      req.segments.push({ kind: "attempt", start, end: e.at_ms, n: req.hops, view: v });
      req.provider = v.provider;
      if (v.outcome !== "served" && req.state !== "streaming") {
        // The next hop, unless a queue wait or a backoff follows (their events say so).
        req.state = "attempting";
        req.provider = nextCandidate(req, v.provider) ?? v.provider;
      }
      if (v.outcome === "served" || v.outcome === "estimated") req.provider = v.provider;
      break;
    }
    case "request_headers":
      req.headers = { at: e.at_ms, status: e.status, ttfbMs: e.ttfb_ms };
      break;
    case "request_first_token":
      req.ttftMs = e.ttft_ms;
      req.segments.push({ kind: "first-token", at: e.at_ms, ttftMs: e.ttft_ms });
      req.state = "streaming";
      break;
    case "request_finished":
      closeOpen(req, e.at_ms);
      req.state = "done";
      req.endedAt = e.at_ms;
      req.status = e.status;
      req.durationMs = e.duration_ms;
      req.bytes = e.bytes;
      if (e.usage !== undefined) req.usage = e.usage;
      if (e.cost_micros !== undefined) req.costMicros = e.cost_micros;
      req.segments.push({ kind: "end", at: e.at_ms, outcome: "done", status: e.status, durationMs: e.duration_ms });
      break;
    case "request_failed":
      closeOpen(req, e.at_ms);
      req.state = "failed";
      req.endedAt = e.at_ms;
      req.durationMs = e.duration_ms;
      req.failure = { source: e.source, message: e.message };
      req.segments.push({
        kind: "end",
        at: e.at_ms,
        outcome: "failed",
        source: e.source,
        message: e.message,
        durationMs: e.duration_ms,
      });
      break;
    case "request_cancelled":
      closeOpen(req, e.at_ms);
      req.state = "cancelled";
      req.endedAt = e.at_ms;
      req.durationMs = e.duration_ms;
      req.segments.push({ kind: "end", at: e.at_ms, outcome: "cancelled", durationMs: e.duration_ms });
      break;
    case "secrets_found":
      req.secrets += e.count;
      break;
    case "content_matched":
      req.rules.push(e.rule);
      break;
  }
}

type WaitSegment = Extract<Segment, { kind: "queue" | "backoff" }>;

/** The last queue wait or backoff, open or not. */
function lastOpenable(req: Req): WaitSegment | undefined {
  for (let i = req.segments.length - 1; i >= 0; i--) {
    const s = req.segments[i];
    if (s.kind === "queue" || s.kind === "backoff") return s;
  }
  return undefined;
}

/**
 * Moves ended requests off the board into `recent`: those ended more than BOARD_KEEP_MS before
 * `nowMs`, and the oldest beyond BOARD_KEEP_ENDED. Returns whether anything moved.
 */
export function ageBoard(state: State, nowMs: number): boolean {
  const ended = Object.values(state.requests).filter((r) => r.endedAt !== undefined && ENDED.has(r.state));
  if (ended.length === 0) return false;
  ended.sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0) || b.id - a.id);
  const moved: Req[] = [];
  ended.forEach((r, i) => {
    if (i >= BOARD_KEEP_ENDED || nowMs - (r.endedAt ?? 0) > BOARD_KEEP_MS) moved.push(r);
  });
  if (moved.length === 0) return false;
  for (const r of moved) delete state.requests[r.id];
  state.recent = moved.concat(state.recent).slice(0, RECENT_MAX);
  state.rev++;
  return true;
}

/** Ages the board; the views call it on their 250 ms tick. */
export function tick(state: State, nowMs: number): State {
  ageBoard(state, nowMs);
  return state;
}

// ---- selectors -------------------------------------------------------------------------------

/** Board order: live requests oldest first (the longest wait on top), then ended ones newest first. */
export function boardRows(state: State): Req[] {
  const rows = Object.values(state.requests);
  const live = rows.filter((r) => !ENDED.has(r.state)).sort((a, b) => a.startedAt - b.startedAt || a.id - b.id);
  const ended = rows
    .filter((r) => ENDED.has(r.state))
    .sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0) || b.id - a.id);
  return live.concat(ended);
}

export interface StatusView {
  state: ReqState;
  /** what the board says, without the countdown */
  label: string;
  /** a countdown runs to this time (sluice's clock), if any */
  until?: number;
  detail?: string;
}

/** The open queue wait or backoff of a live request. */
export function openWait(req: Req): WaitSegment | undefined {
  const s = lastOpenable(req);
  return s && s.end === undefined ? s : undefined;
}

/** What the board says about a request (the view adds the countdown to `until`). */
export function statusOf(req: Req): StatusView {
  switch (req.state) {
    case "starting":
      return { state: req.state, label: "routing" };
    case "queued": {
      const q = openWait(req);
      if (q?.kind !== "queue") return { state: req.state, label: "queued" };
      const gates = q.gates.map((g) => `${g.upstream} ${gateLabel(g)}`).join(", ");
      const untils = q.gates.map((g) => g.until_ms).filter((u): u is number => u !== undefined);
      const v: StatusView = { state: req.state, label: `queued: ${gates || "waiting"}`, detail: `deadline ${q.deadline}` };
      if (untils.length > 0) v.until = Math.min(...untils);
      return v;
    }
    case "backoff": {
      const b = openWait(req);
      if (b?.kind !== "backoff") return { state: req.state, label: "backing off" };
      return {
        state: req.state,
        label: `backing off (${b.cause}) before retry ${b.round} on ${b.upstreams.join(", ")}`,
        until: b.retryAt,
        detail: `${b.lastError.code}: ${b.lastError.text}`,
      };
    }
    case "attempting":
      return { state: req.state, label: `attempt ${req.hops + 1}${req.provider ? ` on ${req.provider}` : ""}` };
    case "streaming":
      return {
        state: req.state,
        label: `streaming from ${req.provider ?? "?"}${req.ttftMs !== undefined ? `, first token ${fmtDuration(req.ttftMs)}` : ""}`,
      };
    case "done":
      return { state: req.state, label: `done ${req.status ?? ""}`.trim() };
    case "failed":
      return {
        state: req.state,
        label: `failed: ${req.failure?.message.code ?? "?"}`,
        detail: req.failure?.message.text,
      };
    case "cancelled":
      return { state: req.state, label: "cancelled" };
    case "gone":
      return { state: req.state, label: "ended (not seen: resynced)" };
  }
}

/** "paused (429)", "busy (max concurrent)", … for one gate. */
export function gateLabel(g: GateInfo): string {
  return gateText(g.skip, g.throttle);
}


/** A request's elapsed time at `nowMs` (its duration once ended). */
export function elapsedOf(req: Req, nowMs: number): number {
  if (req.durationMs !== undefined) return req.durationMs;
  if (req.endedAt !== undefined) return req.endedAt - req.startedAt;
  return nowMs - req.startedAt;
}

/** Requests on the board waiting on this upstream now, and since when the oldest waits. */
export function providerQueue(state: State, name: string): { waiting: number; oldestSince?: number } {
  let waiting = 0;
  let oldest: number | undefined;
  for (const r of Object.values(state.requests)) {
    if (r.state !== "queued") continue;
    const q = openWait(r);
    if (q?.kind !== "queue" || !q.gates.some((g) => g.upstream === name)) continue;
    waiting++;
    if (oldest === undefined || q.start < oldest) oldest = q.start;
  }
  return oldest === undefined ? { waiting } : { waiting, oldestSince: oldest };
}

/** The cluster's instances: this one first, then by name. */
export function clusterMembers(state: State): InstanceView[] {
  const members = state.cluster?.members ?? [];
  return members.slice().sort((a, b) => Number(b.self) - Number(a.self) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * What the banner says about the request DB: "request DB degraded: connection refused (120 rows
 * spooled)" while it is degraded, null otherwise. Takes the state's store, or a view.
 */
export function storeBanner(store: StoreView | null): string | null {
  if (!store || store.state !== "degraded") return null;
  const spooled = store.spooled_rows !== undefined ? ` (${spooledText(store.spooled_rows)})` : "";
  return `request DB degraded: ${store.reason ?? "unreachable"}${spooled}`;
}

/** Whether the history table shows an instance column: some row has one (a PostgreSQL request DB). */
export function historyHasInstance(rows: readonly HistoryRow[]): boolean {
  return rows.some((r) => r.instance !== undefined);
}

/** The client names seen, most recent first. */
export function clientNames(state: State): string[] {
  return Object.entries(state.clients)
    .sort((a, b) => b[1] - a[1])
    .map(([n]) => n);
}

/** A request by id, on the board or in recent. */
export function findRequest(state: State, id: number): Req | undefined {
  return state.requests[id] ?? state.recent.find((r) => r.id === id);
}

export type { HealthState };

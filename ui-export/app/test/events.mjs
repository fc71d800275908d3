// Realistic event builders: the shapes sluice emits (protocol.md), with times relative to T0.
export const T0 = 1_790_000_000_000;

export const msg = (code, text, args = {}) => ({ code, args, text });

export function provider(name, over = {}) {
  return {
    name,
    protocol: "anthropic",
    base_url: `https://${name}.example`,
    disabled: false,
    health: "ok",
    limits: [],
    in_flight: 0,
    queued: 0,
    ...over,
  };
}

export function snapshot(over = {}) {
  return { kind: "snapshot", req: 1, now_ms: T0, providers: [], in_flight: [], seq: 0, ...over };
}

export const started = (id, t, over = {}) => ({
  kind: "request_started",
  at_ms: T0 + t,
  id,
  client: "alice",
  key_masked: "sk-…abcd",
  dialect: "anthropic",
  model: "claude-sonnet-4",
  stream: true,
  path: "/v1/messages",
  ...over,
});

export const routed = (id, t, candidates) => ({
  kind: "request_routed",
  at_ms: T0 + t,
  id,
  route: "claude-*",
  candidates,
});

// An Attempt event is emitted when the hop ends: at t, lasting ms.
export const attempt = (id, t, view) => ({ kind: "attempt", at_ms: T0 + t, id, view: { ms: 0, ...view } });

export const queued = (id, t, gates, deadline = 120_000) => ({
  kind: "request_queued",
  at_ms: T0 + t,
  id,
  upstreams: gates.map((g) => g.upstream),
  gates,
  until_ms: T0 + deadline,
});

export const dequeued = (id, t, upstream) => ({
  kind: "request_dequeued",
  at_ms: T0 + t,
  id,
  ...(upstream !== undefined ? { upstream } : {}),
});

export const retrying = (id, t, over = {}) => ({
  kind: "request_retrying",
  at_ms: T0 + t,
  id,
  upstreams: ["anthropic-a"],
  attempt: 1,
  retry_at_ms: T0 + t + 2100,
  until_ms: T0 + 120_000,
  cause: "schedule",
  last_error: msg("gw.upstream.status", "sluice: anthropic-a answered 529", { provider: "anthropic-a", status: "529" }),
  ...over,
});

export const headers = (id, t, status = 200) => ({ kind: "request_headers", at_ms: T0 + t, id, status, ttfb_ms: t });
export const firstToken = (id, t, ttft = t) => ({ kind: "request_first_token", at_ms: T0 + t, id, ttft_ms: ttft });
export const finished = (id, t, status = 200) => ({
  kind: "request_finished",
  at_ms: T0 + t,
  id,
  status,
  bytes: 2048,
  duration_ms: t,
  usage: { input: 12, output: 40, cache_read: 0, cache_write: 0, estimated: false },
  cost_micros: 1234,
});
export const failed = (id, t, source, message) => ({
  kind: "request_failed",
  at_ms: T0 + t,
  id,
  source,
  message,
  duration_ms: t,
});
export const cancelled = (id, t) => ({ kind: "request_cancelled", at_ms: T0 + t, id, duration_ms: t });

export const throttle = (name, t, th) => ({
  kind: "throttle_changed",
  at_ms: T0 + t,
  provider: name,
  ...(th ? { throttle: th } : {}),
});

export const paused = (name, t, ms, consecutive = 1) => ({
  kind: "paused",
  until_ms: T0 + t + ms,
  consecutive,
  reason: msg("gw.upstream.paused", `${name} paused until 14:13:23 after ${consecutive} rate limits (429) in a row`, {
    provider: name,
  }),
});

// Cluster mode: the event, and get_instances' answer as sluice sends it.
export const clusterChanged = (t, state, instances, reason) => ({
  kind: "cluster_changed",
  at_ms: T0 + t,
  state,
  instances,
  ...(reason ? { reason } : {}),
});

export const instance = (name, over = {}) => ({ name, self: false, seen_ms: T0, in_flight: 0, queued: 0, ...over });

export function instancesOk(over = {}) {
  return {
    kind: "ok",
    req: 2,
    cluster: { name: "prod", instance: "gw-a", state: "joined", instances: 2 },
    instances: [instance("gw-b", { seen_ms: T0 - 900, in_flight: 4, queued: 1 }), instance("gw-a", { self: true, in_flight: 3 })],
    ...over,
  };
}

// The request DB (a PostgreSQL one may degrade): the event, and get_providers' answer with its store.
export const storeChanged = (t, state, over = {}) => ({
  kind: "store_changed",
  at_ms: T0 + t,
  state,
  store_kind: "postgres",
  ...over,
});

export function providersOk(store) {
  return { kind: "ok", req: 4, providers: [], ...(store ? { store } : {}) };
}

// A scriptable fake provider on 127.0.0.1: each request takes the next scripted
// reply (status, headers, body or SSE fixture, chunked or not, optionally cut
// after N bytes) and is recorded, so a test can say what the upstream saw.
import http from "node:http";

import { fixture } from "./harness.mjs";

const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "request-id": "req_fake" };
const JSON_HEADERS = { "content-type": "application/json" };

// A 200 SSE reply from a fixture; `over` adds or replaces fields (cutAfter, status…).
export function sseReply(name, over = {}) {
  return { status: 200, headers: SSE_HEADERS, body: fixture(name), chunked: true, ...over };
}

// A whole JSON reply with a content-length.
export function jsonReply(status, value, headers = {}) {
  return { status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(value), chunked: false };
}

// SSE bodies go out one event per write so that sluice sees them across reads,
// as it would from a real provider.
function pieces(body) {
  const out = [];
  let at = 0;
  while (at < body.length) {
    const end = body.indexOf("\n\n", at);
    const next = end < 0 ? body.length : end + 2;
    out.push(body.subarray(at, next));
    at = next;
  }
  return out;
}

// reply.delayMs holds the head back (a provider slow to answer); a client gone meanwhile gets nothing.
function serve(reply, res) {
  if (reply.delayMs) {
    const timer = setTimeout(() => {
      if (!res.destroyed) serve({ ...reply, delayMs: 0 }, res);
    }, reply.delayMs);
    res.once("close", () => clearTimeout(timer));
    return;
  }
  let body = Buffer.from(reply.body ?? "");
  const cut = reply.cutAfter !== undefined;
  if (cut) body = body.subarray(0, reply.cutAfter);
  const headers = { ...reply.headers };
  if (!reply.chunked && !cut) headers["content-length"] = String(body.length);
  res.writeHead(reply.status, headers);
  const parts = reply.chunked ? pieces(body) : [body];
  let i = 0;
  const writeNext = () => {
    if (i === parts.length) {
      // A cut drops the connection with the chunked framing unfinished: to
      // sluice that is a break, not an end.
      if (cut) res.socket?.destroy();
      else res.end();
      return;
    }
    res.write(parts[i++], writeNext);
  };
  writeNext();
}

// Starts a fake on an ephemeral port. Returns {port, push(reply), requests,
// reset(), close()}. An unscripted request gets a 599 so that a test which did
// not expect it fails on the status.
export async function startFake() {
  const queue = [];
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      requests.push({
        at: Date.now(),
        method: req.method,
        url: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      const reply = queue.shift() ?? jsonReply(599, { error: { message: "fake: nothing scripted" } });
      serve(reply, res);
    });
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  return {
    port: server.address().port,
    requests,
    push: (...replies) => queue.push(...replies),
    reset() {
      queue.length = 0;
      requests.length = 0;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// HTTP/2 rapid reset (CVE-2023-44487; stack-notes.md): one connection sends 3 000 valid requests,
// each reset right after its body. sluice must survive, serve others, and spend its request machine
// (events, DB rows) on at most about SL_RESET_GUARD_MAX_PER_SEC of them per second: the rest get a
// bare 429 before any gateway work.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";

import { ControlClient } from "./control_client.mjs";
import { jsonReply, startFake } from "./fake_upstream.mjs";
import { CONTROL_KEY, GATEWAY_KEY, startGateway, TEST_TIMEOUT_MS } from "./harness.mjs";

let up, gw;

before(async () => {
  up = await startFake();
  gw = await startGateway([{ name: "only", protocol: "anthropic", port: up.port }], { threads: 1 });
});
after(async () => {
  await gw?.stop();
  await up?.close();
});

function frame(type, flags, id, payload) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id, 5);
  return Buffer.concat([h, payload]);
}

// An HPACK literal header field without indexing, new name, no Huffman coding.
function literal(name, value) {
  return Buffer.concat([Buffer.from([0x00, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)]);
}

test("3 000 streams reset after their body: sluice survives and does little work for them", { timeout: TEST_TIMEOUT_MS }, async () => {
  const n = 3000;
  const body = Buffer.from(JSON.stringify({ model: "claude-x", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }));
  const headers = Buffer.concat([literal(":method", "POST"), literal(":scheme", "http"), literal(":path", "/v1/messages"),
                                 literal(":authority", "127.0.0.1"), literal("x-api-key", GATEWAY_KEY),
                                 literal("content-type", "application/json")]);
  const out = [Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(4, 0, 0, Buffer.alloc(0))];
  const cancel = Buffer.alloc(4);
  cancel.writeUInt32BE(8);
  for (let i = 0; i < n; i++) {
    const id = 1 + 2 * i;
    out.push(frame(1, 0x4, id, headers), frame(0, 0x1, id, body), frame(3, 0, id, cancel));
  }
  const sock = net.connect(gw.port, "127.0.0.1");
  sock.on("data", () => {});
  sock.on("error", () => {});
  await new Promise((resolve) => sock.write(Buffer.concat(out), resolve));
  await new Promise((r) => setTimeout(r, 1000));
  sock.destroy();
  // Another client is served as usual.
  up.push(jsonReply(200, { id: "m", type: "message", role: "assistant", model: "claude-x", content: [{ type: "text", text: "ok" }],
                           stop_reason: "end_turn", usage: { input_tokens: 1, output_tokens: 1 } }));
  const res = await fetch(`http://127.0.0.1:${gw.port}/v1/messages`, {
    method: "POST", headers: { "x-api-key": GATEWAY_KEY, "content-type": "application/json" }, body,
  });
  assert.equal(res.status, 200);
  await res.text();
  assert.ok(up.requests.length <= 1 + 5, `the reset streams reached the upstream ${up.requests.length - 1} times`);
  const health = await fetch(`http://127.0.0.1:${gw.port}/healthz`);
  assert.equal(health.status, 200);
  // The request machine saw about the guard's allowance, not 3 000: count its rows through `history`.
  const c = await ControlClient.connect(gw.controlPort, { key: CONTROL_KEY });
  await c.next();
  let rows = 0;
  let cursor;
  for (let page = 0; page < 20; page++) {
    const r = await c.request({ kind: "history", since_ms: 0, limit: 500, filter: {}, ...(cursor ? { cursor } : {}) });
    rows += r.rows.length;
    if (!r.next_cursor) break;
    cursor = r.next_cursor;
  }
  await c.close();
  assert.ok(rows <= 400, `${rows} request rows for ${n} reset streams`);
});

// A control-protocol client for the tests, on the generated TypeScript package (ui-export/),
// compiled once per process into a temp dir, and the `ws` package.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import WebSocket from "ws";

const here = (rel) => fileURLToPath(new URL(rel, import.meta.url));
const uiExport = process.env.SLUICE_UI_EXPORT || here("../../ui-export");

let protoPromise = null;

// The generated package, compiled from ui-export/src as committed.
export function protocol() {
  protoPromise ??= (async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-proto-"));
    const tsc = path.join(uiExport, "node_modules", "typescript", "bin", "tsc");
    execFileSync(process.execPath, [tsc, "-p", uiExport, "--outDir", path.join(out, "dist"), "--declaration", "false"]);
    fs.symlinkSync(path.join(uiExport, "node_modules"), path.join(out, "node_modules"), "dir");
    fs.writeFileSync(path.join(out, "package.json"), '{"type": "module"}\n');
    return import(pathToFileURL(path.join(out, "dist", "protocol.js")).href);
  })();
  return protoPromise;
}

// One connection. messages: every decoded message in arrival order; next(pred) waits for the
// first not yet taken that matches; request(msg) sends with a fresh req and waits for its reply.
export class ControlClient {
  // tls: {ca, servername} connects with wss:// and verifies the server against ca.
  static async connect(port, { key, version, subprotocol = "sluice-control", path: p = "/control", tls } = {}) {
    const proto = await protocol();
    const url = `${tls ? "wss" : "ws"}://127.0.0.1:${port}${p}`;
    const ws = new WebSocket(url, subprotocol ? [subprotocol] : [], tls ?? {});
    ws.binaryType = "nodebuffer";
    const c = new ControlClient(proto, ws);
    await new Promise((resolve, reject) => {
      ws.once("open", resolve);
      ws.once("error", reject);
    });
    if (key !== undefined) {
      c.sendMessage({ kind: "hello", protocol: version ?? proto.PROTOCOL_VERSION, key, client: "test/1" });
    }
    return c;
  }

  constructor(proto, ws) {
    this.proto = proto;
    this.ws = ws;
    this.messages = [];
    this.taken = 0;
    this.waiters = [];
    this.nextReq = 1;
    this.closed = new Promise((resolve) => ws.once("close", (code) => resolve(code)));
    this.frames = 0;
    ws.on("message", (data, isBinary) => {
      this.frames++;
      if (!isBinary) throw new Error("the server sent a text frame");
      for (const m of proto.decodeMessages(new Uint8Array(data))) this.messages.push(m);
      this.wake();
    });
  }

  wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  sendMessage(m) {
    this.ws.send(this.proto.encodeMessage(m));
  }

  sendRaw(bytes, binary = true) {
    this.ws.send(bytes, { binary });
  }

  // The first message after those already taken that matches pred; the ones before it are taken too.
  async next(pred = () => true, timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      while (this.taken < this.messages.length) {
        const m = this.messages[this.taken++];
        if (pred(m)) return m;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching message within ${timeoutMs} ms; got ${JSON.stringify(this.messages.slice(-5))}`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  async request(m, timeoutMs = 5000) {
    const req = this.nextReq++;
    this.sendMessage({ ...m, req });
    const start = this.taken;
    // Replies may come between events: look from where we are without taking the events.
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.messages.findIndex((x, j) => j >= start && x.req === req && ["ok", "error", "snapshot"].includes(x.kind));
      if (i >= 0) {
        // A snapshot starts the subscription's stream afresh: what came before it is the old one's.
        if (this.messages[i].kind === "snapshot") this.taken = Math.max(this.taken, i + 1);
        return this.messages[i];
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no reply to ${m.kind} within ${timeoutMs} ms`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  close() {
    this.ws.close();
    return this.closed;
  }
}

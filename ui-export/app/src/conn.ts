// The control connection: WebSocket + hello handshake + request/reply matching + reconnects.
// The app's state lives elsewhere; this only reports what the link is doing and passes messages on.
import {
  PROTOCOL_VERSION,
  decodeMessages,
  encodeMessage,
  type ErrorMessage,
  type Message,
  type Msg,
  type OkMessage,
  type SnapshotMessage,
} from "../../src/protocol.js";

export type LinkState = "connecting" | "connected" | "mismatch" | "disconnected" | "resyncing";

export interface LinkInfo {
  state: LinkState;
  /** what the banner says */
  text: string;
  /** the server's protocol version (welcome, or `ours` of a mismatch) */
  serverProtocol?: number | string;
  server?: string;
  /** the next automatic reconnect, in the browser's clock */
  retryAt?: number;
  /** the control key is needed (none stored, or it was rejected) */
  needKey: boolean;
  keyError?: string;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** The requests a client sends, without the `req` the connection adds. */
export type Request = DistributiveOmit<
  Exclude<Extract<Message, { req: number }>, OkMessage | ErrorMessage | SnapshotMessage>,
  "req"
>;
export type Reply = OkMessage | ErrorMessage;

export const CLIENT_NAME = "sluice-web/0.1";
const RETRY_STEPS_MS = [1000, 2000, 4000, 8000, 15000];

export interface ConnHooks {
  /** a message that is not a reply to a request (snapshot, event, events_dropped, welcome) */
  message(m: Message): void;
  /** the link changed state */
  link(info: LinkInfo): void;
  /** the handshake succeeded: subscribe now */
  welcome(): void;
}

export class Control {
  info: LinkInfo = { state: "disconnected", text: "not connected", needKey: true };
  /** sluice's clock minus the browser's, from the welcome */
  clockOffset = 0;
  private ws: WebSocket | null = null;
  private key: string | null = null;
  private nextReq = 1;
  private pending = new Map<number, { resolve: (r: Reply | SnapshotMessage) => void; reject: (e: Error) => void }>();
  private retries = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private welcomed = false;
  /** when the current link was welcomed (browser clock) */
  private upSince = 0;

  constructor(
    readonly url: string,
    private hooks: ConnHooks,
  ) {}

  /** sluice's clock now. */
  now(): number {
    return Date.now() + this.clockOffset;
  }

  /** Connects with `key` (or the last key); a no-op while a link is up. */
  connect(key?: string): void {
    if (key !== undefined) this.key = key;
    if (this.key === null) {
      this.set({ state: "disconnected", text: "enter the control key", needKey: true });
      return;
    }
    if (this.info.state === "mismatch" && key === undefined) return; // never loops on a mismatch
    this.clearRetry();
    if (this.ws) this.drop(this.ws);
    this.welcomed = false;
    this.set({ state: "connecting", text: `connecting to ${this.url}`, needKey: false });
    let ws: WebSocket;
    try {
      ws = new WebSocket(this.url, "sluice-control");
    } catch (e) {
      this.lost(`cannot connect: ${(e as Error).message}`);
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    const key0 = this.key;
    ws.onopen = () => {
      ws.send(encodeMessage({ kind: "hello", protocol: PROTOCOL_VERSION, key: key0, client: CLIENT_NAME }));
    };
    ws.onmessage = (e) => {
      if (this.ws !== ws) return;
      if (!(e.data instanceof ArrayBuffer)) {
        this.hooks.message({ kind: "events_dropped", count: 0 }); // a text frame: the stream is not to be trusted
        return;
      }
      let msgs: Message[];
      try {
        msgs = decodeMessages(new Uint8Array(e.data));
      } catch (err) {
        // A frame that does not decode lost whatever it carried: resync rather than guess.
        console.error("sluice-web: undecodable frame", err);
        this.hooks.message({ kind: "events_dropped", count: 0 });
        return;
      }
      for (const m of msgs) this.onMessage(m);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.failPending();
      if (this.info.state === "mismatch" || this.info.needKey) return;
      // A link that stayed up a while starts the backoff afresh; one that keeps dropping does not.
      if (this.welcomed && Date.now() - this.upSince > 10_000) this.retries = 0;
      this.lost(e.code === 1000 || e.code === 1005 ? "disconnected" : `disconnected (${e.code}${e.reason ? ` ${e.reason}` : ""})`);
    };
  }

  private onMessage(m: Message): void {
    if (m.kind === "welcome") {
      this.welcomed = true;
      this.upSince = Date.now();
      this.clockOffset = m.now_ms - Date.now();
      this.set({
        state: "connected",
        text: `connected (protocol v${m.protocol})`,
        serverProtocol: m.protocol,
        server: m.server,
        needKey: false,
      });
      this.hooks.welcome();
      return;
    }
    if (m.kind === "refused") {
      this.refused(m.message);
      return;
    }
    if ((m.kind === "ok" || m.kind === "error" || m.kind === "snapshot") && this.pending.has(m.req)) {
      const p = this.pending.get(m.req)!;
      this.pending.delete(m.req);
      p.resolve(m);
      if (m.kind !== "snapshot") return;
    }
    this.hooks.message(m);
  }

  private refused(message: Msg): void {
    const ws = this.ws;
    this.ws = null;
    if (ws) this.drop(ws);
    this.failPending();
    if (message.code === "control.protocol.mismatch") {
      const ours = message.args.ours ?? "?";
      const theirs = message.args.theirs ?? String(PROTOCOL_VERSION);
      this.set({
        state: "mismatch",
        text: `version mismatch: sluice speaks protocol v${ours}, this app v${theirs} — load the app that this sluice serves (${message.text})`,
        serverProtocol: ours,
        needKey: false,
      });
    } else if (message.code === "control.auth.rejected") {
      this.key = null;
      this.set({ state: "disconnected", text: "the control key was rejected", needKey: true, keyError: message.text });
    } else {
      this.lost(`refused: ${message.text} (${message.code})`);
    }
  }

  /** The link is gone: say so and try again later (backoff), keeping the key. */
  private lost(text: string): void {
    const wait = RETRY_STEPS_MS[Math.min(this.retries, RETRY_STEPS_MS.length - 1)];
    this.retries++;
    const retryAt = Date.now() + wait;
    this.set({ state: "disconnected", text, retryAt, needKey: false });
    this.clearRetry();
    this.retryTimer = setTimeout(() => this.connect(), wait);
  }

  /** Marks the stream as resyncing (events were lost) or back in sync. */
  setResyncing(on: boolean, why = "resyncing"): void {
    if (on && this.info.state === "connected") this.set({ ...this.info, state: "resyncing", text: why });
    if (!on && this.info.state === "resyncing")
      this.set({ ...this.info, state: "connected", text: `connected (protocol v${this.info.serverProtocol})` });
  }

  /** Sends a request and resolves with its reply (ok / error, or the snapshot for subscribe). */
  request(m: Request): Promise<Reply | SnapshotMessage> {
    const ws = this.ws;
    if (!ws || !this.welcomed || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("not connected"));
    const req = this.nextReq++;
    return new Promise((resolve, reject) => {
      this.pending.set(req, { resolve, reject });
      ws.send(encodeMessage({ ...m, req } as Message));
    });
  }

  /** Closes the link and does not reconnect. */
  close(): void {
    this.clearRetry();
    if (this.ws) this.drop(this.ws);
    this.ws = null;
  }

  private drop(ws: WebSocket): void {
    ws.onopen = ws.onmessage = ws.onclose = null;
    ws.onerror = null;
    try {
      ws.close();
    } catch {
      /* already closed */
    }
  }

  private failPending(): void {
    for (const p of this.pending.values()) p.reject(new Error("the connection closed"));
    this.pending.clear();
  }

  private clearRetry(): void {
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  private set(info: LinkInfo): void {
    this.info = info;
    this.hooks.link(info);
  }
}

/** The control WebSocket's URL: `?control=` overrides; else the page's own host, path /control. */
export function controlUrl(loc: Location): string {
  const override = new URLSearchParams(loc.search).get("control");
  if (override) return override;
  return `${loc.protocol === "https:" ? "wss" : "ws"}://${loc.host}/control`;
}

const KEY_ITEM = "sluice.control.key";

/**
 * The control key: a `#key=` fragment wins (it is stored, then removed from the address bar),
 * else the one kept in sessionStorage, else null.
 */
export function takeKey(loc: Location, hist: History, store: Storage): string | null {
  const frag = new URLSearchParams(loc.hash.replace(/^#/, ""));
  const k = frag.get("key");
  if (k) {
    store.setItem(KEY_ITEM, k);
    frag.delete("key");
    const rest = frag.toString();
    hist.replaceState(null, "", `${loc.pathname}${loc.search}${rest ? `#${rest}` : ""}`);
    return k;
  }
  return store.getItem(KEY_ITEM);
}

export function storeKey(store: Storage, key: string | null): void {
  if (key === null) store.removeItem(KEY_ITEM);
  else store.setItem(KEY_ITEM, key);
}

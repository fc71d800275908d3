// What the views get from the app: the state, sluice's clock, the link, and navigation.
import type { HistoryRow, SnapshotMessage } from "../../../src/protocol.js";
import type { Reply, Request } from "../conn.js";
import type { State } from "../state.js";

export type Selection = { kind: "live"; id: number } | { kind: "history"; row: HistoryRow };

export interface Ctx {
  readonly state: State;
  /** sluice's clock now */
  now(): number;
  /** whether requests can be sent */
  online(): boolean;
  request(m: Request): Promise<Reply | SnapshotMessage>;
  openTimeline(sel: Selection): void;
  /** asks for a render soon (after a user action) */
  changed(): void;
}

/** The reply's text for humans: "ok", or the error's text and code as sluice sent them. */
export function replyText(r: Reply | SnapshotMessage): { ok: boolean; text: string; code?: string; problems?: string[] } {
  if (r.kind === "error") {
    const out: { ok: boolean; text: string; code?: string; problems?: string[] } = { ok: false, text: r.message.text, code: r.message.code };
    if (r.problems) out.problems = r.problems.map((p) => `${p.text} (${p.code})`);
    return out;
  }
  return { ok: true, text: "ok" };
}

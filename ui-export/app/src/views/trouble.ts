// The Trouble absorbed panel (observability.md "In the web app"): the requests sluice answered
// although an upstream failed, said 429 or was full on the way — by the first trouble each met —
// the requests lost to such trouble, and the share rescued; over the last hour and since start.
import type { TroubleCause } from "../../../src/protocol.js";
import { TROUBLE_CAUSE_VALUES } from "../../../src/protocol.js";
import { h, setData, setText } from "../dom.js";
import { troubleSince, troubleSinceStart, type TroubleSummary } from "../stats.js";
import type { Ctx } from "./ctx.js";

const HOUR_MS = 3_600_000;

export const CAUSE_TEXT: Record<TroubleCause, string> = {
  retried: "retried",
  failed_over: "failed over",
  queued_429: "waited behind a 429",
  queued_window: "waited for a window",
  queued_slot: "waited for a slot",
};

type Column = "hour" | "start";

interface Cells {
  rescued: HTMLElement;
  lost: HTMLElement;
  share: HTMLElement;
  causes: Record<TroubleCause, HTMLElement>;
}

export class TroublePanel {
  readonly el: HTMLElement;
  private since: HTMLElement;
  private cells: Record<Column, Cells>;
  private seen = -1;
  private seenMinute = -1;

  constructor(private ctx: Ctx) {
    const col = (c: Column): Cells => ({
      rescued: h("td", { class: "num big", testid: `trouble-${c}-rescued` }),
      lost: h("td", { class: "num", testid: `trouble-${c}-lost` }),
      share: h("td", { class: "num", testid: `trouble-${c}-share` }),
      causes: {
        retried: h("td", { class: "num", testid: `trouble-${c}-retried` }),
        failed_over: h("td", { class: "num", testid: `trouble-${c}-failed_over` }),
        queued_429: h("td", { class: "num", testid: `trouble-${c}-queued_429` }),
        queued_window: h("td", { class: "num", testid: `trouble-${c}-queued_window` }),
        queued_slot: h("td", { class: "num", testid: `trouble-${c}-queued_slot` }),
      },
    });
    this.cells = { hour: col("hour"), start: col("start") };
    const row = (label: string, cls: string, pick: (c: Cells) => HTMLElement) =>
      h("tr", { class: cls }, h("th", {}, label), pick(this.cells.hour), pick(this.cells.start));
    this.since = h("span", { class: "summary muted" });
    this.el = h(
      "section",
      { class: "trouble", testid: "trouble-panel" },
      h("h2", {}, "Trouble absorbed", this.since),
      h(
        "table",
        { class: "grid trouble-table" },
        h("thead", {}, h("tr", {}, h("th", {}), h("th", {}, "last hour"), h("th", {}, "since start"))),
        h(
          "tbody",
          {},
          row("rescued", "rescued", (c) => c.rescued),
          ...TROUBLE_CAUSE_VALUES.map((cause) => row(`· ${CAUSE_TEXT[cause]}`, "cause", (c) => c.causes[cause])),
          row("lost to trouble", "lost", (c) => c.lost),
          row("share rescued", "share", (c) => c.share),
        ),
      ),
    );
  }

  render(): void {
    const st = this.ctx.state.stats;
    const now = this.ctx.now();
    // The last hour's edge moves with the clock: redrawn on new stats, and once a minute.
    const minute = Math.floor(now / 60_000);
    if (st.rev === this.seen && minute === this.seenMinute) return;
    this.seen = st.rev;
    this.seenMinute = minute;
    setText(this.since, st.sinceMs === null ? "waiting for the first 10 s of stats" : `since ${new Date(st.sinceMs).toLocaleString()}`);
    this.fill(this.cells.hour, troubleSince(st, now - HOUR_MS));
    this.fill(this.cells.start, troubleSinceStart(st));
  }

  private fill(c: Cells, s: TroubleSummary): void {
    setText(c.rescued, String(s.rescuedSum));
    setText(c.lost, String(s.lostSum));
    setText(c.share, s.share === null ? "—" : `${(s.share * 100).toFixed(s.share === 1 ? 0 : 1)} %`);
    for (const cause of TROUBLE_CAUSE_VALUES) {
      setText(c.causes[cause], String(s.rescued[cause]));
      setData(c.causes[cause], "count", String(s.rescued[cause]));
    }
    setData(c.rescued, "count", String(s.rescuedSum));
  }
}

// The live request board: every request on the board with its state and countdown, and the
// recent ones below. Rows are keyed by id and updated in place.
import { fmtCountdown, fmtDuration } from "../format.js";
import { h, setData, setText, syncList } from "../dom.js";
import { boardRows, elapsedOf, ENDED, statusOf, type Req } from "../state.js";
import { replyText, type Ctx } from "./ctx.js";

interface Row {
  el: HTMLTableRowElement;
  client: HTMLElement;
  model: HTMLElement;
  badge: HTMLElement;
  label: HTMLElement;
  countdown: HTMLElement;
  provider: HTMLElement;
  elapsed: HTMLElement;
  cancel: HTMLButtonElement;
}

const BADGE: Record<string, string> = {
  starting: "starting",
  queued: "queued",
  attempting: "attempting",
  backoff: "backing off",
  streaming: "streaming",
  done: "done",
  failed: "failed",
  cancelled: "cancelled",
  gone: "gone",
};

export class Board {
  readonly el: HTMLElement;
  private body: HTMLTableSectionElement;
  private rows = new Map<string, HTMLTableRowElement>();
  private parts = new WeakMap<HTMLElement, Row>();
  private summary: HTMLElement;
  private empty: HTMLElement;
  private recentBody: HTMLTableSectionElement;
  private recentRows = new Map<string, HTMLTableRowElement>();
  private recentParts = new WeakMap<HTMLElement, Row>();
  private recentTitle: HTMLElement;
  selected: number | null = null;

  constructor(private ctx: Ctx) {
    this.body = h("tbody");
    this.summary = h("span", { class: "summary muted", testid: "board-summary" });
    this.empty = h("p", { class: "muted empty" }, "no requests in flight — send one through sluice and it shows up here");
    this.recentBody = h("tbody");
    this.recentTitle = h("summary", {}, "recent");
    this.el = h(
      "section",
      { class: "board", testid: "request-board" },
      h("h2", {}, "Requests ", this.summary),
      h("table", { class: "grid" }, head(), this.body),
      this.empty,
      h("details", { class: "recent" }, this.recentTitle, h("table", { class: "grid" }, head(), this.recentBody)),
    );
  }

  render(): void {
    const s = this.ctx.state;
    const rows = boardRows(s);
    const live = rows.filter((r) => !ENDED.has(r.state));
    const count = (st: string) => live.filter((r) => r.state === st).length;
    const bits = [`${live.length} live`];
    for (const [st, word] of [
      ["queued", "queued"],
      ["backoff", "backing off"],
      ["streaming", "streaming"],
    ] as const)
      if (count(st) > 0) bits.push(`${count(st)} ${word}`);
    setText(this.summary, bits.join(" · "));
    this.empty.hidden = rows.length > 0;
    syncList(this.body, rows, (r) => String(r.id), (r) => this.create(r, "request-row", this.parts), (el, r) => this.update(el, r, this.parts), this.rows);
    const recent = s.recent.slice(0, 100);
    setText(this.recentTitle, `recent (${s.recent.length})`);
    syncList(this.recentBody, recent, (r) => String(r.id), (r) => this.create(r, "recent-row", this.recentParts), (el, r) => this.update(el, r, this.recentParts), this.recentRows);
  }

  private create(r: Req, testid: string, parts: WeakMap<HTMLElement, Row>): HTMLTableRowElement {
    const cancel = h("button", { type: "button", class: "small", title: "cancel this request", testid: "cancel-request" }, "cancel");
    cancel.addEventListener("click", async (e) => {
      e.stopPropagation();
      cancel.disabled = true;
      try {
        const t = replyText(await this.ctx.request({ kind: "cancel_request", id: r.id }));
        cancel.title = t.ok ? "cancelled" : `${t.text} (${t.code})`;
        if (!t.ok) cancel.textContent = "refused";
      } catch (err) {
        cancel.title = (err as Error).message;
        cancel.disabled = false;
      }
    });
    const row: Row = {
      el: h("tr", { testid, data: { id: r.id } }),
      client: h("td"),
      model: h("td", { class: "model" }),
      badge: h("span", { class: "badge" }),
      label: h("span", { class: "label" }),
      countdown: h("span", { class: "countdown", testid: "countdown" }),
      provider: h("td"),
      elapsed: h("td", { class: "num" }),
      cancel,
    };
    row.el.append(
      h("td", { class: "num id" }, String(r.id)),
      row.client,
      row.model,
      h("td", { class: "state" }, row.badge, " ", row.label, " ", row.countdown),
      row.provider,
      row.elapsed,
      h("td", {}, cancel),
    );
    row.el.addEventListener("click", () => {
      this.selected = r.id;
      this.ctx.openTimeline({ kind: "live", id: r.id });
    });
    parts.set(row.el, row);
    return row.el;
  }

  private update(el: HTMLTableRowElement, r: Req, parts: WeakMap<HTMLElement, Row>): void {
    const row = parts.get(el)!;
    const now = this.ctx.now();
    const st = statusOf(r);
    setData(el, "state", r.state);
    el.classList.toggle("selected", this.selected === r.id);
    setText(row.client, r.client);
    setText(row.model, r.model + (r.stream ? " ⇶" : ""));
    row.model.title = `${r.dialect ?? ""} ${r.path}${r.session ? ` · session ${r.session}` : ""}${r.instance ? ` · on ${r.instance}` : ""}`;
    setText(row.badge, BADGE[r.state] ?? r.state);
    row.badge.className = `badge st-${r.state}`;
    setText(row.label, st.label);
    row.label.title = st.detail ?? "";
    setText(row.countdown, st.until !== undefined ? fmtCountdown(st.until, now) : "");
    setText(row.provider, r.provider ?? "");
    setText(row.elapsed, fmtDuration(elapsedOf(r, now)));
    row.cancel.hidden = ENDED.has(r.state);
  }
}

function head(): HTMLTableSectionElement {
  return h(
    "thead",
    {},
    h("tr", {}, ...["id", "client", "model", "state", "provider", "elapsed", ""].map((t) => h("th", {}, t))),
  );
}

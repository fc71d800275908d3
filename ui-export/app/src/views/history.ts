// History: rows from the request DB (`history`), filtered by provider, client, model, status and
// time; a row opens the same timeline as a live request, rebuilt from its attempts.
import type { HistoryFilter, HistoryRow } from "../../../src/protocol.js";
import { fmtClock, fmtDateTime, fmtDuration, fmtMicros } from "../format.js";
import { h, setText } from "../dom.js";
import { clientNames, historyHasInstance } from "../state.js";
import { replyText, type Ctx } from "./ctx.js";

const SINCE: [string, number][] = [
  ["last 15 min", 15 * 60_000],
  ["last hour", 3_600_000],
  ["last 6 hours", 6 * 3_600_000],
  ["last 24 hours", 24 * 3_600_000],
  ["last 7 days", 7 * 24 * 3_600_000],
  ["last 30 days", 30 * 24 * 3_600_000],
  ["all", 0],
];
const PAGE = 100;

/** "529 → served", "skipped(throttled) → 200": one word per hop. */
export function attemptsSummary(row: HistoryRow): string {
  return row.attempts
    .map((a) => {
      if (a.outcome === "skipped") return `${a.provider} skipped`;
      if (a.outcome === "served") return `${a.provider} served`;
      if (a.outcome === "status") return `${a.provider} ${a.status ?? "?"}`;
      if (a.outcome === "error") return `${a.provider} ${a.error?.code ?? "error"}`;
      return `${a.provider} ${a.outcome}`;
    })
    .join(" → ");
}

/** Time of day for today's rows, date and time for older ones. */
function when(at: number, now: number): string {
  return fmtDateTime(at).slice(0, 10) === fmtDateTime(now).slice(0, 10) ? fmtClock(at) : fmtDateTime(at);
}

export class HistoryView {
  readonly el: HTMLElement;
  private provider: HTMLSelectElement;
  private client: HTMLInputElement;
  private clientList: HTMLDataListElement;
  private model: HTMLInputElement;
  private status: HTMLInputElement;
  private since: HTMLSelectElement;
  private head: HTMLTableRowElement;
  private body: HTMLTableSectionElement;
  private more: HTMLButtonElement;
  private info: HTMLElement;
  private rows: HistoryRow[] = [];
  private cursor: string | undefined;
  private query: { since_ms: number; filter: HistoryFilter } | null = null;
  private providersKey = "";
  private clientsKey = "";
  private loadedOnce = false;

  constructor(private ctx: Ctx) {
    this.provider = h("select", { testid: "history-provider" }, h("option", { value: "" }, "any provider"));
    this.clientList = h("datalist", { id: "history-clients" });
    this.client = h("input", { type: "text", placeholder: "any client", testid: "history-client" });
    this.client.setAttribute("list", "history-clients");
    this.model = h("input", { type: "text", placeholder: "any model", testid: "history-model" });
    this.status = h("input", { type: "number", placeholder: "any status", class: "status", testid: "history-status" });
    this.since = h("select", { testid: "history-since" }, ...SINCE.map(([t, ms]) => h("option", { value: String(ms) }, t)));
    this.since.value = String(3_600_000);
    this.head = h("tr", {});
    this.setColumns(false);
    this.body = h("tbody");
    this.info = h("span", { class: "muted", testid: "history-info" });
    this.more = h("button", { type: "button", testid: "history-more", hidden: true, on: { click: () => void this.load(true) } }, "more");
    const form = h(
      "form",
      {
        class: "filters",
        on: {
          submit: (e) => {
            e.preventDefault();
            void this.load(false);
          },
        },
      },
      this.provider,
      this.client,
      this.clientList,
      this.model,
      this.status,
      this.since,
      h("button", { type: "submit", class: "primary", testid: "history-search" }, "Search"),
      this.info,
    );
    this.el = h(
      "section",
      { class: "history", testid: "history" },
      h("h2", {}, "History"),
      form,
      h(
        "table",
        { class: "grid" },
        h("thead", {}, this.head),
        this.body,
      ),
      this.more,
    );
  }

  /** Called when the tab is shown: the first time, it loads the last hour. */
  shown(): void {
    if (!this.loadedOnce && this.ctx.online()) void this.load(false);
  }

  private async load(more: boolean): Promise<void> {
    if (!more) {
      const filter: HistoryFilter = {};
      if (this.provider.value) filter.provider = this.provider.value;
      if (this.client.value.trim()) filter.client = this.client.value.trim();
      if (this.model.value.trim()) filter.model = this.model.value.trim();
      const st = this.status.value.trim();
      if (st !== "" && Number.isInteger(Number(st))) filter.status = Number(st);
      const span = Number(this.since.value);
      this.query = { since_ms: span > 0 ? this.ctx.now() - span : 0, filter };
      this.rows = [];
      this.cursor = undefined;
    }
    if (!this.query) return;
    this.loadedOnce = true;
    setText(this.info, "loading…");
    try {
      const r = await this.ctx.request({
        kind: "history",
        since_ms: this.query.since_ms,
        limit: PAGE,
        filter: this.query.filter,
        ...(more && this.cursor !== undefined ? { cursor: this.cursor } : {}),
      });
      if (r.kind !== "ok") {
        const t = replyText(r);
        setText(this.info, `${t.text} (${t.code})`);
        this.info.className = "bad";
        return;
      }
      this.info.className = "muted";
      this.rows = this.rows.concat(r.rows ?? []);
      this.cursor = r.next_cursor;
      setText(this.info, `${this.rows.length} row${this.rows.length === 1 ? "" : "s"}${this.cursor ? " (more available)" : ""}`);
      this.more.hidden = this.cursor === undefined;
      this.draw();
    } catch (e) {
      setText(this.info, (e as Error).message);
      this.info.className = "bad";
    }
  }

  /** The header; "instance" after "provider" only when some row has one (a PostgreSQL request DB). */
  private setColumns(instance: boolean): void {
    const cols = ["time", "id", "client", "model", "provider", ...(instance ? ["instance"] : []), "status", "duration", "first token", "hops", "cost"];
    this.head.replaceChildren(...cols.map((t) => h("th", {}, t)));
  }

  private draw(): void {
    const instance = historyHasInstance(this.rows);
    this.setColumns(instance);
    this.body.replaceChildren(
      ...this.rows.map((row) => {
        const tr = h(
          "tr",
          { testid: "history-row", data: { id: row.id, status: row.status } },
          h("td", { class: "muted time", title: fmtDateTime(row.at_ms) }, when(row.at_ms, this.ctx.now())),
          h("td", { class: "num id" }, String(row.id)),
          h("td", {}, row.client),
          h("td", { class: "model" }, row.model),
          h("td", {}, row.provider ?? ""),
          ...(instance ? [h("td", { class: "instance" }, row.instance ?? "")] : []),
          h("td", { class: row.status >= 400 ? "bad num" : "num" }, String(row.status)),
          h("td", { class: "num" }, fmtDuration(row.duration_ms)),
          h("td", { class: "num" }, row.ttft_ms !== undefined ? fmtDuration(row.ttft_ms) : ""),
          h("td", { class: "hops" }, attemptsSummary(row)),
          h("td", { class: "num" }, row.cost_micros !== undefined ? fmtMicros(row.cost_micros) : ""),
        );
        tr.addEventListener("click", () => this.ctx.openTimeline({ kind: "history", row }));
        return tr;
      }),
    );
  }

  render(): void {
    const s = this.ctx.state;
    const pkey = s.providerOrder.join("\n");
    if (pkey !== this.providersKey) {
      this.providersKey = pkey;
      const keep = this.provider.value;
      this.provider.replaceChildren(h("option", { value: "" }, "any provider"), ...s.providerOrder.map((n) => h("option", { value: n }, n)));
      this.provider.value = keep;
    }
    const clients = clientNames(s);
    const ckey = clients.join("\n");
    if (ckey !== this.clientsKey) {
      this.clientsKey = ckey;
      this.clientList.replaceChildren(...clients.map((n) => h("option", { value: n })));
    }
  }
}

// The limits editor: pick an upstream or a client key, edit its limits as rows, see the diff,
// push it (set_provider_limits / set_key_limits), then see sluice's answer and the LimitsChanged
// that says what it applied.
import type { Limit, LimitView, Period } from "../../../src/protocol.js";
import { fmtClock, fmtLimit, type Measure } from "../format.js";
import { h, setText } from "../dom.js";
import { diffChanges, diffLimits, limitsOf, MEASURES, PERIODS, rowsOf, type LimitRow } from "../limits.js";
import { clientNames, type LimitsApplied } from "../state.js";
import { replyText, type Ctx } from "./ctx.js";

type Target = "provider" | "client";
/** How long after `ok` a LimitsChanged is waited for before the push counts as "nothing changed". */
const NO_EVENT_MS = 3000;

export class LimitsEditor {
  readonly el: HTMLElement;
  private target: Target = "provider";
  private name = "";
  private rows: LimitRow[] = [];
  /** what the rows were loaded from (to notice when the user has not edited yet) */
  private loadedFrom = "";
  private edited = false;
  private targetSel: HTMLSelectElement;
  private providerSel: HTMLSelectElement;
  private clientInput: HTMLInputElement;
  private clientList: HTMLDataListElement;
  private rowsBody: HTMLTableSectionElement;
  private diff: HTMLElement;
  private problems: HTMLElement;
  private current: HTMLElement;
  private pushBtn: HTMLButtonElement;
  /** "sent…" while a push waits for its reply */
  private result: HTMLElement;
  private okEl: HTMLElement;
  private errorEl: HTMLElement;
  private applied: HTMLElement;
  private log: HTMLElement;
  private note: HTMLElement;
  /** after a push: the target, and how many LimitsChanged had been seen before it */
  private waiting: { target: Target; name: string; seen: number; okAt?: number } | null = null;
  private providersKey = "";
  private clientsKey = "";
  private logKey = -1;

  constructor(private ctx: Ctx) {
    this.targetSel = h(
      "select",
      { testid: "limits-target", on: { change: () => this.pick(this.targetSel.value as Target, this.defaultName(this.targetSel.value as Target)) } },
      h("option", { value: "provider" }, "upstream (provider)"),
      h("option", { value: "client" }, "client key"),
    );
    this.providerSel = h("select", { testid: "limits-provider", on: { change: () => this.pick("provider", this.providerSel.value) } });
    this.clientList = h("datalist", { id: "limits-clients" });
    this.clientInput = h("input", {
      type: "text",
      placeholder: "client key name",
      testid: "limits-client",
      on: { change: () => this.pick("client", this.clientInput.value.trim()) },
    });
    this.clientInput.setAttribute("list", "limits-clients");
    this.rowsBody = h("tbody");
    this.diff = h("ul", { class: "diff", testid: "limits-diff" });
    this.problems = h("ul", { class: "problems", testid: "limits-problems" });
    this.current = h("div", { class: "muted" });
    this.note = h("p", { class: "muted note" });
    this.pushBtn = h("button", { type: "button", class: "primary", testid: "limits-push", on: { click: () => void this.push() } }, "Push to sluice");
    this.result = h("div", { class: "result", testid: "limits-pending" });
    this.okEl = h("div", { class: "result ok", testid: "limits-ok", hidden: true });
    this.errorEl = h("div", { class: "result bad", testid: "limits-error", hidden: true });
    this.applied = h("div", { class: "applied", testid: "limits-applied", hidden: true });
    this.log = h("ol", { class: "applied-log" });
    this.el = h(
      "section",
      { class: "limits-editor", testid: "limits-editor" },
      h("h2", {}, "Usage limits"),
      h("div", { class: "pick" }, h("label", {}, "for ", this.targetSel), this.providerSel, this.clientInput, this.clientList),
      this.current,
      this.note,
      h(
        "table",
        { class: "grid rows" },
        h("thead", {}, h("tr", {}, ...["per", "every", "measure", "value", ""].map((t) => h("th", {}, t)))),
        this.rowsBody,
      ),
      h(
        "div",
        { class: "row-actions" },
        h("button", { type: "button", testid: "limits-add", on: { click: () => this.addRow() } }, "+ add limit"),
        h("button", { type: "button", testid: "limits-reset", on: { click: () => this.reload() } }, "reset to current"),
      ),
      h("h3", {}, "Change to push"),
      this.diff,
      this.problems,
      h("div", { class: "push" }, this.pushBtn, this.result, this.okEl, this.errorEl),
      this.applied,
      h("h3", {}, "Applied by sluice (LimitsChanged)"),
      this.log,
    );
  }

  private defaultName(t: Target): string {
    if (t === "provider") return this.ctx.state.providerOrder[0] ?? "";
    return clientNames(this.ctx.state)[0] ?? "";
  }

  private pick(t: Target, name: string): void {
    this.target = t;
    this.name = name;
    this.targetSel.value = t;
    if (t === "provider") this.providerSel.value = name;
    else this.clientInput.value = name;
    this.reload();
  }

  /** The limits sluice has for the target now, as far as the app knows. */
  private baseline(): { limits: (Limit | LimitView)[]; known: boolean } {
    const s = this.ctx.state;
    if (this.target === "provider") {
      const p = s.providers[this.name];
      return { limits: p?.limits ?? [], known: p !== undefined };
    }
    const l = s.clientLimits[this.name];
    return { limits: l ?? [], known: l !== undefined };
  }

  private reload(): void {
    this.rows = rowsOf(this.baseline().limits);
    this.loadedFrom = JSON.stringify(this.baseline().limits);
    this.edited = false;
    this.showResult(null);
    this.drawRows();
    this.render();
  }

  private addRow(): void {
    this.rows.push({ per: "minute", every: "1", measure: "requests", value: "" });
    this.edited = true;
    this.drawRows();
    this.render();
  }

  private drawRows(): void {
    this.rowsBody.replaceChildren(
      ...this.rows.map((r, i) => {
        const touch = () => {
          this.edited = true;
          this.render();
        };
        const per = h(
          "select",
          { testid: "limit-per", on: { change: () => ((r.per = per.value as Period), touch()) } },
          ...PERIODS.map((p) => h("option", { value: p }, p)),
        );
        per.value = r.per;
        const every = h("input", {
          type: "number",
          min: "1",
          value: r.every,
          class: "every",
          testid: "limit-every",
          on: { input: () => ((r.every = every.value), touch()) },
        });
        const measure = h(
          "select",
          { testid: "limit-measure", on: { change: () => ((r.measure = measure.value as Measure), touch()) } },
          ...MEASURES.map((m) => h("option", { value: m }, m === "cost" ? "cost (USD)" : m)),
        );
        measure.value = r.measure;
        const value = h("input", {
          type: "number",
          min: "0",
          step: "any",
          value: r.value,
          testid: "limit-value",
          on: { input: () => ((r.value = value.value), touch()) },
        });
        const del = h(
          "button",
          {
            type: "button",
            class: "small",
            testid: "limit-remove",
            on: {
              click: () => {
                this.rows.splice(i, 1);
                this.edited = true;
                this.drawRows();
                this.render();
              },
            },
          },
          "remove",
        );
        return h("tr", { testid: "limit-row" }, h("td", {}, per), h("td", {}, every), h("td", {}, measure), h("td", {}, value), h("td", {}, del));
      }),
    );
  }

  private async push(): Promise<void> {
    const { limits, problems } = limitsOf(this.rows);
    if (problems.length > 0 || this.name === "") return;
    const seen = this.ctx.state.limitsAppliedTotal;
    this.waiting = { target: this.target, name: this.name, seen };
    this.applied.hidden = true;
    this.showResult(null);
    setText(this.result, "sent…");
    try {
      const r =
        this.target === "provider"
          ? await this.ctx.request({ kind: "set_provider_limits", provider: this.name, limits })
          : await this.ctx.request({ kind: "set_key_limits", client: this.name, limits });
      const t = replyText(r);
      if (t.ok) {
        this.showResult({ ok: true, text: "ok: sluice accepted the limits" });
        if (this.waiting) this.waiting.okAt = Date.now();
      } else {
        this.waiting = null;
        this.showResult({ ok: false, text: t.text, code: t.code ?? "", problems: t.problems ?? [] });
      }
    } catch (e) {
      this.waiting = null;
      this.showResult({ ok: false, text: (e as Error).message, code: "", problems: [] });
    }
    this.render();
  }

  /** Shows sluice's reply to a push: `ok`, or its error's code, text and problems as sent. */
  private showResult(r: { ok: true; text: string } | { ok: false; text: string; code: string; problems: string[] } | null): void {
    setText(this.result, "");
    this.okEl.hidden = !(r && r.ok);
    this.errorEl.hidden = !(r && !r.ok);
    if (!r) return;
    if (r.ok) {
      setText(this.okEl, r.text);
      return;
    }
    this.errorEl.replaceChildren(
      ...(r.code ? [h("span", { class: "code" }, r.code), " "] : []),
      h("span", {}, r.text),
      ...r.problems.map((p) => h("div", { class: "problem" }, p)),
    );
  }

  render(): void {
    const s = this.ctx.state;
    // Pickers follow what the app knows; keep the user's choice.
    const pkey = s.providerOrder.join("\n");
    if (pkey !== this.providersKey) {
      this.providersKey = pkey;
      this.providerSel.replaceChildren(...s.providerOrder.map((n) => h("option", { value: n }, n)));
      if (this.name === "" && this.target === "provider" && s.providerOrder.length > 0) {
        this.pick("provider", s.providerOrder[0]);
        return;
      }
      if (this.target === "provider") this.providerSel.value = this.name;
    }
    const clients = clientNames(s);
    const ckey = clients.join("\n");
    if (ckey !== this.clientsKey) {
      this.clientsKey = ckey;
      this.clientList.replaceChildren(...clients.map((n) => h("option", { value: n })));
    }
    this.providerSel.hidden = this.target !== "provider";
    this.clientInput.hidden = this.target !== "client";

    const base = this.baseline();
    // Not edited yet and sluice's limits changed underneath: follow them.
    if (!this.edited && JSON.stringify(base.limits) !== this.loadedFrom) {
      this.rows = rowsOf(base.limits);
      this.loadedFrom = JSON.stringify(base.limits);
      this.drawRows();
    }
    setText(
      this.current,
      this.name === ""
        ? "pick an upstream or type a client key name"
        : `now: ${base.limits.length > 0 ? base.limits.map(fmtLimit).join(", ") : "no limits"}`,
    );
    setText(
      this.note,
      this.target === "client" && !base.known && this.name !== ""
        ? "sluice does not report a key's limits until they change: the rows start empty, and a push replaces whatever the key has."
        : "",
    );

    const { limits, problems } = limitsOf(this.rows);
    const d = diffLimits(base.limits, limits);
    this.diff.replaceChildren(
      ...(d.length === 0
        ? [h("li", { class: "muted" }, "no limits before or after")]
        : d.map((l) => h("li", { class: `op-${l.op === "+" ? "add" : l.op === "-" ? "del" : "same"}` }, `${l.op} ${l.text}`))),
    );
    this.problems.replaceChildren(...problems.map((p) => h("li", {}, p)));
    const changes = diffChanges(d);
    this.pushBtn.disabled = problems.length > 0 || this.name === "" || !this.ctx.online();
    this.pushBtn.textContent = changes ? "Push to sluice" : "Push (no change)";

    // The LimitsChanged that follows the push is what sluice applied.
    const w = this.waiting;
    if (w) {
      const hit = s.limitsApplied.find((a) => a.n > w.seen && a.target === w.target && a.name === w.name);
      if (hit) {
        this.waiting = null;
        this.applied.hidden = false;
        this.applied.replaceChildren(
          h("strong", {}, "applied "),
          `at ${fmtClock(hit.at)} to ${hit.target} ${hit.name}: `,
          hit.limits.length > 0 ? hit.limits.map(fmtLimit).join(", ") : "no limits",
        );
      } else if (w.okAt !== undefined && Date.now() - w.okAt > NO_EVENT_MS) {
        // sluice announces a change only: the same limits again are accepted without a LimitsChanged.
        this.waiting = null;
        setText(this.result, "no LimitsChanged followed: sluice had these limits already");
      }
    }
    if (s.limitsAppliedTotal !== this.logKey) {
      this.logKey = s.limitsAppliedTotal;
      this.log.replaceChildren(...s.limitsApplied.slice().reverse().slice(0, 20).map((a) => logLine(a)));
    }
  }
}

function logLine(a: LimitsApplied): HTMLElement {
  return h(
    "li",
    {},
    h("span", { class: "muted" }, fmtClock(a.at)),
    ` ${a.target} ${a.name}: `,
    a.limits.length > 0 ? a.limits.map(fmtLimit).join(", ") : "no limits",
  );
}

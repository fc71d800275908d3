// The provider board: one card per upstream, updated in place (its pause controls keep their values).
// In cluster mode in flight and queued show the whole cluster's beside this instance's.
import { fmtAmount, fmtCountdown, fmtDuration, fmtLimit, THROTTLE_TEXT, withClusterTotal } from "../format.js";
import { h, setData, setText, syncList } from "../dom.js";
import { providerQueue, type Provider } from "../state.js";
import { replyText, type Ctx } from "./ctx.js";

const PAUSES: [string, number][] = [
  ["30 s", 30_000],
  ["1 min", 60_000],
  ["5 min", 300_000],
  ["15 min", 900_000],
  ["1 h", 3_600_000],
];

interface Card {
  el: HTMLElement;
  health: HTMLElement;
  healthUntil: HTMLElement;
  healthReason: HTMLElement;
  throttle: HTMLElement;
  throttleKind: HTMLElement;
  countdown: HTMLElement;
  throttleReason: HTMLElement;
  inFlight: HTMLElement;
  inFlightBar: HTMLElement;
  queued: HTMLElement;
  oldest: HTMLElement;
  limits: HTMLElement;
  result: HTMLElement;
  disabled: HTMLElement;
  url: HTMLElement;
  proto: HTMLElement;
}

export class ProviderBoard {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private empty: HTMLElement;
  private cards = new Map<string, HTMLElement>();
  private parts = new WeakMap<HTMLElement, Card>();

  constructor(private ctx: Ctx) {
    this.list = h("div", { class: "provider-list" });
    this.empty = h("p", { class: "muted" }, "no providers yet");
    this.el = h("section", { class: "providers", testid: "provider-board" }, h("h2", {}, "Providers"), this.empty, this.list);
  }

  render(): void {
    const s = this.ctx.state;
    const items = s.providerOrder.map((n) => s.providers[n]).filter((p): p is Provider => p !== undefined);
    this.empty.hidden = items.length > 0;
    syncList(this.list, items, (p) => p.name, (p) => this.create(p), (el, p) => this.update(el, p), this.cards);
  }

  private create(p: Provider): HTMLElement {
    const select = h("select", { class: "pause-for", title: "pause for" }, ...PAUSES.map(([t, ms]) => h("option", { value: String(ms) }, t)));
    const result = h("span", { class: "action-result", testid: "provider-action-result" });
    const act = async (what: "pause" | "resume") => {
      setText(result, "…");
      try {
        const r =
          what === "pause"
            ? await this.ctx.request({ kind: "pause_provider", provider: p.name, until_ms: this.ctx.now() + Number(select.value) })
            : await this.ctx.request({ kind: "resume_provider", provider: p.name });
        const t = replyText(r);
        setText(result, t.ok ? `${what}: ok` : `${what}: ${t.text} (${t.code})`);
        result.className = `action-result ${t.ok ? "ok" : "bad"}`;
      } catch (e) {
        setText(result, `${what}: ${(e as Error).message}`);
        result.className = "action-result bad";
      }
    };
    const c: Card = {
      el: h("article", { class: "provider-card", testid: "provider-card", data: { name: p.name } }),
      health: h("span", { class: "badge", testid: "health" }),
      healthUntil: h("span", { class: "countdown" }),
      healthReason: h("div", { class: "reason" }),
      throttle: h("div", { class: "throttle" }),
      throttleKind: h("span", { class: "badge" }),
      countdown: h("span", { class: "countdown", testid: "throttle-countdown" }),
      throttleReason: h("div", { class: "reason", testid: "throttle-reason" }),
      inFlight: h("span", { class: "num", testid: "in-flight" }),
      inFlightBar: h("span", { class: "fill" }),
      queued: h("span", { class: "num", testid: "queued-count" }),
      oldest: h("span", { class: "muted" }),
      limits: h("div", { class: "limits" }),
      result,
      disabled: h("span", { class: "badge bad" }, "disabled"),
      url: h("div", { class: "url muted" }),
      proto: h("span", { class: "proto muted" }),
    };
    c.el.append(
      h("header", {}, h("h3", {}, p.name), c.proto, c.disabled, h("span", { class: "spacer" }), c.health, c.healthUntil),
      c.url,
      c.healthReason,
      h("div", { class: "throttle-line" }, c.throttleKind, c.countdown),
      c.throttleReason,
      h(
        "div",
        { class: "stats" },
        h("div", {}, h("span", { class: "k" }, "in flight "), c.inFlight, h("span", { class: "meter" }, c.inFlightBar)),
        h("div", {}, h("span", { class: "k" }, "queued "), c.queued, " ", c.oldest),
      ),
      c.limits,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", testid: "pause-provider", on: { click: () => void act("pause") } }, "Pause"),
        select,
        h("button", { type: "button", testid: "resume-provider", on: { click: () => void act("resume") } }, "Resume"),
        result,
      ),
    );
    this.parts.set(c.el, c);
    return c.el;
  }

  private update(el: HTMLElement, p: Provider): void {
    const c = this.parts.get(el)!;
    const now = this.ctx.now();
    setData(el, "throttle", p.throttle?.kind ?? "none");
    setData(el, "health", p.health);
    setText(c.proto, p.protocol);
    setText(c.url, p.base_url);
    c.disabled.hidden = !p.disabled;
    setText(c.health, p.health === "ok" ? "healthy" : p.health === "open" ? "breaker open" : "half open");
    c.health.className = `badge health-${p.health}`;
    setText(c.healthUntil, p.health !== "ok" && p.healthUntil !== undefined ? `for ${fmtCountdown(p.healthUntil, now)}` : "");
    setText(c.healthReason, p.health !== "ok" && p.healthReason ? `${p.healthReason.text} (${p.healthReason.code})` : "");
    const t = p.throttle;
    if (t) {
      setText(c.throttleKind, THROTTLE_TEXT[t.kind] + (t.consecutive > 1 ? ` ×${t.consecutive}` : ""));
      c.throttleKind.className = `badge throttle-${t.kind}`;
      setText(c.countdown, t.until_ms !== undefined ? `${fmtCountdown(t.until_ms, now)} left` : "");
      setText(c.throttleReason, `${t.reason.text} (${t.reason.code})`);
    } else {
      setText(c.throttleKind, "free");
      c.throttleKind.className = "badge throttle-none";
      setText(c.countdown, "");
      setText(c.throttleReason, "");
    }
    const max = p.max_concurrent;
    setText(c.inFlight, withClusterTotal(`${p.in_flight} / ${max ?? "∞"}`, p.cluster_in_flight));
    // In cluster mode max_concurrent holds for the whole cluster (cluster.md): the meter shows its use.
    const using = p.cluster_in_flight ?? p.in_flight;
    c.inFlightBar.style.width = max ? `${Math.min(100, (100 * using) / max)}%` : "0%";
    setText(c.queued, withClusterTotal(String(p.queued), p.cluster_queued));
    const q = providerQueue(this.ctx.state, p.name);
    setText(c.oldest, q.oldestSince !== undefined ? `oldest waiting ${fmtDuration(now - q.oldestSince)}` : "");
    this.renderLimits(c, p, now);
  }

  private renderLimits(c: Card, p: Provider, now: number): void {
    const rows = p.limits.map((l) => {
      const limit = l.requests ?? l.tokens ?? l.cost_micros ?? 0;
      const frac = limit > 0 ? Math.min(1, l.used / limit) : 1;
      const fill = h("span", { class: `fill ${frac >= 1 ? "full" : frac >= 0.8 ? "high" : ""}` });
      fill.style.width = `${(100 * frac).toFixed(1)}%`;
      return h(
        "div",
        { class: "limit", testid: "limit-bar" },
        h("div", { class: "limit-text" }, fmtLimit(l)),
        h("span", { class: "meter" }, fill),
        h(
          "div",
          { class: "limit-use muted" },
          `${fmtAmount(l, l.used)} / ${fmtAmount(l, limit)}`,
          l.resets_at_ms > 0 ? ` · resets in ${fmtCountdown(l.resets_at_ms, now)}` : "",
        ),
      );
    });
    // Rebuilt each time: a few rows, and nothing in them keeps input.
    c.limits.replaceChildren(...(rows.length > 0 ? rows : [h("div", { class: "muted" }, "no usage limits")]));
  }
}

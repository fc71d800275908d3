// The cluster panel (cluster mode only): the cluster's name and state as this instance sees it,
// and each live instance with its load and heartbeat age. It asks get_instances on connect, on
// each ClusterChanged, and every REFRESH_MS while it is shown; outside cluster mode it stays hidden.
import type { InstanceView } from "../../../src/protocol.js";
import { fmtAgo } from "../format.js";
import { h, setData, setText, syncList } from "../dom.js";
import { applyInstances, clusterMembers } from "../state.js";
import type { Ctx } from "./ctx.js";

export const REFRESH_MS = 5000;

const STATE_TEXT = { joined: "joined", degraded: "degraded", alone: "alone" } as const;

interface Row {
  name: HTMLElement;
  self: HTMLElement;
  inFlight: HTMLElement;
  queued: HTMLElement;
  seen: HTMLElement;
}

export class InstancePanel {
  readonly el: HTMLElement;
  private title: HTMLElement;
  private badge: HTMLElement;
  private summary: HTMLElement;
  private reason: HTMLElement;
  private body: HTMLTableSectionElement;
  private rows = new Map<string, HTMLTableRowElement>();
  private parts = new WeakMap<HTMLElement, Row>();
  /** a get_instances is on its way; `again`: another was asked for meanwhile */
  private asking = false;
  private again = false;
  /** when the last get_instances was sent (sluice's clock) */
  private askedAt = -Infinity;

  constructor(private ctx: Ctx) {
    this.title = h("span", { testid: "cluster-name" });
    this.badge = h("span", { class: "badge", testid: "cluster-state" });
    this.summary = h("span", { class: "summary muted", testid: "cluster-summary" });
    this.reason = h("div", { class: "reason", testid: "cluster-reason" });
    this.body = h("tbody");
    const head = h("thead", {}, h("tr", {}, h("th", {}, "instance"), h("th", {}, "in flight"), h("th", {}, "queued"), h("th", {}, "seen")));
    this.el = h(
      "section",
      { class: "instances", testid: "instance-panel", hidden: true },
      h("h2", {}, "Cluster ", this.title, " ", this.badge, this.summary),
      this.reason,
      h("table", { class: "grid" }, head, this.body),
    );
  }

  /** Asks get_instances now (once more after the one on its way, if any). */
  refresh(): void {
    if (this.asking) {
      this.again = true;
      return;
    }
    this.asking = true;
    this.askedAt = this.ctx.now();
    this.ctx
      .request({ kind: "get_instances" })
      .then((r) => {
        // An error (a server that does not know get_instances) counts as not in cluster mode.
        applyInstances(this.ctx.state, r.kind === "ok" ? r : {}, this.ctx.now());
        this.ctx.changed();
      })
      .catch(() => {
        // the link closed: the next welcome asks again
      })
      .finally(() => {
        this.asking = false;
        if (this.again) {
          this.again = false;
          if (this.ctx.online()) this.refresh();
        }
      });
  }

  /** Called on the app's tick: refreshes every REFRESH_MS while the panel is shown. */
  poll(): void {
    if (this.ctx.state.cluster && this.ctx.online() && this.ctx.now() - this.askedAt >= REFRESH_MS) this.refresh();
  }

  render(): void {
    const c = this.ctx.state.cluster;
    this.el.hidden = c === null;
    if (!c) return;
    const now = this.ctx.now();
    setData(this.el, "state", c.state);
    setText(this.title, c.name);
    setText(this.badge, STATE_TEXT[c.state]);
    this.badge.className = `badge cluster-${c.state}`;
    setText(this.summary, `instance ${c.instance} · ${c.instances} live`);
    setText(this.reason, c.state === "degraded" && c.reason ? `${c.reason.text} (${c.reason.code})` : "");
    syncList(this.body, clusterMembers(this.ctx.state), (v) => v.name, (v) => this.create(v), (el, v) => this.update(el, v, now), this.rows);
  }

  private create(v: InstanceView): HTMLTableRowElement {
    const r: Row = {
      name: h("span", {}),
      self: h("span", { class: "badge self", testid: "instance-self" }, "this"),
      inFlight: h("span", { class: "num", testid: "instance-in-flight" }),
      queued: h("span", { class: "num", testid: "instance-queued" }),
      seen: h("span", { class: "muted", testid: "instance-seen" }),
    };
    const el = h(
      "tr",
      { testid: "instance-row", data: { name: v.name } },
      h("td", {}, r.name, " ", r.self),
      h("td", {}, r.inFlight),
      h("td", {}, r.queued),
      h("td", {}, r.seen),
    );
    this.parts.set(el, r);
    return el;
  }

  private update(el: HTMLTableRowElement, v: InstanceView, now: number): void {
    const r = this.parts.get(el)!;
    setData(el, "self", v.self ? "1" : "0");
    setText(r.name, v.name);
    r.self.hidden = !v.self;
    setText(r.inFlight, String(v.in_flight));
    setText(r.queued, String(v.queued));
    setText(r.seen, fmtAgo(v.seen_ms, now));
  }
}

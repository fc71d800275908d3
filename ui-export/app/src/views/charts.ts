// Per provider, a small chart of the last 15 minutes (one point per 10 s interval of the stats
// topic): hops, temporary failures and 429s as lines, paused time as shaded spans, and the
// latest p50 time to first token. Plain SVG drawn here: no charting library.
import { h, setData, setText, syncList } from "../dom.js";
import { fmtDuration } from "../format.js";
import { CHART_SPAN_MS, pauseSpans, providerSeries, statsProviders, type ChartPoint } from "../stats.js";
import type { Ctx } from "./ctx.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 280;
const H = 64;

const SERIES: { key: "requests" | "temporary" | "rateLimited"; cls: string; label: string }[] = [
  { key: "requests", cls: "s-requests", label: "hops" },
  { key: "temporary", cls: "s-temporary", label: "temporary failures" },
  { key: "rateLimited", cls: "s-429", label: "429s" },
];

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

interface Chart {
  el: HTMLElement;
  plot: SVGSVGElement;
  ttft: HTMLElement;
  totals: HTMLElement;
}

export class ProviderCharts {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private empty: HTMLElement;
  private charts = new Map<string, HTMLElement>();
  private parts = new WeakMap<HTMLElement, Chart>();
  private seen = -1;
  private seenSpan = -1;

  constructor(private ctx: Ctx) {
    this.list = h("div", { class: "chart-list" });
    this.empty = h("p", { class: "muted" }, "the first point comes after 10 s");
    const legend = h(
      "div",
      { class: "chart-legend muted" },
      ...SERIES.map((s) => h("span", {}, h("span", { class: `sw ${s.cls}` }), s.label)),
      h("span", {}, h("span", { class: "sw s-paused" }), "paused"),
    );
    this.el = h("section", { class: "charts", testid: "provider-charts" }, h("h2", {}, "Last 15 minutes"), legend, this.empty, this.list);
  }

  render(): void {
    const st = this.ctx.state.stats;
    const now = this.ctx.now();
    const span = Math.floor(now / 10_000);
    if (st.rev === this.seen && span === this.seenSpan) return;
    this.seen = st.rev;
    this.seenSpan = span;
    // Every provider on the board (one without a hop yet charts zeros), in its order; then one only
    // the stats name (removed by a reload).
    const order = this.ctx.state.providerOrder;
    const names = st.intervals.length === 0 ? [] : [...order, ...statsProviders(st).filter((n) => !order.includes(n))];
    this.empty.hidden = names.length > 0;
    const items = names.map((name) => ({ name, points: providerSeries(st, name, now) }));
    syncList(this.list, items, (i) => i.name, (i) => this.create(i.name), (el, i) => this.update(el, i.points, now), this.charts);
  }

  private create(name: string): HTMLElement {
    const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart-plot" });
    const ttft = h("span", { class: "num", testid: "chart-ttft" });
    const totals = h("div", { class: "chart-totals muted" });
    const el = h("div", { class: "chart", testid: "provider-chart", data: { provider: name } }, h("header", {}, h("h3", { title: name }, name), h("span", { class: "spacer" }), h("span", { class: "muted", title: "median time to first token, last 10 s with one" }, "p50 TTFT"), ttft), plot, totals);
    this.parts.set(el, { el, plot, ttft, totals });
    return el;
  }

  private update(el: HTMLElement, points: ChartPoint[], now: number): void {
    const c = this.parts.get(el);
    if (!c) return;
    const from = now - CHART_SPAN_MS;
    const x = (t: number) => ((t - from) / CHART_SPAN_MS) * W;
    const top = Math.max(1, ...points.map((p) => p.requests));
    const y = (v: number) => H - 2 - (v / top) * (H - 6);
    const children: SVGElement[] = [];
    for (const [a, b] of pauseSpans(points)) {
      const x0 = Math.max(0, x(a));
      children.push(svg("rect", { class: "pause", x: x0, y: 0, width: Math.max(1, x(b) - x0), height: H, "data-testid": "chart-pause" }));
    }
    for (const s of SERIES) {
      const pts = points.map((p) => `${x(p.end).toFixed(1)},${y(p[s.key]).toFixed(1)}`).join(" ");
      if (points.length > 0) children.push(svg("polyline", { class: `line ${s.cls}`, points: pts }));
    }
    c.plot.replaceChildren(...children);
    setData(el, "points", String(points.length));
    const last = [...points].reverse().find((p) => p.ttftP50 !== undefined);
    setText(c.ttft, last?.ttftP50 !== undefined ? fmtDuration(last.ttftP50) : "—");
    const sum = (k: "requests" | "temporary" | "rateLimited") => points.reduce((n, p) => n + p[k], 0);
    setText(c.totals, `${sum("requests")} hops · ${sum("temporary")} temporary · ${sum("rateLimited")} × 429 · peak ${top}/10 s`);
  }
}

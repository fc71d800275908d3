// The per-request timeline: every phase on one horizontal time axis, one labelled line each,
// with an overview strip on top. Opens from the board, the recent list and history.
import { fmtClock, fmtDuration } from "../format.js";
import { h, setData, setText } from "../dom.js";
import { findRequest, statusOf } from "../state.js";
import { axisTicks, timelineFromHistory, timelineOf, type Phase, type Timeline } from "../timeline.js";
import type { Ctx, Selection } from "./ctx.js";

export class TimelinePanel {
  readonly el: HTMLElement;
  private title: HTMLElement;
  private sub: HTMLElement;
  private body: HTMLElement;
  private sel: Selection | null = null;
  private drawnKey = "";

  constructor(
    private ctx: Ctx,
    private onClose: () => void,
  ) {
    this.title = h("h2", { testid: "timeline-title" });
    this.sub = h("div", { class: "muted sub" });
    this.body = h("div", { class: "tl-body" });
    this.el = h(
      "aside",
      { class: "timeline-panel", testid: "timeline", hidden: true },
      h(
        "header",
        {},
        this.title,
        h("span", { class: "spacer" }),
        h("button", { type: "button", class: "small", testid: "timeline-close", on: { click: () => this.close() } }, "close"),
      ),
      this.sub,
      this.body,
    );
  }

  show(sel: Selection): void {
    this.sel = sel;
    this.drawnKey = "";
    this.el.hidden = false;
    document.body.classList.add("with-timeline");
    this.render();
  }

  close(): void {
    this.sel = null;
    this.el.hidden = true;
    document.body.classList.remove("with-timeline");
    this.onClose();
  }

  get selectedId(): number | null {
    return this.sel?.kind === "live" ? this.sel.id : null;
  }

  render(): void {
    const sel = this.sel;
    if (!sel) return;
    const now = this.ctx.now();
    let tl: Timeline;
    let key: string;
    if (sel.kind === "live") {
      const req = findRequest(this.ctx.state, sel.id);
      if (!req) {
        setText(this.title, `#${sel.id}`);
        setText(this.sub, "this request is no longer on the board; look for it in history");
        this.body.replaceChildren();
        setData(this.el, "state", "unknown");
        return;
      }
      tl = timelineOf(req, now);
      const st = statusOf(req);
      setData(this.el, "id", String(req.id));
      setData(this.el, "state", req.state);
      setText(
        this.sub,
        `${st.label} · started ${fmtClock(req.startedAt)} · ${tl.live ? "running" : "took"} ${fmtDuration(tl.end - tl.start)}` +
          (req.route ? ` · route ${req.route} → ${req.candidates.join(", ")}` : "") +
          (req.secrets > 0 ? ` · ${req.secrets} secret(s) masked` : "") +
          (req.partial ? " · joined mid-way: earlier events were not seen" : ""),
      );
      // A live timeline moves with the clock; an ended one only when its request changes.
      key = `${req.id}:${req.rev}:${tl.live ? Math.floor(now / 250) : ""}`;
    } else {
      tl = timelineFromHistory(sel.row);
      setData(this.el, "id", String(sel.row.id));
      setData(this.el, "state", sel.row.status < 400 ? "done" : "failed");
      setText(
        this.sub,
        `from the request DB · ${fmtClock(sel.row.at_ms)} · status ${sel.row.status} · ${fmtDuration(sel.row.duration_ms)}` +
          " · waits and backoffs laid end to end (the DB keeps their lengths, not their gates)",
      );
      key = `h${sel.row.id}:${sel.row.at_ms}`;
    }
    setText(this.title, tl.title);
    if (key === this.drawnKey) return;
    this.drawnKey = key;
    this.body.replaceChildren(...drawTimeline(tl));
  }
}

/** The phases as DOM: overview strip, axis, one line per phase. */
export function drawTimeline(tl: Timeline): HTMLElement[] {
  const span = Math.max(1, tl.end - tl.start);
  const pos = (t: number) => `${((100 * (t - tl.start)) / span).toFixed(3)}%`;
  const width = (p: Phase) => `${Math.max(0.4, (100 * (p.end - p.start)) / span).toFixed(3)}%`;

  const overview = h("div", { class: "tl-overview", title: "the whole request on one line" });
  for (const p of tl.phases) {
    if (p.start === p.end && p.kind !== "first-token" && p.kind !== "end") continue;
    const seg = h("span", { class: `ov ov-${p.kind} tone-${p.tone}${p.start === p.end ? " point" : ""}`, title: p.label });
    seg.style.left = pos(p.start);
    if (p.start !== p.end) seg.style.width = width(p);
    overview.append(seg);
  }

  const axis = h("div", { class: "tl-axis" });
  for (const t of axisTicks(span)) {
    const tick = h("span", { class: "tick" }, t === 0 ? "0" : fmtDuration(t));
    tick.style.left = pos(tl.start + t);
    axis.append(tick);
  }

  const lines = h("ol", { class: "tl-phases" });
  for (const p of tl.phases) {
    const point = p.start === p.end;
    const bar = h("span", { class: `bar bar-${p.kind} tone-${p.tone}${point ? " point" : ""}${p.open ? " open" : ""}` });
    bar.style.left = pos(p.start);
    if (!point) bar.style.width = width(p);
    lines.append(
      h(
        "li",
        { class: `phase phase-${p.kind}`, testid: "phase", data: { kind: p.kind, open: p.open ? "1" : "0" } },
        h("span", { class: "ph-label" }, p.label),
        h("span", { class: "ph-track" }, bar),
        p.detail ? h("span", { class: "ph-detail muted" }, p.detail) : null,
      ),
    );
  }
  const legend = h(
    "div",
    { class: "tl-legend muted" },
    ...["queue", "attempt", "backoff", "first-token", "end"].map((k) => h("span", {}, h("i", { class: `sw sw-${k}` }), k.replace("-", " "))),
  );
  const out = [overview, axis, lines, legend];
  if (tl.phases.length === 0) out.splice(2, 0, h("p", { class: "muted" }, "no phases yet"));
  return out;
}

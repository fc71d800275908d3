// sluice's web control app: the shell that ties the connection, the reducer and the views together.
import "../app.css";

import type { Message, SnapshotMessage } from "../../src/protocol.js";
import { Control, controlUrl, storeKey, takeKey, type LinkInfo, type Request } from "./conn.js";
import { h, setText } from "./dom.js";
import { fmtClock } from "./format.js";
import { applyEnvelope, applyEventsDropped, applySnapshot, applyStore, initialState, storeBanner, tick, type State } from "./state.js";
import { Banner, KeyForm } from "./views/banner.js";
import { Board } from "./views/board.js";
import type { Ctx, Selection } from "./views/ctx.js";
import { HistoryView } from "./views/history.js";
import { InstancePanel } from "./views/instances.js";
import { LimitsEditor } from "./views/limits.js";
import { ProviderBoard } from "./views/providers.js";
import { TimelinePanel } from "./views/timeline.js";
import { ProviderCharts } from "./views/charts.js";
import { TroublePanel } from "./views/trouble.js";

type Tab = "live" | "limits" | "history";
const TICK_MS = 250;

class App implements Ctx {
  readonly state: State = initialState();
  private conn: Control;
  private banner: Banner;
  private keyForm: KeyForm;
  private board: Board;
  private providers: ProviderBoard;
  private instances: InstancePanel;
  private trouble: TroublePanel;
  private charts: ProviderCharts;
  private timeline: TimelinePanel;
  private limits: LimitsEditor;
  private history: HistoryView;
  private tabs = new Map<Tab, { button: HTMLButtonElement; section: HTMLElement }>();
  private tab: Tab = "live";
  private notices: HTMLElement;
  private renderQueued = false;
  /** a subscribe is on its way (first one, or a resync) */
  private subscribing = false;
  /** stale data shows the moment the link went down: elapsed times and countdowns stop there */
  private frozenAt: number | null = null;

  constructor(root: HTMLElement) {
    this.conn = new Control(controlUrl(location), {
      message: (m) => this.onMessage(m),
      link: (info) => this.onLink(info),
      welcome: () => {
        void this.subscribe();
        this.instances.refresh();
      },
    });
    this.banner = new Banner(() => this.conn.connect());
    this.keyForm = new KeyForm((key) => {
      storeKey(sessionStorage, key);
      this.keyForm.hide();
      this.conn.connect(key);
    });
    this.board = new Board(this);
    this.providers = new ProviderBoard(this);
    this.instances = new InstancePanel(this);
    this.trouble = new TroublePanel(this);
    this.charts = new ProviderCharts(this);
    this.timeline = new TimelinePanel(this, () => {
      this.board.selected = null;
      this.changed();
    });
    this.limits = new LimitsEditor(this);
    this.history = new HistoryView(this);
    this.notices = h("ol", { class: "notices", testid: "notices" });

    const live = h("section", { class: "tab-live" }, this.instances.el, h("div", { class: "overview" }, this.trouble.el, this.charts.el), this.providers.el, this.board.el, h("details", { class: "log" }, h("summary", {}, "gateway notices"), this.notices));
    const nav = h("nav", { class: "tabs" });
    for (const [tab, label, section] of [
      ["live", "Live", live],
      ["limits", "Limits", this.limits.el],
      ["history", "History", this.history.el],
    ] as const) {
      const button = h("button", { type: "button", testid: `tab-${tab}`, on: { click: () => this.show(tab) } }, label);
      nav.append(button);
      this.tabs.set(tab, { button, section });
    }
    root.replaceChildren(
      h("header", { class: "top" }, h("div", { class: "brand" }, "sluice"), nav, this.banner.el),
      h("main", {}, live, this.limits.el, this.history.el),
      this.timeline.el,
      this.keyForm.el,
    );
    // The key first: it takes a #key= fragment off the address bar before the tab is put there.
    const key = takeKey(location, history, sessionStorage);
    this.show(tabFromHash());
    setInterval(() => this.frame(), TICK_MS);
    // A printed URL pasted into a tab that already shows the app changes only the fragment.
    window.addEventListener("hashchange", () => {
      if (/(^#|&)key=/.test(location.hash)) {
        const k = takeKey(location, history, sessionStorage);
        if (k !== null) {
          this.keyForm.hide();
          this.conn.connect(k);
        }
      }
      const t = tabFromHash();
      if (t !== this.tab) this.show(t);
    });

    if (key === null) {
      this.banner.set({ state: "disconnected", text: "enter the control key to connect", needKey: true });
      this.keyForm.show();
    } else {
      this.conn.connect(key);
    }
  }

  // ---- Ctx ----
  now(): number {
    return this.frozenAt ?? this.conn.now();
  }

  online(): boolean {
    return this.conn.info.state === "connected" || this.conn.info.state === "resyncing";
  }

  request(m: Request) {
    return this.conn.request(m);
  }

  openTimeline(sel: Selection): void {
    this.timeline.show(sel);
    this.changed();
  }

  changed(): void {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.render();
    });
  }

  // ---- the link ----
  private async subscribe(): Promise<void> {
    if (this.subscribing) return;
    this.subscribing = true;
    try {
      const r = await this.conn.request({ kind: "subscribe", topics: ["events", "providers", "stats"] });
      if (r.kind === "error") console.error("sluice-web: subscribe refused", r.message);
    } catch {
      // the link closed: the next welcome subscribes again
    } finally {
      this.subscribing = false;
    }
  }

  private onMessage(m: Message): void {
    const now = this.now();
    switch (m.kind) {
      case "snapshot":
        this.frozenAt = null;
        applySnapshot(this.state, m as SnapshotMessage, this.conn.now());
        this.conn.setResyncing(false);
        // The request DB's state is get_providers' (then StoreChanged keeps it): asked again after
        // every snapshot, since a resync may have lost a StoreChanged.
        this.askStore();
        break;
      case "event":
        applyEnvelope(this.state, m.seq, m.event, now);
        if (!this.state.synced) this.resync("resyncing: an event was missing");
        // The event carries the state and the count; the instances' list comes from get_instances.
        if (m.event.kind === "cluster_changed") this.instances.refresh();
        break;
      case "events_dropped":
        applyEventsDropped(this.state, m.count, now);
        this.resync(m.count > 0 ? `resyncing: ${m.count} events were dropped` : "resyncing");
        break;
      default:
        return;
    }
    this.changed();
  }

  private askStore(): void {
    this.conn
      .request({ kind: "get_providers" })
      .then((r) => {
        if (r.kind === "ok") applyStore(this.state, r);
        this.changed();
      })
      .catch(() => {
        // the link closed: the next snapshot asks again
      });
  }

  private resync(why: string): void {
    this.conn.setResyncing(true, why);
    void this.subscribe();
  }

  private onLink(info: LinkInfo): void {
    const up = info.state === "connected" || info.state === "resyncing";
    if (!up && this.frozenAt === null && this.state.loaded) this.frozenAt = this.conn.now();
    this.banner.set(info);
    document.body.classList.toggle("stale", !up);
    if (info.needKey) {
      storeKey(sessionStorage, null);
      this.keyForm.show(info.keyError ? `${info.keyError} — enter it again` : undefined);
    }
    if (info.state === "connected" && this.tab === "history") this.history.shown();
    this.changed();
  }

  // ---- views ----
  private show(tab: Tab): void {
    this.tab = tab;
    for (const [t, { button, section }] of this.tabs) {
      button.classList.toggle("active", t === tab);
      section.hidden = t !== tab;
    }
    if (location.hash !== `#${tab}`) history.replaceState(null, "", `${location.pathname}${location.search}#${tab}`);
    if (tab === "history") this.history.shown();
    this.changed();
  }

  private frame(): void {
    tick(this.state, this.now());
    this.banner.tick();
    if (this.tab === "live") this.instances.poll();
    this.render();
  }

  private noticesSeen: object | undefined;

  private render(): void {
    this.banner.setStore(storeBanner(this.state.store));
    this.board.selected = this.timeline.selectedId;
    if (this.tab === "live") {
      this.instances.render();
      this.trouble.render();
      this.charts.render();
      this.providers.render();
      this.board.render();
      if (this.state.notices.at(-1) !== this.noticesSeen) {
        this.noticesSeen = this.state.notices.at(-1);
        const items = this.state.notices.slice().reverse().map((n) => h("li", {}, h("span", { class: "muted" }, fmtClock(n.at)), " ", n.text));
        this.notices.replaceChildren(...items);
      }
    } else if (this.tab === "limits") {
      this.limits.render();
    } else {
      this.history.render();
    }
    this.timeline.render();
  }
}

function tabFromHash(): Tab {
  const t = location.hash.replace(/^#/, "");
  return t === "limits" || t === "history" ? t : "live";
}

function boot(): void {
  const root = document.getElementById("app");
  if (!root) return;
  try {
    new App(root);
  } catch (e) {
    setText(root, `sluice-web failed to start: ${(e as Error).message}`);
  }
}

boot();

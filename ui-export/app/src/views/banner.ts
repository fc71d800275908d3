// The connection banner and the control-key form.
import { PROTOCOL_VERSION } from "../../../src/protocol.js";
import type { LinkInfo } from "../conn.js";
import { h, setData, setText } from "../dom.js";
import { fmtCountdown } from "../format.js";

export class Banner {
  readonly el: HTMLElement;
  private text: HTMLElement;
  private retry: HTMLElement;
  private button: HTMLButtonElement;
  private store: HTMLElement;
  private info: LinkInfo | null = null;

  constructor(onReconnect: () => void) {
    this.text = h("span", { class: "text", testid: "banner-text" });
    this.retry = h("span", { class: "retry muted" });
    this.store = h("span", { class: "store bad", testid: "banner-store", hidden: true });
    this.button = h("button", { type: "button", class: "small", testid: "reconnect", hidden: true, on: { click: onReconnect } }, "Reconnect");
    this.el = h("div", { class: "banner", testid: "banner", role: "status", data: { state: "connecting" } }, h("span", { class: "dot" }), this.text, this.store, this.retry, this.button);
  }

  /** The request DB's trouble (storeBanner's text), or null to hide it. */
  setStore(text: string | null): void {
    this.store.hidden = text === null;
    setText(this.store, text === null ? "" : `· ${text}`);
    this.store.title = text ?? "";
  }

  set(info: LinkInfo): void {
    this.info = info;
    setData(this.el, "state", info.state);
    setText(this.text, info.state === "connected" && info.server ? `${info.text} · ${info.server}` : info.text);
    this.el.title = `this app speaks protocol v${PROTOCOL_VERSION}`;
    this.button.hidden = info.state !== "disconnected" || info.needKey;
    this.tick();
  }

  /** Refreshes the reconnect countdown (browser clock). */
  tick(): void {
    const i = this.info;
    setText(this.retry, i && i.state === "disconnected" && i.retryAt !== undefined ? `retrying in ${fmtCountdown(i.retryAt, Date.now())}` : "");
  }
}

export class KeyForm {
  readonly el: HTMLElement;
  private input: HTMLInputElement;
  private error: HTMLElement;

  constructor(onKey: (key: string) => void) {
    this.input = h("input", { type: "password", autocomplete: "off", placeholder: "control key", testid: "key-input", required: true });
    this.error = h("p", { class: "bad", testid: "key-error" });
    const form = h(
      "form",
      {
        class: "key-form",
        testid: "key-form",
        on: {
          submit: (e) => {
            e.preventDefault();
            const k = this.input.value;
            if (k === "") return;
            this.input.value = "";
            onKey(k);
          },
        },
      },
      h("h2", {}, "sluice control key"),
      h("p", { class: "muted" }, "The key from sluice's config (listen.control.key). It is kept in this browser tab only (sessionStorage)."),
      this.input,
      h("button", { type: "submit", class: "primary", testid: "key-submit" }, "Connect"),
      this.error,
    );
    this.el = h("div", { class: "overlay", hidden: true }, form);
  }

  show(error?: string): void {
    setText(this.error, error ?? "");
    this.el.hidden = false;
    this.input.focus();
  }

  hide(): void {
    this.el.hidden = true;
  }
}

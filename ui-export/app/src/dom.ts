// A few DOM helpers. Text always goes in as text nodes / textContent: never innerHTML, so a
// string from the server can never become markup.

export type Child = Node | string | number | null | undefined | false;

export interface Attrs {
  class?: string;
  testid?: string;
  data?: Record<string, string | number>;
  title?: string;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (e: HTMLElementEventMap[K]) => void }>;
  [attr: string]: unknown;
}

/** Creates an element; attrs other than class/testid/data/on/title are set as properties. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") el.className = String(v);
    else if (k === "testid") el.dataset.testid = String(v);
    else if (k === "data") for (const [dk, dv] of Object.entries(v as Record<string, unknown>)) el.dataset[dk] = String(dv);
    else if (k === "on")
      for (const [ev, fn] of Object.entries(v as Record<string, EventListener>)) el.addEventListener(ev, fn);
    else if (k === "title") el.title = String(v);
    else (el as unknown as Record<string, unknown>)[k] = v;
  }
  append(el, children);
  return el;
}

export function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "number" ? String(c) : c);
  }
}

/** Sets an element's text only when it changed (keeps the DOM quiet at 4 Hz). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** Sets a data attribute only when it changed. */
export function setData(el: HTMLElement, key: string, value: string): void {
  if (el.dataset[key] !== value) el.dataset[key] = value;
}

/**
 * Keeps `container`'s children in step with `items`: one element per key, created once by
 * `create`, refreshed by `update`, in the items' order; elements of keys no longer present go.
 */
export function syncList<T, E extends HTMLElement>(
  container: HTMLElement,
  items: readonly T[],
  key: (item: T) => string,
  create: (item: T) => E,
  update: (el: E, item: T) => void,
  cache: Map<string, E>,
): void {
  const seen = new Set<string>();
  let cursor: ChildNode | null = container.firstChild;
  for (const item of items) {
    const k = key(item);
    seen.add(k);
    let el = cache.get(k);
    if (!el) {
      el = create(item);
      cache.set(k, el);
    }
    update(el, item);
    if (el !== cursor) container.insertBefore(el, cursor);
    else cursor = cursor.nextSibling;
  }
  for (const [k, el] of cache) {
    if (!seen.has(k)) {
      el.remove();
      cache.delete(k);
    }
  }
}

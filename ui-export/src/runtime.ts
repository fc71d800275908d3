// The schema-independent half of the protocol codec: the wire rules, the
// error type and the helpers that the generated protocol.ts is built from.
// Import from protocol.ts, not from here.
import { decode, encode } from "@msgpack/msgpack";

/** Why a message could not be decoded or encoded; the same kinds as the C codec. */
export type ErrorKind = "truncated" | "malformed" | "type" | "missing" | "enum" | "range";

/** A message that breaks the protocol: `path` says where, like "event.view.outcome" ("" = the message). */
export class ProtocolError extends Error {
  constructor(
    readonly kind: ErrorKind,
    readonly path: string,
    readonly detail: string,
  ) {
    super(`${path === "" ? "message" : path}: ${detail}`);
    this.name = "ProtocolError";
  }
}

/** Nesting deeper than this is refused (as in the C codec). */
const MAX_DEPTH = 24;

const utf8 = new TextDecoder("utf-8", { fatal: true });

function readBE(bytes: Uint8Array, at: number, width: number): number {
  let v = 0;
  for (let i = 0; i < width; i++) v = v * 256 + bytes[at + i];
  return v;
}

interface Head {
  size: number; // bytes of the header itself
  payload: number; // bytes that follow it (string, binary)
  children: number; // values that follow it (array items, map keys and values)
  isStr: boolean;
  isContainer: boolean;
}

const FIXED_SIZE: Record<number, number> = {
  0xcc: 2, 0xd0: 2, 0xcd: 3, 0xd1: 3, 0xce: 5, 0xd2: 5, 0xcf: 9, 0xd3: 9,
};
const WIDTH: Record<number, number> = {
  0xc4: 1, 0xd9: 1, 0xc5: 2, 0xda: 2, 0xdc: 2, 0xde: 2, 0xc6: 4, 0xdb: 4, 0xdd: 4, 0xdf: 4,
};

function readHead(bytes: Uint8Array, at: number): Head {
  const b = bytes[at];
  const h: Head = { size: 1, payload: 0, children: 0, isStr: false, isContainer: false };
  if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) return h;
  if (b <= 0x8f) return { ...h, children: (b & 0x0f) * 2, isContainer: true };
  if (b <= 0x9f) return { ...h, children: b & 0x0f, isContainer: true };
  if (b <= 0xbf) return { ...h, payload: b & 0x1f, isStr: true };
  if (b in FIXED_SIZE) return { ...h, size: FIXED_SIZE[b] };
  if (b === 0xca || b === 0xcb) {
    throw new ProtocolError("malformed", "", `float at byte ${at} (the protocol has none)`);
  }
  if (!(b in WIDTH)) {
    throw new ProtocolError("malformed", "", `type byte 0x${b.toString(16)} at byte ${at} is not allowed`);
  }
  const width = WIDTH[b];
  if (bytes.length - at < 1 + width) {
    throw new ProtocolError("truncated", "", `input ends inside a header at byte ${at}`);
  }
  const n = readBE(bytes, at + 1, width);
  h.size = 1 + width;
  if (b >= 0xdc) {
    h.isContainer = true;
    h.children = b >= 0xde ? n * 2 : n;
  } else {
    h.payload = n;
    h.isStr = b >= 0xd9;
  }
  return h;
}

function checkString(bytes: Uint8Array, from: number, to: number, at: number): void {
  const s = bytes.subarray(from, to);
  let ok = !s.includes(0);
  try {
    utf8.decode(s);
  } catch {
    ok = false;
  }
  if (!ok) throw new ProtocolError("malformed", "", `string at byte ${at} is not UTF-8 without NUL`);
}

/**
 * The end of the msgpack value starting at `start`, after checking the wire
 * rules that msgpack decoders do not (no float, no ext, UTF-8 strings without
 * NUL, bounded nesting), exactly as the C codec does.
 */
export function scan(bytes: Uint8Array, start: number): number {
  const pending = [1];
  let pos = start;
  while (pending.length > 0) {
    const top = pending.length - 1;
    if (pending[top] === 0) {
      pending.pop();
      continue;
    }
    pending[top]--;
    if (pos >= bytes.length) {
      throw new ProtocolError("truncated", "", `input ends after ${bytes.length} bytes`);
    }
    const h = readHead(bytes, pos);
    const left = bytes.length - pos;
    if (h.size > left || h.payload > left - h.size || h.children > left - h.size) {
      throw new ProtocolError("truncated", "", `input ends inside the value at byte ${pos}`);
    }
    if (h.isStr) checkString(bytes, pos + h.size, pos + h.size + h.payload, pos);
    pos += h.size + h.payload;
    if (h.isContainer) {
      if (pending.length >= MAX_DEPTH) throw new ProtocolError("malformed", "", `nesting deeper than ${MAX_DEPTH}`);
      pending.push(h.children);
    }
  }
  return pos;
}

/** Decodes the value at `start` into plain data; `end` is where the next one starts. */
export function decodeValue(bytes: Uint8Array, start: number): { value: unknown; end: number } {
  const end = scan(bytes, start);
  try {
    return { value: decode(bytes.subarray(start, end)), end };
  } catch (e) {
    throw new ProtocolError("malformed", "", `msgpack: ${(e as Error).message}`);
  }
}

export function encodeValue(value: unknown): Uint8Array {
  return encode(value);
}

// --- paths

function join(seg: string, path: string): string {
  if (path === "") return seg;
  return path.startsWith("[") ? seg + path : `${seg}.${path}`;
}

/** Runs f, prefixing the path of a ProtocolError it throws with seg. */
function within<T>(seg: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof ProtocolError) throw new ProtocolError(e.kind, join(seg, e.path), e.detail);
    throw e;
  }
}

// --- decoding: each dec* takes plain decoded data and returns the typed value

export type Dec<T> = (x: unknown) => T;
export type Obj = Record<string, unknown>;

function typeName(x: unknown): string {
  if (x === null) return "nil";
  if (Array.isArray(x)) return "array";
  if (x instanceof Uint8Array) return "binary";
  if (typeof x === "object") return "map";
  if (typeof x === "number") return Number.isInteger(x) ? "integer" : "number";
  return typeof x;
}

function wrongType(want: string, x: unknown): ProtocolError {
  return new ProtocolError("type", "", `expected ${want}, got ${typeName(x)}`);
}

export function decMapObject(x: unknown): Obj {
  if (typeName(x) !== "map") throw wrongType("map", x);
  return x as Obj;
}

function has(o: Obj, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(o, name);
}

/** A required field. */
export function field<T>(o: Obj, name: string, dec: Dec<T>): T {
  if (!has(o, name)) throw new ProtocolError("missing", name, "required field is missing");
  return within(name, () => dec(o[name]));
}

/** An optional field: undefined when absent. */
export function optField<T>(o: Obj, name: string, dec: Dec<T>): T | undefined {
  return has(o, name) ? within(name, () => dec(o[name])) : undefined;
}

export const decBool: Dec<boolean> = (x) => {
  if (typeof x !== "boolean") throw wrongType("bool", x);
  return x;
};

function decUint(x: unknown, max: number): number {
  if (typeof x !== "number" || !Number.isInteger(x)) throw wrongType("integer", x);
  if (x < 0) throw new ProtocolError("range", "", `${x} is negative`);
  if (x > max || !Number.isSafeInteger(x)) throw new ProtocolError("range", "", `${x} is above ${max}`);
  return x;
}

export const decU32: Dec<number> = (x) => decUint(x, 0xffffffff);
export const decU64: Dec<number> = (x) => decUint(x, Number.MAX_SAFE_INTEGER);

export const decStr: Dec<string> = (x) => {
  if (typeof x !== "string") throw wrongType("string", x);
  return x;
};

export function slugOf<T extends string>(values: readonly T[]): Dec<T> {
  return (x) => {
    const s = decStr(x);
    if (!(values as readonly string[]).includes(s)) {
      throw new ProtocolError("enum", "", `unknown slug "${s.slice(0, 48)}"`);
    }
    return s as T;
  };
}

export function arrayOf<T>(dec: Dec<T>): Dec<T[]> {
  return (x) => {
    if (!Array.isArray(x)) throw wrongType("array", x);
    return x.map((item, i) => within(`[${i}]`, () => dec(item)));
  };
}

/** Integer-like keys would be put first by JavaScript objects, changing the order. */
function checkKey(key: string): void {
  if (/^[0-9]+$/.test(key)) throw new ProtocolError("malformed", key, "a map key may not be all digits");
}

export const decStrMap: Dec<Record<string, string>> = (x) => {
  const o = decMapObject(x);
  const out: Record<string, string> = {};
  for (const key of Object.keys(o)) {
    checkKey(key);
    out[key] = within(key, () => decStr(o[key]));
  }
  return out;
};

// --- encoding: each enc* checks a typed value and returns plain data for msgpack

export type Enc<T> = (v: T) => unknown;

/** Sets o[name] to the encoding of v. */
export function put<T>(o: Obj, name: string, v: T, enc: Enc<T>): void {
  o[name] = within(name, () => enc(v));
}

export const encBool: Enc<boolean> = (v) => decBool(v);
export const encU32: Enc<number> = (v) => decU32(v);
export const encU64: Enc<number> = (v) => decU64(v);
export const encStr: Enc<string> = (v) => decStr(v);

export function encSlugOf<T extends string>(values: readonly T[]): Enc<T> {
  return slugOf(values);
}

export function encArrayOf<T>(enc: Enc<T>): Enc<T[]> {
  return (v) => {
    if (!Array.isArray(v)) throw wrongType("array", v);
    return v.map((item, i) => within(`[${i}]`, () => enc(item)));
  };
}

export const encStrMap: Enc<Record<string, string>> = (v) => decStrMap(v);

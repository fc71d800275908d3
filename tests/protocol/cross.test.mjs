// The TypeScript codec against the C one, through the generated typed codecs:
// every golden file (written by C) decodes into a typed value and re-encodes to
// the same bytes; those TypeScript-encoded bytes are then decoded and
// re-encoded by C (proto-golden cross). Bad inputs get the same error kinds and
// paths as in C. Run by meson (ui-export/meson.build), which sets the paths.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through meson test`);
  return v;
}

const uiExport = env("SLUICE_UI_EXPORT");
const goldenDir = env("SLUICE_GOLDEN");
const protoGolden = env("SLUICE_PROTO_GOLDEN");
const out = env("SLUICE_TS_OUT");
const tsEncoded = path.join(out, "ts-encoded");

// Compile the package as it is committed, where node can resolve its dependencies.
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(tsEncoded, { recursive: true });
const tsc = path.join(uiExport, "node_modules", "typescript", "bin", "tsc");
execFileSync(process.execPath, [tsc, "-p", uiExport, "--outDir", path.join(out, "dist"), "--declaration", "false"], {
  stdio: "inherit",
});
fs.symlinkSync(path.join(uiExport, "node_modules"), path.join(out, "node_modules"), "dir");
fs.writeFileSync(path.join(out, "package.json"), '{"type": "module"}\n');
const proto = await import(pathToFileURL(path.join(out, "dist", "protocol.js")).href);
const msgpack = createRequire(path.join(uiExport, "package.json"))("@msgpack/msgpack");

const goldens = fs
  .readdirSync(goldenDir)
  .filter((f) => f.endsWith(".msgpack"))
  .sort()
  .map((f) => ({ name: f.slice(0, -".msgpack".length), bytes: new Uint8Array(fs.readFileSync(path.join(goldenDir, f))) }));

const golden = (name) => goldens.find((g) => g.name === name).bytes;

// The same value with every object's keys in reverse order, to show that the
// encoder follows the schema and not the object. Msg.args is data, not fields.
function reversed(v) {
  if (Array.isArray(v)) return v.map(reversed);
  if (v === null || typeof v !== "object") return v;
  const o = {};
  for (const k of Object.keys(v).reverse()) o[k] = k === "args" ? v[k] : reversed(v[k]);
  return o;
}

test("there is a golden file for every message kind and event kind, full and min", () => {
  const names = new Set(goldens.map((g) => g.name));
  for (const kind of proto.MESSAGE_KINDS) {
    const subs = kind === "event" ? proto.EVENT_KINDS.map((e) => `event.${e}`) : [kind];
    for (const sub of subs) {
      assert.ok(names.has(`${sub}.full`), `${sub}.full`);
      assert.ok(names.has(`${sub}.min`), `${sub}.min`);
    }
  }
});

for (const { name, bytes } of goldens) {
  test(`${name}: C bytes -> typed value -> TypeScript bytes are identical`, () => {
    const message = proto.decodeMessage(bytes);
    assert.equal(message.kind, name.split(".")[0]);
    const again = proto.encodeMessage(message);
    assert.deepEqual(Buffer.from(again), Buffer.from(bytes));
    assert.deepEqual(Buffer.from(proto.encodeMessage(reversed(message))), Buffer.from(bytes));
    fs.writeFileSync(path.join(tsEncoded, `${name}.msgpack`), again);
  });
}

test("optional fields: present in full, absent (not undefined-valued) in min", () => {
  const full = proto.decodeMessage(golden("ok.full"));
  const min = proto.decodeMessage(golden("ok.min"));
  assert.deepEqual(Object.keys(min), ["kind", "req"]);
  for (const k of ["in_flight", "providers", "yaml", "revision", "persisted", "problems", "repair_yaml", "rows", "next_cursor"]) {
    assert.ok(k in full, k);
  }
});

test("messages back to back decode one after another", () => {
  const all = Buffer.concat(goldens.map((g) => Buffer.from(g.bytes)));
  const messages = proto.decodeMessages(new Uint8Array(all));
  assert.equal(messages.length, goldens.length);
  messages.forEach((m, i) => assert.equal(m.kind, goldens[i].name.split(".")[0]));
  const first = proto.decodeMessageAt(new Uint8Array(all), 0);
  assert.equal(first.end, goldens[0].bytes.length);
});

test("every truncation of every golden file is a truncated error", () => {
  for (const { name, bytes } of goldens) {
    for (let len = 0; len < bytes.length; len++) {
      assert.throws(
        () => proto.decodeMessage(bytes.subarray(0, len)),
        (e) => e instanceof proto.ProtocolError && e.kind === "truncated",
        `${name} cut at ${len}`,
      );
    }
  }
});

// A golden file with one change, made on plain data. A bigint stays an integer
// on the wire where a number above 2^53 would become a float.
function mutated(name, change) {
  const raw = msgpack.decode(golden(name));
  change(raw);
  return msgpack.encode(raw, { useBigInt64: Object.values(raw).some((v) => typeof v === "bigint") });
}

const badCases = [
  ["event.attempt.full", (m) => (m.event.view.outcome = "exploded"), "enum", "event.view.outcome"],
  ["event.attempt.full", (m) => delete m.event.view.provider, "missing", "event.view.provider"],
  ["event.attempt.full", (m) => (m.event.view.error = null), "type", "event.view.error"],
  ["event.attempt.full", (m) => (m.event.kind = "nope"), "enum", "event.kind"],
  ["event.attempt.full", (m) => (m.seq = "1"), "type", "seq"],
  ["event.attempt.full", (m) => (m.kind = "nope"), "enum", "kind"],
  ["subscribe.full", (m) => (m.topics[1] = "weather"), "enum", "topics[1]"],
  ["hello.full", (m) => (m.protocol = 2 ** 32), "range", "protocol"],
  ["hello.full", (m) => (m.protocol = -1), "range", "protocol"],
  ["hello.full", (m) => (m.protocol = 1.5), "malformed", ""],
  ["hello.full", (m) => (m.client = new Uint8Array([97])), "type", "client"],
  ["welcome.full", (m) => (m.now_ms = 2n ** 53n), "range", "now_ms"],
  ["refused.full", (m) => (m.message.args = { 1: "x" }), "malformed", "message.args.1"],
  ["refused.full", (m) => (m.message.args.ours = 2), "type", "message.args.ours"],
  ["snapshot.full", (m) => (m.in_flight[0].events[1].kind = "x"), "enum", "in_flight[0].events[1].kind"],
  ["snapshot.full", (m) => (m.providers[0].limits[1].per = "year"), "enum", "providers[0].limits[1].per"],
  ["history.min", (m) => (m.filter = null), "type", "filter"],
];

test("bad inputs are refused with the same kind and path as in C", () => {
  for (const [name, change, kind, where] of badCases) {
    const bytes = mutated(name, change);
    assert.throws(
      () => proto.decodeMessage(bytes),
      (e) => e instanceof proto.ProtocolError && e.kind === kind && e.path === where,
      `${name}: ${change} should fail with ${kind} at "${where}"`,
    );
  }
});

test("unknown fields are ignored", () => {
  const bytes = mutated("events_dropped.full", (m) => (m.later = { a: [1, null] }));
  assert.deepEqual(proto.decodeMessage(bytes), proto.decodeMessage(golden("events_dropped.full")));
});

test("encoding checks the value too", () => {
  const bad = [
    [{ kind: "hello", protocol: 1.5, key: "k", client: "c" }, "protocol"],
    [{ kind: "hello", protocol: 1, client: "c" }, "key"],
    [{ kind: "subscribe", req: 1, topics: ["events", "weather"] }, "topics[1]"],
    [{ kind: "nope" }, "kind"],
  ];
  for (const [value, where] of bad) {
    assert.throws(
      () => proto.encodeMessage(value),
      (e) => e instanceof proto.ProtocolError && e.path === where,
      where,
    );
  }
});

test("C decodes every TypeScript encoding and re-encodes it to the same bytes", () => {
  const run = spawnSync(protoGolden, ["cross", tsEncoded], { encoding: "utf8" });
  process.stdout.write(run.stdout);
  assert.equal(run.status, 0, run.stdout + run.stderr);
});

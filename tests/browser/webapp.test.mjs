// The web control app in Debian's chromium (headless, driven by playwright-core; never a
// downloaded browser) against a real sluice in demo mode: simulated upstreams with pinned
// trouble and the built-in load generator. Screenshots go to SLUICE_ARTIFACTS.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

import { protocol } from "../sdk/control_client.mjs";

const here = (rel) => fileURLToPath(new URL(rel, import.meta.url));
const bin = process.env.SLUICE_BIN || here("../../build/sluice");
const artifacts = process.env.SLUICE_ARTIFACTS || path.join(os.tmpdir(), "sluice-browser-artifacts");
const chromiumPath = process.env.SLUICE_CHROMIUM || "/usr/bin/chromium";
const T = { timeout: 90_000 };

fs.mkdirSync(artifacts, { recursive: true });

// sluice --demo with a pinned trouble mode, on free ports, in a temp dir (its DB and key file).
async function startDemo(trouble, clients = 16) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-demo-"));
  const args = ["--demo", "--demo-trouble", trouble, "--demo-load", "--demo-clients", String(clients),
                "--port", "0", "--control-port", "0", "--threads", "2"];
  const child = spawn(bin, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const deadline = Date.now() + 10_000;
  while (!/serving on http:\/\/127\.0\.0\.1:\d+/.test(log)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`sluice --demo did not start:\n${log}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const controlPort = Number(/control endpoint on ws:\/\/127\.0\.0\.1:(\d+)/.exec(log)[1]);
  const gatewayPort = Number(/serving on http:\/\/127\.0\.0\.1:(\d+)/.exec(log)[1]);
  const key = fs.readFileSync(path.join(dir, "sluice.key"), "utf8").trim();
  return {
    controlPort, gatewayPort, key, log: () => log,
    async stop() {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 8000);
      const code = await exited;
      clearTimeout(killer);
      fs.rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

let browser;

async function openApp(demo) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("pageerror", (e) => { throw e; });
  await page.goto(`http://127.0.0.1:${demo.controlPort}/#key=${demo.key}`);
  await page.waitForSelector('[data-testid="banner"][data-state="connected"]', { timeout: 10_000 });
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
}

describe("web control app (chromium, sluice --demo)", () => {
  before(async () => {
    const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chromium-"));
    browser = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath,
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
             "--no-first-run", "--disable-sync"],
    });
  });
  after(async () => {
    await browser?.close();
  });

  test("an overload burst: a retried request shows a backoff phase in its timeline", T, async () => {
    const demo = await startDemo("overload");
    try {
      const page = await openApp(demo);
      const proto = await protocol();
      assert.match(await page.textContent('[data-testid="banner"]'), new RegExp(`protocol v?${proto.PROTOCOL_VERSION}`, "i"));
      // Wait for a request that backed off (live or recent), then open its timeline.
      const row = page.locator('[data-testid="request-row"][data-state="backoff"], [data-testid="recent-row"]')
        .filter({ has: page.locator("text=/retr|backoff/i") }).first();
      let opened = false;
      for (let i = 0; i < 60 && !opened; i++) {
        const backoff = page.locator('[data-testid="request-row"][data-state="backoff"]').first();
        if (await backoff.count()) {
          await backoff.click();
          opened = true;
        } else {
          await page.waitForTimeout(500);
        }
      }
      assert.ok(opened || (await row.count()) > 0, "a request backed off within 30 s");
      if (!opened) await row.click();
      const phase = page.locator('[data-testid="timeline"] [data-testid="phase"][data-kind="backoff"]').first();
      await phase.waitFor({ timeout: 10_000 });
      assert.match(await phase.textContent(), /backoff|retry/i);
      await shot(page, "overload-retry-timeline");
      const attempts = await page.locator('[data-testid="timeline"] [data-testid="phase"][data-kind="attempt"]').count();
      assert.ok(attempts >= 1, `the timeline shows the failed attempt before the backoff (${attempts})`);
      await page.close();
    } finally {
      await demo.stop();
    }
  });

  test("a 429 storm: a provider shows paused with a countdown, and requests queue", T, async () => {
    const demo = await startDemo("rate-limit", 24);
    try {
      const page = await openApp(demo);
      const paused = page.locator('[data-testid="provider-card"][data-throttle="paused"]').first();
      await paused.waitFor({ timeout: 30_000 });
      const countdown = await paused.locator('[data-testid="throttle-countdown"]').textContent();
      assert.match(countdown, /\d/, "a countdown is shown");
      await page.locator('[data-testid="request-row"][data-state="queued"]').first().waitFor({ timeout: 40_000 });
      await shot(page, "rate-limit-storm");
      await page.close();
    } finally {
      await demo.stop();
    }
  });

  test("trouble absorbed: rescued requests by cause after a 429 storm and an overload, a chart per provider, pauses shaded", { timeout: 120_000 }, async () => {
    // The two phases at once, each in its own demo: every stats interval is 10 s, so each shows
    // within about 20 s of its start.
    const [storm, overload] = await Promise.all([startDemo("rate-limit", 24), startDemo("overload")]);
    try {
      const [a, b] = await Promise.all([openApp(storm), openApp(overload)]);
      const count = async (page, cell) => Number(await page.getAttribute(`[data-testid="trouble-start-${cell}"]`, "data-count"));
      const until = async (page, what, pred) => {
        for (const deadline = Date.now() + 60_000; Date.now() < deadline; await page.waitForTimeout(500))
          if (await pred()) return;
        assert.fail(`${what}: not within 60 s\n${await page.textContent('[data-testid="trouble-panel"]')}`);
      };
      // The storm: requests that failed over from a paused upstream or waited behind its 429 pause.
      await until(a, "rescued after the 429 storm", async () => (await count(a, "failed_over")) > 0 && (await count(a, "queued_429")) > 0);
      // The overload: requests retried, or failed over from the overloaded upstream.
      await until(b, "rescued in the overload", async () => (await count(b, "retried")) + (await count(b, "failed_over")) > 0);
      for (const page of [a, b]) {
        const rescued = await count(page, "rescued");
        assert.ok(rescued > 0);
        assert.equal(await page.textContent('[data-testid="trouble-hour-rescued"]'), String(rescued), "all within the last hour");
        assert.match(await page.textContent('[data-testid="trouble-start-share"]'), /^\d+(\.\d)? %$/);
      }
      // A chart per provider (the demo has ten), with points; the storm's paused upstreams shaded.
      const charts = a.locator('[data-testid="provider-chart"]');
      assert.equal(await charts.count(), 10);
      const points = await charts.evaluateAll((els) => els.map((e) => Number(e.dataset.points)));
      assert.ok(points.every((n) => n >= 1), `points per chart: ${points}`);
      assert.ok((await a.locator('[data-testid="provider-chart"] polyline').count()) >= 30, "three lines per chart");
      await until(a, "a pause shaded", async () => (await a.locator('[data-testid="chart-pause"]').count()) > 0);
      const width = Number(await a.locator('[data-testid="chart-pause"]').first().getAttribute("width"));
      assert.ok(width > 0);
      await shot(a, "trouble-absorbed-429-storm");
      await shot(b, "trouble-absorbed-overload");
      await a.close();
      await b.close();
    } finally {
      await Promise.all([storm.stop(), overload.stop()]);
    }
  });

  test("the limits editor: a pushed limit is applied and changes what sluice admits", T, async () => {
    const demo = await startDemo("calm", 0);
    try {
      const page = await openApp(demo);
      // not in cluster mode: no instance panel
      await page.waitForTimeout(300);
      assert.equal(await page.locator('[data-testid="instance-panel"]').isVisible(), false, "no cluster panel outside cluster mode");
      await page.click('[data-testid="tab-limits"]');
      const editor = page.locator('[data-testid="limits-editor"]');
      await editor.waitFor();
      await page.selectOption('[data-testid="limits-provider"]', "demo-anthropic-a");
      await page.click('[data-testid="limits-add"]');
      const row = page.locator('[data-testid="limit-row"]').last();
      await row.locator('[data-testid="limit-per"]').selectOption("minute");
      await row.locator('[data-testid="limit-measure"]').selectOption("requests");
      await row.locator('[data-testid="limit-value"]').fill("1");
      await page.locator('[data-testid="limits-diff"]').waitFor();
      await page.click('[data-testid="limits-push"]');
      await page.locator('[data-testid="limits-applied"]').waitFor({ timeout: 10_000 });
      await shot(page, "limits-applied");
      // Two requests for claude-*: the first goes to demo-anthropic-a, the second cannot (its window is
      // full) and fails over to demo-anthropic-b.
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`http://127.0.0.1:${demo.gatewayPort}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": "sk-demo-0000000000000000",
                     "anthropic-version": "2023-06-01" },
          body: JSON.stringify({ model: "claude-demo", max_tokens: 16, messages: [{ role: "user", content: "hi" }] }),
        });
        assert.equal(res.status, 200);
        await res.text();
      }
      await page.click('[data-testid="tab-history"]');
      await page.click('[data-testid="history-search"]');
      await page.locator('[data-testid="history-row"]').nth(1).waitFor({ timeout: 10_000 });
      const rows = await page.locator('[data-testid="history-row"]').allTextContents();
      assert.ok(rows.some((t) => t.includes("demo-anthropic-b")), rows.join("\n"));
      assert.ok(rows.some((t) => t.includes("demo-anthropic-a")), rows.join("\n"));
      await shot(page, "limits-history");
      await page.close();
    } finally {
      await demo.stop();
    }
  });

  test("cluster mode: the instance panel follows get_instances and ClusterChanged; providers show the cluster's totals", T, async () => {
    // sluice --demo serves the app; its control endpoint is replaced by a scripted one in cluster mode.
    const demo = await startDemo("calm", 0);
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
      page.on("pageerror", (e) => { throw e; });
      const proto = await protocol();
      const lost = { code: "gw.cluster.lost", args: {}, text: "Redis at 127.0.0.1:6379 does not answer" };
      let cluster = { name: "prod", instance: "gw-a", state: "joined", instances: 2 };
      let instances = () => [
        { name: "gw-b", self: false, seen_ms: Date.now() - 700, in_flight: 4, queued: 1 },
        { name: "gw-a", self: true, seen_ms: Date.now(), in_flight: 3, queued: 0 },
      ];
      const asked = [];
      let server = null;
      const encode = (m) => Buffer.from(proto.encodeMessage(m));
      await page.routeWebSocket(/\/control$/, (ws) => {
        server = ws;
        ws.onMessage((data) => {
          const m = proto.decodeMessage(new Uint8Array(typeof data === "string" ? Buffer.from(data) : data));
          if (m.kind === "hello") {
            ws.send(encode({ kind: "welcome", protocol: proto.PROTOCOL_VERSION, server: "sluice (scripted)", now_ms: Date.now() }));
          } else if (m.kind === "subscribe") {
            ws.send(encode({
              kind: "snapshot", req: m.req, now_ms: Date.now(), in_flight: [], seq: 0,
              providers: [{ name: "anthropic-a", protocol: "anthropic", base_url: "https://a.example", disabled: false,
                            health: "ok", limits: [], in_flight: 3, max_concurrent: 8, queued: 1,
                            cluster_in_flight: 7, cluster_queued: 5 }],
            }));
          } else if (m.kind === "get_instances") {
            asked.push(Date.now());
            ws.send(encode({ kind: "ok", req: m.req, cluster, instances: instances() }));
          } else if ("req" in m) {
            ws.send(encode({ kind: "error", req: m.req, message: { code: "control.unknown", args: {}, text: "not scripted" } }));
          }
        });
      });
      await page.goto(`http://127.0.0.1:${demo.controlPort}/#key=${demo.key}`);
      const panel = page.locator('[data-testid="instance-panel"]');
      await panel.waitFor({ state: "visible", timeout: 10_000 });
      assert.equal(asked.length, 1, "asked once on connect");
      assert.equal(await panel.locator('[data-testid="cluster-name"]').textContent(), "prod");
      assert.equal(await panel.getAttribute("data-state"), "joined");
      assert.equal(await panel.locator('[data-testid="cluster-state"]').textContent(), "joined");
      assert.match(await panel.locator('[data-testid="cluster-summary"]').textContent(), /instance gw-a · 2 live/);
      const rows = panel.locator('[data-testid="instance-row"]');
      assert.equal(await rows.count(), 2);
      assert.equal(await rows.nth(0).getAttribute("data-name"), "gw-a", "this instance first");
      assert.equal(await rows.nth(0).getAttribute("data-self"), "1");
      assert.ok(await rows.nth(0).locator('[data-testid="instance-self"]').isVisible(), "marked as this one");
      assert.ok(!(await rows.nth(1).locator('[data-testid="instance-self"]').isVisible()));
      assert.equal(await rows.nth(1).locator('[data-testid="instance-in-flight"]').textContent(), "4");
      assert.equal(await rows.nth(1).locator('[data-testid="instance-queued"]').textContent(), "1");
      assert.match(await rows.nth(1).locator('[data-testid="instance-seen"]').textContent(), /ago|now/);

      const card = page.locator('[data-testid="provider-card"][data-name="anthropic-a"]');
      assert.equal(await card.locator('[data-testid="in-flight"]').textContent(), "3 / 8 · cluster 7");
      assert.equal(await card.locator('[data-testid="queued-count"]').textContent(), "1 · cluster 5");
      await shot(page, "cluster-joined");

      // Redis lost: the event marks the panel degraded at once, and the app asks for the instances again.
      const beforeEvent = asked.length;
      cluster = { ...cluster, state: "degraded", instances: 1 };
      instances = () => [{ name: "gw-a", self: true, seen_ms: Date.now(), in_flight: 3, queued: 0 }];
      server.send(encode({ kind: "event", seq: 1,
                           event: { kind: "cluster_changed", at_ms: Date.now(), state: "degraded", instances: 1, reason: lost } }));
      await page.locator('[data-testid="instance-panel"][data-state="degraded"]').waitFor({ timeout: 5000 });
      assert.equal(await panel.locator('[data-testid="cluster-state"]').textContent(), "degraded");
      assert.match(await panel.locator('[data-testid="cluster-reason"]').textContent(), /does not answer \(gw\.cluster\.lost\)/);
      await page.waitForFunction(() => document.querySelectorAll('[data-testid="instance-row"]').length === 1, null, { timeout: 5000 });
      assert.ok(asked.length > beforeEvent, "asked again after ClusterChanged");
      assert.match(await page.locator('[data-testid="notices"]').textContent(), /cluster degraded: 1 live instance — Redis at 127\.0\.0\.1:6379 does not answer/);
      await shot(page, "cluster-degraded");

      // …and every 5 s while the panel is shown.
      const before = asked.length;
      await page.waitForTimeout(5600);
      assert.ok(asked.length > before, `refreshed within 5.6 s (${asked.length - before} more)`);
      const polls = asked.slice(beforeEvent);
      const gaps = polls.slice(1).map((t, i) => t - polls[i]);
      assert.ok(gaps.every((g) => g >= 4500), `no faster than every 5 s: ${gaps.join(", ")} ms`);
      await page.close();
    } finally {
      await demo.stop();
    }
  });

  test("a protocol version mismatch: the banner names both versions and does not reconnect", T, async () => {
    const demo = await startDemo("calm", 0);
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
      let connections = 0;
      const proto = await protocol();
      // A server of the next protocol version: it refuses the client's hello as sluice would.
      const next = String(proto.PROTOCOL_VERSION + 1);
      const refused = Buffer.from(proto.encodeMessage({
        kind: "refused",
        message: { code: "control.protocol.mismatch", args: { ours: next, theirs: String(proto.PROTOCOL_VERSION) },
                   text: `protocol version mismatch: sluice speaks ${next}, the client ${proto.PROTOCOL_VERSION}` },
      }));
      await page.routeWebSocket(/\/control$/, (ws) => {
        connections++;
        ws.onMessage(() => ws.send(refused));
      });
      await page.goto(`http://127.0.0.1:${demo.controlPort}/#key=${demo.key}`);
      const banner = page.locator('[data-testid="banner"][data-state="mismatch"]');
      await banner.waitFor({ timeout: 10_000 });
      const text = await banner.textContent();
      assert.match(text, new RegExp(next));
      assert.match(text, new RegExp(String(proto.PROTOCOL_VERSION)));
      await page.waitForTimeout(3000);
      assert.equal(connections, 1, "no reconnect loop after a mismatch");
      await shot(page, "version-mismatch");
      await page.close();
    } finally {
      await demo.stop();
    }
  });
});

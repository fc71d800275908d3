// Starts the real sluice binary on an ephemeral 127.0.0.1 port with a config
// written to a temp dir, and stops it with SIGTERM. Fixture and binary paths come
// from the environment meson sets, with the local defaults below.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const GATEWAY_KEY = "gw-sdk-test-key-0001";
export const CONTROL_KEY = "control-sdk-test-key-0001";
// Over sluice's default limits.max_body_bytes (32 MiB): what a body too large for the gateway looks like.
export const OVERSIZED_TEXT = "a".repeat(40 * 1024 * 1024);
export const SDK_TIMEOUT_MS = 10_000;
// Bounds each test: a hung stream fails the test instead of the run.
export const TEST_TIMEOUT_MS = 20_000;

const here = (rel) => fileURLToPath(new URL(rel, import.meta.url));
const bin = process.env.SLUICE_BIN || here("../../build/sluice");
const fixtures = process.env.SLUICE_FIXTURES || here("../../../shared/fixtures/streams");

// The bytes of one stream fixture.
export function fixture(name) {
  return fs.readFileSync(path.join(fixtures, name));
}

// `providers` are {name, protocol, port, path?, fields?, key?} (fields: more YAML flow-map
// entries, starting with a comma; key: null for none, e.g. Bedrock signing with SigV4); they are tried in the order
// given. Breaker pauses are kept out of the way (failures_to_pause) so that one
// test's upstream failures do not change which upstream the next test reaches.
function configYaml(providers, storePath, waitSecs, clientFields = "", extraYaml = "", failoverFields = "") {
  const lines = [
    "listen:",
    "  gateway: {bind: 127.0.0.1, port: 0}",
    `  control: {bind: 127.0.0.1, port: 0, key: "${CONTROL_KEY}"}`,
    "clients:",
    `  - {name: sdk, key: "${GATEWAY_KEY}"${clientFields}}`,
    "providers:",
    ...providers.map(
      (p) =>
        `  - {name: ${p.name}, protocol: ${p.protocol}, ` +
        `base_url: "http://127.0.0.1:${p.port}${p.path ?? ""}"` +
        `${p.key === null ? "" : `, key: upstream-key-${p.name}`}${p.fields ?? ""}}`,
    ),
    `failover: {wait_secs: ${waitSecs}, failures_to_pause: 1000, idle_timeout_secs: 10, connect_timeout_secs: 2${failoverFields}}`,
    `store: {path: "${storePath}"}`,
    "shutdown_grace_secs: 1",
  ];
  return lines.join("\n") + "\n" + extraYaml;
}

// Starts sluice and waits for its "serving on" line. Returns {port, controlPort, pid,
// config (the file's path), log(), stop()}; throws with the log when it does not come up
// within 5 s. stop() resolves to sluice's exit code (null when it had to be killed) and may
// be called again once it has exited.
// options.waitSecs sets failover.wait_secs (0 by default: no retries, failover only);
// options.threads the worker threads (2 by default); options.storePath the request DB
// (by default in the temp dir, removed by stop(); a path given here is left for the caller to read).
// options.configPath runs on that file as it is (written by the caller, kept by stop());
// options.clientFields adds flow-map entries to the client key's line (", limits: [...]");
// options.extraYaml appends top-level sections ("telemetry: {...}\n");
// options.failoverFields adds entries to the failover section (", first_token_secs: 2").
export async function startGateway(providers, options = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-sdk-"));
  const config = options.configPath ?? path.join(dir, "sluice.yaml");
  const store = options.storePath ?? path.join(dir, "sluice.db");
  if (!options.configPath)
    fs.writeFileSync(config, configYaml(providers, store, options.waitSecs ?? 0, options.clientFields,
                                            options.extraYaml, options.failoverFields));
  const args = ["--config", config, "--threads", String(options.threads ?? 2)];
  if (process.env.SLUICE_LOG_LEVEL) args.push("--log-level", process.env.SLUICE_LOG_LEVEL);
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));

  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      finish(reject, new Error(`sluice did not start in 5 s:\n${log}`));
    }, 5000);
    const onData = () => {
      const m = /serving on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) finish(resolve, Number(m[1]));
    };
    const onExit = (code) => finish(reject, new Error(`sluice exited (${code}) at start:\n${log}`));
    function finish(settle, value) {
      clearTimeout(timer);
      child.stdout.off("data", onData);
      child.stderr.off("data", onData);
      child.off("exit", onExit);
      settle(value);
    }
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("exit", onExit);
    child.once("error", (e) => finish(reject, e));
  }).catch((e) => {
    fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  });

  const control = /control endpoint on wss?:\/\/127\.0\.0\.1:(\d+)/.exec(log);
  return {
    port,
    controlPort: control ? Number(control[1]) : null,
    config,
    pid: child.pid,
    log: () => log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
      const code = await exited;
      clearTimeout(killer);
      fs.rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

// The text of one fixture's content, from its SSE data lines.
export function fixtureText(name, pick) {
  let text = "";
  for (const line of fixture(name).toString("utf8").split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    text += pick(JSON.parse(line.slice(6))) ?? "";
  }
  return text;
}

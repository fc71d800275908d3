// The processes bench/run measures, all on 127.0.0.1: the mock upstream (nginx serving a fixed
// chat-completion JSON and pre-generated SSE files), and the three proxies in front of it — nginx
// proxy_pass with upstream keepalive, Portkey's open-source gateway (node), and sluice on its
// default settings. Each target says how a client reaches the JSON and the SSE answer through it.
import fs from "node:fs";
import path from "node:path";

import {
  CONTROL_KEY, freePort, GATEWAY_KEY, JSON_ANSWER, repo, sseAnswer, start, treeTicks, cpuTicks, waitPort, which,
} from "./lib.mjs";

export const SSE_EVENTS = 1000;

function nginxCommon(dir, name) {
  const tmp = path.join(dir, `${name}-tmp`);
  fs.mkdirSync(tmp, { recursive: true });
  return [
    // As root, nginx's workers would switch to nobody, who cannot read our temp dir.
    process.getuid() === 0 ? "user root;" : "",
    "daemon off;",
    `pid ${dir}/${name}.pid;`,
    `error_log ${dir}/${name}-error.log warn;`,
    "events { worker_connections 16384; }",
  ].join("\n") + "\n";
}

function nginxHttpCommon(dir, name) {
  const tmp = path.join(dir, `${name}-tmp`);
  return [
    "  access_log off;",
    `  client_body_temp_path ${tmp}/body; proxy_temp_path ${tmp}/proxy; fastcgi_temp_path ${tmp}/fcgi;`,
    `  uwsgi_temp_path ${tmp}/uwsgi; scgi_temp_path ${tmp}/scgi;`,
    "  keepalive_requests 100000000; keepalive_timeout 300s;",
  ].join("\n") + "\n";
}

async function startNginx(dir, name, conf, port) {
  const file = path.join(dir, `${name}.conf`);
  fs.writeFileSync(file, conf);
  const bin = which("nginx");
  if (!bin) throw new Error("nginx is not installed (scripts/setup installs it)");
  const p = start(bin, ["-p", dir, "-e", path.join(dir, `${name}-error.log`), "-c", file]);
  const log = () => {
    try {
      return p.log() + fs.readFileSync(path.join(dir, `${name}-error.log`), "utf8");
    } catch {
      return p.log();
    }
  };
  await waitPort(port, 5000, name, { ...p, log, get exited() { return p.exited; } });
  return p;
}

// The mock upstream: POST /json/v1/chat/completions answers JSON_ANSWER; /sse/v1/... the
// 1 000-event stream; /small/v1/... a 3-event stream (the scale runs). nginx answers a POST to a
// static file with 405, so error_page turns that into the file (an internal redirect as GET).
export async function startUpstream(dir, { workers = 2 } = {}) {
  const www = path.join(dir, "www");
  fs.mkdirSync(www, { recursive: true });
  fs.writeFileSync(path.join(www, "sse.txt"), sseAnswer(SSE_EVENTS));
  fs.writeFileSync(path.join(www, "small.txt"), sseAnswer(3));
  const port = await freePort();
  const h2port = await freePort(); // the same server over cleartext HTTP/2 (prior knowledge)
  const file = (f) => `alias ${www}/${f}; error_page 405 =200 $uri;`;
  const conf =
    nginxCommon(dir, "upstream").replace("daemon off;", `daemon off;\nworker_processes ${workers};`) +
    "http {\n" +
    nginxHttpCommon(dir, "upstream") +
    `  server {\n    listen 127.0.0.1:${port} backlog=8192;\n    listen 127.0.0.1:${h2port} http2 backlog=8192;\n` +
    `    location = /json/v1/chat/completions { default_type application/json; return 200 '${JSON_ANSWER}'; }\n` +
    `    location = /sse/v1/chat/completions { default_type text/event-stream; ${file("sse.txt")} }\n` +
    `    location = /small/v1/chat/completions { default_type text/event-stream; ${file("small.txt")} }\n` +
    // An OTLP/HTTP collector stand-in for the tracing section: takes a batch, answers 200.
    `    location = /v1/traces { client_max_body_size 64m; default_type application/json; return 200 '{}'; }\n` +
    "  }\n}\n";
  const p = await startNginx(dir, "upstream", conf, port);
  return {
    key: "direct",
    label: "direct (mock upstream)",
    port,
    proc: p,
    base: `http://127.0.0.1:${port}`,
    url: (kind) => `http://127.0.0.1:${port}/${kind}/v1/chat/completions`,
    h2url: (kind) => `http://127.0.0.1:${h2port}/${kind}/v1/chat/completions`,
    headers: () => ({ "content-type": "application/json", authorization: "Bearer sk-bench-upstream" }),
    ticks: () => treeTicks(p.pid),
  };
}

// nginx proxy_pass to the mock with keepalive connections to it, one worker per core.
export async function startNginxProxy(dir, upstream) {
  const port = await freePort();
  const h2port = await freePort(); // clients over cleartext HTTP/2 (prior knowledge); HTTP/1.1 to the mock
  const proxy = "proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection \"\";";
  const conf =
    nginxCommon(dir, "nginx-proxy").replace("daemon off;", "daemon off;\nworker_processes auto;") +
    "http {\n" +
    nginxHttpCommon(dir, "nginx-proxy") +
    `  upstream mock { server 127.0.0.1:${upstream.port}; keepalive 256; keepalive_requests 100000000; keepalive_timeout 300s; }\n` +
    `  server {\n    listen 127.0.0.1:${port} backlog=8192;\n    listen 127.0.0.1:${h2port} http2 backlog=8192;\n` +
    `    location / { ${proxy} }\n` +
    // Streams go out as they come in, as a gateway must send them.
    `    location /sse/ { ${proxy} proxy_buffering off; }\n` +
    "  }\n}\n";
  const p = await startNginx(dir, "nginx-proxy", conf, port);
  return {
    key: "nginx",
    label: "nginx proxy_pass",
    port,
    proc: p,
    url: (kind) => `http://127.0.0.1:${port}/${kind}/v1/chat/completions`,
    h2url: (kind) => `http://127.0.0.1:${h2port}/${kind}/v1/chat/completions`,
    headers: () => ({ "content-type": "application/json", authorization: "Bearer sk-bench-upstream" }),
    ticks: () => treeTicks(p.pid),
  };
}

// Portkey's gateway from bench/portkey/node_modules, bound to 127.0.0.1 (bench/portkey/start.mjs).
export async function startPortkey(dir, upstream) {
  const entry = path.join(repo, "bench/portkey/node_modules/@portkey-ai/gateway/build/start-server.js");
  if (!fs.existsSync(entry)) throw new Error(`${entry} is missing: run scripts/setup (npm ci in bench/portkey)`);
  const port = await freePort();
  const p = start(process.execPath, [path.join(repo, "bench/portkey/start.mjs"), `--port=${port}`, "--headless"], {
    cwd: path.join(repo, "bench/portkey"),
    env: { ...process.env, NODE_ENV: "production" },
  });
  await waitPort(port, 20000, "portkey", p);
  return {
    key: "portkey",
    label: "Portkey OSS",
    port,
    proc: p,
    url: () => `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: (kind) => ({
      "content-type": "application/json",
      authorization: "Bearer sk-bench-upstream",
      "x-portkey-provider": "openai",
      "x-portkey-custom-host": `${upstream.base}/${kind}/v1`,
    }),
    ticks: () => cpuTicks(p.pid),
  };
}

// sluice's config for the benchmark: what a user would write (a gateway key, one provider per
// answer kind, the models that pick them), nothing tuned; the request DB and event bus are on.
export function sluiceConfig(dir, upstream, extraProviders = [], extraYaml = "") {
  const lines = [
    "listen:",
    "  gateway: {bind: 127.0.0.1, port: 0}",
    `  control: {bind: 127.0.0.1, port: 0, key: "${CONTROL_KEY}"}`,
    "clients:",
    `  - {name: bench, key: "${GATEWAY_KEY}"}`,
    "providers:",
    `  - {name: json, protocol: openai-chat, base_url: "${upstream.base}/json/v1", key: sk-bench-upstream, models: ["bench-json"]}`,
    `  - {name: sse, protocol: openai-chat, base_url: "${upstream.base}/sse/v1", key: sk-bench-upstream, models: ["bench-sse"]}`,
    `  - {name: small, protocol: openai-chat, base_url: "${upstream.base}/small/v1", key: sk-bench-upstream, models: ["bench-small"]}`,
    ...extraProviders,
    `store: {path: "${dir}/sluice.db"}`,
  ];
  const file = path.join(dir, "sluice.yaml");
  fs.writeFileSync(file, lines.join("\n") + "\n" + extraYaml);
  return file;
}

export function sluiceBin() {
  return process.env.SLUICE_BIN || path.join(repo, "build/sluice");
}

export function sluicectlBin() {
  const bin = process.env.SLUICECTL || path.join(path.dirname(sluiceBin()), "control/sluicectl");
  // A missing one would make subscribers that never start, and a control section that measures nothing.
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: build it (scripts/build) or set SLUICECTL`);
  return bin;
}

// extraYaml: top-level sections added to the config (e.g. telemetry).
export async function startSluice(dir, upstream, { args = [], wrapper = null, extraYaml = "" } = {}) {
  const bin = sluiceBin();
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: build it (scripts/build) or set SLUICE_BIN`);
  const config = sluiceConfig(dir, upstream, [], extraYaml);
  const port = await freePort();
  const controlPort = await freePort();
  const argv = ["--config", config, "--port", String(port), "--control-port", String(controlPort), ...args];
  const p = wrapper ? start(wrapper[0], [...wrapper.slice(1), bin, ...argv]) : start(bin, argv);
  await waitPort(port, wrapper ? 60000 : 10000, "sluice", p);
  return {
    key: "sluice",
    label: "sluice",
    port,
    controlPort,
    proc: p,
    url: () => `http://127.0.0.1:${port}/v1/chat/completions`,
    h2url: () => `http://127.0.0.1:${port}/v1/chat/completions`, // h2o takes HTTP/2 with prior knowledge on the same port
    headers: () => ({ "content-type": "application/json", authorization: `Bearer ${GATEWAY_KEY}` }),
    model: (kind) => `bench-${kind}`,
    ticks: () => cpuTicks(p.pid),
  };
}

import fs from "node:fs";
import { startUpstream, startSluice } from "./targets.mjs";
import { run, stopAll, requestBody, sleep, GATEWAY_KEY } from "./lib.mjs";
const dir = fs.mkdtempSync("/tmp/sc/s");
const up = await startUpstream(dir);
const t = await startSluice(dir, up);
fs.writeFileSync(dir + "/body.json", requestBody("bench-sse", true));
const curl = (url, auth) => run("curl", ["-s", "-o", "/dev/null", "-w", "%{time_pretransfer} %{time_starttransfer}", "-X", "POST", "-H", "content-type: application/json", "-H", `authorization: Bearer ${auth}`, "--data-binary", "@" + dir + "/body.json", url]);
const ttfb = async (url, auth) => { const r = await curl(url, auth); const [a, b] = r.out.trim().split(" ").map(Number); return (b - a) * 1e6; };
const med = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
for (let i = 0; i < 5; i++) { await ttfb(t.url(), GATEWAY_KEY); await ttfb(`${up.base}/sse/v1/chat/completions`, "sk-bench-upstream"); }
if (process.argv[2] === "trace") {
  const tid = process.argv[3];
  console.log(`sluice pid ${t.proc.pid}`);
  const tr = process.argv[3] === "perf" ? run("perf", ["trace", "-F", "all", "--no-syscalls", "-p", String(t.proc.pid), "-o", "/tmp/sc/sse-pf.txt"], { timeoutMs: 5000 }) : run("strace", ["-f", "-tt", "-T", "-p", String(t.proc.pid), "-o", "/tmp/sc/sse-trace.txt"], { timeoutMs: 5000 });
  await sleep(500);
  await run("curl", ["-s", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-X", "POST", "-H", "content-type: application/json", "-H", `authorization: Bearer ${GATEWAY_KEY}`, "-H", "connection: close", "--data-binary", "@" + dir + "/body.json", t.url(), t.url(), t.url()]);
  await sleep(200);
  await run("pkill", ["-INT", "-x", process.argv[3] === "perf" ? "perf" : "strace"]); await tr;
}
const d = [], s = [];
for (let i = 0; i < 30; i++) { d.push(await ttfb(`${up.base}/sse/v1/chat/completions`, "sk-bench-upstream")); s.push(await ttfb(t.url(), GATEWAY_KEY)); }
console.log(`direct median ${med(d).toFixed(0)} µs, sluice median ${med(s).toFixed(0)} µs, added ${(med(s) - med(d)).toFixed(0)}`);
await stopAll();

// The PostgreSQL request DB's cost (issue 20's bar): sluice with the SQLite default vs. sluice with store.url on
// a PostgreSQL of our own (initdb in a temp dir, a free loopback port, default durability: fsync and
// synchronous_commit on), in front of one nginx mock upstream. In rounds, each side in turn, wrk at 64
// connections:
//   - req/s (bar: postgres >= 0.95 x sqlite);
//   - CPU per request: sluice's, and PostgreSQL's (the postmaster and its backends);
//   - the rows the writer stored while wrk ran, per second, and how many were still to write when it ended.
// Prints a table; asserts nothing but that every answer is a 200 and every row arrives.
//
//   node bench/store.mjs [--rounds 3] [--seconds 5] [--quick] [--stall-ms N]
//   (SLUICE_BIN: the binary, default build/sluice; PG_BINDIR: PostgreSQL's binaries, default the newest
//   /usr/lib/postgresql/*/bin; --quick: one round of 2 s, the smoke test; --stall-ms N: a PostgreSQL
//   slower than the requests, stopped (SIGSTOP) N ms in every N + 150 while wrk runs on its side: the
//   rows must be delayed, not dropped)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {
  CLK_TCK,
  CONTROL_KEY,
  children,
  GATEWAY_KEY,
  cell,
  cpuTicks,
  freePort,
  parseWrk,
  requestBody,
  run,
  sleep,
  start,
  stopAll,
  summary,
  table,
  treeTicks,
  waitPort,
  which,
  wrkScript,
} from "./lib.mjs";
import { sluiceBin, startUpstream } from "./targets.mjs";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
function option(name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
}
const rounds = option("--rounds", quick ? 1 : 3);
const seconds = option("--seconds", quick ? 2 : 5);
const stallMs = option("--stall-ms", 0);

const dir = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), "sluice-bench-store-"));
let problems = 0;
const problem = (text) => {
  problems++;
  console.log(`PROBLEM: ${text}`);
};

for (const tool of ["nginx", "wrk", "psql", "sqlite3"]) {
  if (!which(tool)) {
    console.error(`bench/store: ${tool} is not installed (scripts/setup installs it)`);
    process.exit(1);
  }
}

function pgBindir() {
  if (process.env.PG_BINDIR) return process.env.PG_BINDIR;
  const root = "/usr/lib/postgresql";
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => /^\d+$/.test(v)) : [];
  versions.sort((a, b) => Number(b) - Number(a));
  if (!versions.length) throw new Error("PostgreSQL is not installed (scripts/setup installs it)");
  return path.join(root, versions[0], "bin");
}

// initdb and postgres refuse to run as root: then they run as the postgres user, in a directory it owns.
function pgUser() {
  if (process.getuid() !== 0) return {};
  const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
  return { uid, gid };
}

async function startPostgres() {
  const bin = pgBindir(), user = pgUser();
  const pdir = path.join(dir, "pg");
  fs.mkdirSync(pdir);
  if (user.uid !== undefined) {
    fs.chmodSync(dir, 0o711); // the postgres user passes through the temp dir to its own
    fs.chownSync(pdir, user.uid, user.gid);
  }
  const init = await run(path.join(bin, "initdb"), ["-D", path.join(pdir, "data"), "-U", "postgres", "--auth=trust",
                                                     "-E", "UTF8", "--locale=C", "--no-sync"],
                         { timeoutMs: 120_000, ...user });
  if (init.code !== 0) throw new Error(`initdb: ${init.err || init.out}`);
  const port = await freePort();
  const p = start(path.join(bin, "postgres"), ["-D", path.join(pdir, "data"), "-p", String(port), "-k", pdir,
                                               "-c", "listen_addresses=127.0.0.1"], user);
  await waitPort(port, 15000, "postgres", p);
  for (let i = 0; i < 50; i++) {
    const r = await run("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-qAt", "-c", "SELECT 1"]);
    if (r.code === 0) break;
    await sleep(100);
  }
  for (const sql of ["CREATE ROLE sluice LOGIN", "CREATE DATABASE sluice OWNER sluice"]) {
    const r = await run("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-qAt", "-c", sql]);
    if (r.code !== 0) throw new Error(`${sql}: ${r.err}`);
  }
  return { port, proc: p };
}

async function startSide(name, upstream, store) {
  const sdir = path.join(dir, name);
  fs.mkdirSync(sdir);
  const config = path.join(sdir, "sluice.yaml");
  fs.writeFileSync(config, [
    "listen:",
    "  gateway: {bind: 127.0.0.1, port: 0}",
    `  control: {bind: 127.0.0.1, port: 0, key: "${CONTROL_KEY}"}`,
    "clients:",
    `  - {name: bench, key: "${GATEWAY_KEY}"}`,
    "providers:",
    `  - {name: json, protocol: openai-chat, base_url: "${upstream.base}/json/v1", key: sk-bench-upstream, ` +
      `models: ["bench-json"]}`,
    `store: {${store(sdir)}}`,
  ].join("\n") + "\n");
  const port = await freePort();
  const controlPort = await freePort();
  const p = start(sluiceBin(), ["--config", config, "--port", String(port), "--control-port", String(controlPort)]);
  await waitPort(port, 10000, `sluice (${name})`, p);
  return {
    key: name,
    port,
    controlPort,
    proc: p,
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { "content-type": "application/json", authorization: `Bearer ${GATEWAY_KEY}` },
  };
}

const body = requestBody("bench-json", false);

async function rowCount(side, pg) {
  const r = side.key === "postgres"
    ? await run("psql", ["-h", "127.0.0.1", "-p", String(pg.port), "-U", "sluice", "-qAt", "sluice", "-c",
                         "SELECT count(*) FROM requests"])
    : await run("sqlite3", [path.join(dir, "sqlite", "sluice.db"), "SELECT count(*) FROM requests"]);
  return r.code === 0 ? Number(r.out.trim()) : NaN;
}

const answered = { sqlite: 0, postgres: 0 };

// PostgreSQL (the postmaster and its backends) stopped stallMs in every stallMs + 150 until `until`.
async function stall(pg, until) {
  const signal = (sig) => {
    for (const pid of [pg.proc.pid, ...children(pg.proc.pid)]) {
      try {
        process.kill(pid, sig);
      } catch {}
    }
  };
  try {
    while (Date.now() < until) {
      signal("SIGSTOP");
      await sleep(stallMs);
      signal("SIGCONT");
      await sleep(150);
    }
  } finally {
    signal("SIGCONT");
  }
}

async function wrk(side, pg) {
  const script = wrkScript(path.join(dir, `wrk-${side.key}.lua`), body, side.headers);
  const rows0 = await rowCount(side, pg);
  const ticks0 = cpuTicks(side.proc.pid), pgTicks0 = treeTicks(pg.proc.pid);
  const stalling = stallMs > 0 && side.key === "postgres" ? stall(pg, Date.now() + seconds * 1000) : null;
  const r = await run("wrk", ["-t2", "-c64", `-d${seconds}s`, "--timeout", "5s", "-s", script, side.url],
                      { timeoutMs: (seconds + 30) * 1000 });
  await stalling;
  const w = parseWrk(r.out);
  const rows1 = await rowCount(side, pg);
  if (r.code !== 0 || w.requests === null) {
    problem(`wrk on ${side.key}: ${r.err || r.out}`);
    return w;
  }
  if (w.non2xx) problem(`wrk on ${side.key}: ${w.non2xx} answers other than 2xx`);
  answered[side.key] += w.requests;
  w.cpuUs = ((cpuTicks(side.proc.pid) - ticks0) * (1e6 / CLK_TCK)) / w.requests;
  w.pgCpuUs = ((treeTicks(pg.proc.pid) - pgTicks0) * (1e6 / CLK_TCK)) / w.requests;
  w.rowsPerSec = (rows1 - rows0) / seconds;
  w.behind = Math.max(0, rows0 + w.requests - rows1); // wrk leaves out answers still arriving as it stops
  return w;
}

// The rows sluice counted as dropped (its queue full: the writer behind the database), from /metrics.
async function rowsDropped(side) {
  const res = await fetch(`http://127.0.0.1:${side.controlPort}/metrics`,
                          { headers: { authorization: `Bearer ${CONTROL_KEY}` } });
  const m = /^sluice_db_rows_dropped_total (\d+)$/m.exec(await res.text());
  if (!m) throw new Error(`${side.key}: /metrics has no sluice_db_rows_dropped_total`);
  return Number(m[1]);
}

/*
 * Every answered request has its row once the writer has caught up, or was counted as dropped (and
 * logged): nothing is lost unseen. Drops are sluice's answer to a writer that fell behind the
 * database (its queue is bounded): the full benchmark counts them as a problem, since a store that
 * keeps up is what it measures; --quick, the smoke test, checks correctness only (a timed bar does
 * not belong in a test), and prints them.
 */
async function allRows(side, pg, want) {
  let n = NaN, dropped = 0;
  for (let i = 0; i < 300; i++) { // up to 30 s: rows set aside in the spool are written after the run
    n = await rowCount(side, pg);
    dropped = await rowsDropped(side);
    if (n + dropped >= want) break;
    await sleep(100);
  }
  const said = () => {
    for (const l of side.proc.log().split("\n").filter((l) => / (warn|error) /.test(l)).slice(-10))
      console.log(`  sluice (${side.key}): ${l}`);
  };
  if (n + dropped < want) {
    problem(`${side.key}: ${n} rows and ${dropped} counted as dropped, of ${want} answered requests`);
    said();
  } else if (dropped > 0) {
    console.log(`${side.key}: ${dropped} rows of ${want} counted as dropped (the writer fell behind), ${n} stored`);
    if (quick) said();
    else problem(`${side.key}: the store did not keep up: ${dropped} rows dropped`);
  }
  return n;
}

let code = 0;
try {
  const upstream = await startUpstream(dir);
  const pg = await startPostgres();
  const sides = {
    sqlite: await startSide("sqlite", upstream, (sdir) => `path: "${sdir}/sluice.db"`),
    postgres: await startSide("postgres", upstream, () => `url: "postgres://sluice@127.0.0.1:${pg.port}/sluice"`),
  };
  console.log(`sluice request DB benchmark (bench/store.mjs${quick ? " --quick" : ""}), ${new Date().toISOString()}`);
  console.log(`binary ${sluiceBin()}; ${os.cpus().length} cores; ${rounds} round(s) of ${seconds} s, wrk 64 connections; ` +
              `PostgreSQL ${pg.port} on loopback (default durability), SQLite WAL synchronous=NORMAL` +
              (stallMs > 0 ? `; PostgreSQL stopped ${stallMs} ms in every ${stallMs + 150} while wrk runs` : ""));
  const res = { sqlite: [], postgres: [] };
  for (const k of ["sqlite", "postgres"]) await wrk(sides[k], pg); // warm-up
  for (let r = 0; r < rounds; r++)
    for (const k of ["sqlite", "postgres"]) res[k].push(await wrk(sides[k], pg));
  const col = (k, f, digits) => cell(summary(res[k].map(f).filter((x) => x != null && !Number.isNaN(x))), digits);
  console.log(table(["", "SQLite (default)", "PostgreSQL (store.url)"], [
    ["req/s", col("sqlite", (w) => w.rps, 0), col("postgres", (w) => w.rps, 0)],
    ["CPU us/request (sluice)", col("sqlite", (w) => w.cpuUs, 1), col("postgres", (w) => w.cpuUs, 1)],
    ["CPU us/request (PostgreSQL)", "-", col("postgres", (w) => w.pgCpuUs, 1)],
    ["rows/s stored during the run", col("sqlite", (w) => w.rowsPerSec, 0), col("postgres", (w) => w.rowsPerSec, 0)],
    ["rows still to store at the end", col("sqlite", (w) => w.behind, 0), col("postgres", (w) => w.behind, 0)],
  ]));
  for (const k of ["sqlite", "postgres"]) await allRows(sides[k], pg, answered[k]);
  const ratio = res.postgres.map((w, i) => w.rps / res.sqlite[i].rps);
  console.log(`postgres / sqlite req/s: ${cell(summary(ratio), 2)} [bar >= 0.95]`);
} catch (e) {
  problem(e.stack || e.message);
} finally {
  await stopAll();
  fs.rmSync(dir, { recursive: true, force: true });
  if (problems) code = 1;
}
process.exit(code);

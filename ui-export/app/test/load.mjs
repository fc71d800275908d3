// Compiles the app's pure modules (state, timeline, limits, format) with esbuild into a temp dir,
// once per process, and imports them: the tests run on what the bundle is built from.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { build } from "esbuild";

const src = fileURLToPath(new URL("../src/", import.meta.url));
let loaded = null;

export function load() {
  loaded ??= (async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-webapp-test-"));
    process.once("exit", () => fs.rmSync(out, { recursive: true, force: true }));
    const names = ["state", "stats", "timeline", "limits", "format"];
    await build({
      entryPoints: Object.fromEntries(names.map((n) => [n, path.join(src, `${n}.ts`)])),
      bundle: true,
      splitting: true,
      format: "esm",
      platform: "node",
      outdir: out,
      outExtension: { ".js": ".mjs" },
      logLevel: "silent",
    });
    const mods = await Promise.all(names.map((n) => import(pathToFileURL(path.join(out, `${n}.mjs`)).href)));
    return Object.assign({}, ...mods);
  })();
  return loaded;
}

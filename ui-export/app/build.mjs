// Bundles the web control app into OUTDIR: index.html, app.js, app.css (minified, relative links).
//   node build.mjs OUTDIR [--dev]      (--dev: not minified, with inline source maps)
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const dev = args.includes("--dev");
const outdir = args.find((a) => !a.startsWith("--"));
if (!outdir) {
  console.error("usage: node build.mjs OUTDIR [--dev]");
  process.exit(2);
}

let esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  console.error(`build.mjs: esbuild is not installed in ${path.join(here, "..", "node_modules")}: run scripts/setup (or npm ci in ui-export)`);
  process.exit(1);
}

fs.mkdirSync(outdir, { recursive: true });
try {
  await esbuild.build({
    entryPoints: { app: path.join(here, "src", "main.ts") },
    bundle: true,
    format: "iife",
    platform: "browser",
    target: ["es2020", "chrome100", "firefox100", "safari15"],
    minify: !dev,
    sourcemap: dev ? "inline" : false,
    legalComments: "none",
    charset: "utf8",
    outdir,
    entryNames: "[name]",
    logLevel: "warning",
  });
} catch {
  // esbuild has printed the errors.
  process.exit(1);
}
fs.copyFileSync(path.join(here, "index.html"), path.join(outdir, "index.html"));
for (const f of ["index.html", "app.js", "app.css"]) {
  if (!fs.existsSync(path.join(outdir, f))) {
    console.error(`build.mjs: ${f} was not produced`);
    process.exit(1);
  }
}

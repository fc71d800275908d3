// The SDK majors a test run uses. SLUICE_SDK_SET=current (the default) loads
// today's majors (openai 7, @google/genai 3, both need Node 22); "previous"
// loads the majors before them (openai 6, @google/genai 2) through the npm
// aliases of package.json. Test names carry the version, so a failure says
// which SDK broke.
import fs from "node:fs";
import { createRequire } from "node:module";

const SETS = {
  current: { openai: "openai", genai: "@google/genai" },
  previous: { openai: "openai-6", genai: "google-genai-2" },
};

export const SDK_SET = process.env.SLUICE_SDK_SET ?? "current";
const set = SETS[SDK_SET];
if (set === undefined) throw new Error(`SLUICE_SDK_SET must be one of ${Object.keys(SETS).join(", ")}`);

const require = createRequire(import.meta.url);
function versionOf(pkg) {
  const dir = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(fs.readFileSync(dir, "utf8")).version;
}
// Resolved by file path so that a package's "exports" map does not hide its subpaths.
function resolved(pkg, sub = "") {
  return import(require.resolve(sub === "" ? pkg : `${pkg}/${sub}`));
}

export const OPENAI_VERSION = `openai ${versionOf(set.openai)}`;
export const GENAI_VERSION = `@google/genai ${versionOf(set.genai)}`;
// The Gemini API version the SDK puts in its paths by default: v1 since 3.x, v1beta before (formats.md).
export const GENAI_API_VERSION = Number(versionOf(set.genai).split(".")[0]) >= 3 ? "v1" : "v1beta";
export const { default: OpenAI } = await resolved(set.openai);
export const { ResponsesWS } = await resolved(set.openai, "resources/responses/ws");
export const { GoogleGenAI } = await resolved(set.genai);

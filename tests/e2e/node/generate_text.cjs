// One `generateText` call of the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, installed
// by scripts/test-deps.sh into .cache/ai-sdk) against an OpenAI-compatible base URL, with the
// SDK's own defaults (maxRetries 2). The only addition is a fetch that records each attempt
// the SDK makes (when it was sent, when its answer's head arrived, what the gateway answered) and then hands it to the real fetch.
//
//   node generate_text.cjs <sdk dir> <base url> <model> <prompt>
//
// Prints one JSON line: {ok, text, error, elapsed_ms, attempts: [{at_ms, done_ms, status, headers}]}.
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");

const [sdkDir, baseURL, model, prompt] = process.argv.slice(2);
const sdk = createRequire(path.join(path.resolve(sdkDir), "node_modules", "_"));
// ai 7 is ESM only (no "require" export): resolved where the SDK is installed, then imported.
const load = (name) => import(pathToFileURL(sdk.resolve(name)).href);

const KEEP = ["x-llm-attempts", "x-llm-from-memory", "x-should-retry", "retry-after", "x-llm-error-type"];
const started = Date.now();
const attempts = [];

async function recordingFetch(input, init) {
  const at = Date.now() - started;
  const res = await fetch(input, init);
  const headers = {};
  for (const k of KEEP) {
    if (res.headers.has(k)) headers[k] = res.headers.get(k);
  }
  attempts.push({ at_ms: at, done_ms: Date.now() - started, status: res.status, headers });
  return res;
}

async function main() {
  const { generateText } = await load("ai");
  const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
  const provider = createOpenAICompatible({
    name: "gateway", baseURL, apiKey: "sk-vercel-client", fetch: recordingFetch,
  });
  const out = { ok: false, text: null, error: null, elapsed_ms: 0, attempts };
  try {
    const result = await generateText({ model: provider(model), prompt });
    out.ok = true;
    out.text = result.text;
  } catch (e) {
    out.error = { name: e && e.name, message: String(e && e.message).slice(0, 300) };
  }
  out.elapsed_ms = Date.now() - started;
  process.stdout.write(JSON.stringify(out) + "\n");
}

main();

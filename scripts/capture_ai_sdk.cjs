// A two-step tool loop of the Vercel AI SDK (`streamText`, `@ai-sdk/openai-compatible`) against
// a chat-completions base URL, with the SDK's defaults; used by scripts/capture_chat_clients.py
// to record what the SDK sends.
//
//   node capture_ai_sdk.cjs <sdk dir> <base url> <png as base64>
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");

const [sdkDir, baseURL, pngBase64] = process.argv.slice(2);
const sdk = createRequire(path.join(path.resolve(sdkDir), "node_modules", "_"));
const { streamText, tool, stepCountIs } = sdk("ai");
const { createOpenAICompatible } = sdk("@ai-sdk/openai-compatible");
const { z } = sdk("zod");

async function main() {
  const provider = createOpenAICompatible({ name: "gateway", baseURL, apiKey: "sk-capture", includeUsage: true });
  const result = streamText({
    model: provider("gpt-4o-mini"),
    system: "You are a weather assistant.",
    messages: [{ role: "user", content: [
      { type: "text", text: "What is the weather where this photo was taken? Assume Paris." },
      { type: "image", image: pngBase64, mediaType: "image/png" },
    ] }],
    tools: {
      get_weather: tool({
        description: "Current weather in a city",
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => ({ city, celsius: 18 }),
      }),
    },
    stopWhen: stepCountIs(2),
  });
  let text = "";
  for await (const part of result.textStream) text += part;
  process.stdout.write(JSON.stringify({ text }) + "\n");
}

main().catch((e) => { console.error(e); process.exit(1); });

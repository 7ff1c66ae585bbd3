#!/usr/bin/env bash
# Installs the real servers and clients the test suite talks to, once: Prometheus (scrapes
# /metrics), Redis (the shared state store) and tinyproxy (an egress proxy) from Debian;
# Claude Code, Codex and the Vercel AI SDK from npm into .cache/.
# Every step is skipped when its result is already there.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool  >/dev/null 2>&1 || need+=(prometheus)
command -v curl      >/dev/null 2>&1 || need+=(curl)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v tinyproxy >/dev/null 2>&1 || need+=(tinyproxy)  # an egress proxy (tests/tinyproxy.py)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  # --no-install-recommends: we only need the binaries, not a running system service.
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The package may start its own daemon; the tests run their own on a free port.
  $SUDO service prometheus stop >/dev/null 2>&1 || true
  $SUDO service redis-server stop >/dev/null 2>&1 || true
  $SUDO service tinyproxy stop >/dev/null 2>&1 || true
fi
# Claude Code, driven headless by tests/e2e/test_claude_code.py. Its npm package ships the
# native binary for this platform as an optional dependency; nothing is fetched at run time.
# Pinned: tests/e2e/CLAUDE_CODE_NOTES.md measured this version. Its package.json asks for node
# >= 22 (npm warns EBADENGINE on Debian's node 20), but the binary needs no node: it runs here.
if ! command -v npm >/dev/null 2>&1; then
  # Not fatal: a machine whose node comes from elsewhere may refuse Debian's npm.
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null || true
fi
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
cc_prefix="$(cd "$(dirname "$0")/.." && pwd)/.cache/claude-code"
if command -v npm >/dev/null 2>&1 && { [ ! -x "$cc_prefix/node_modules/.bin/claude" ] ||
    [ "$("$cc_prefix/node_modules/.bin/claude" --version 2>/dev/null)" != "$CLAUDE_CODE_VERSION (Claude Code)" ]; }; then
  mkdir -p "$cc_prefix"
  npm install --prefix "$cc_prefix" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >/dev/null \
    || echo "test-deps: npm install @anthropic-ai/claude-code failed; the Claude Code e2e tests will skip" >&2
fi
# Codex CLI for tests/e2e/test_codex.py, once, into .cache/codex (pinned: CODEX_NOTES.md
# measured this version). Without npm the Codex tests skip, loudly.
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
codex_prefix="$(cd "$(dirname "$0")/.." && pwd)/.cache/codex"
if command -v npm >/dev/null 2>&1 && { [ ! -x "$codex_prefix/node_modules/.bin/codex" ] ||
    [ "$("$codex_prefix/node_modules/.bin/codex" --version 2>/dev/null)" != "codex-cli $CODEX_VERSION" ]; }; then
  npm install --silent --no-audit --no-fund --prefix "$codex_prefix" "@openai/codex@$CODEX_VERSION" >/dev/null \
    || echo "test-deps: npm install @openai/codex failed; the Codex e2e tests will skip" >&2
fi
# The Vercel AI SDK for tests/e2e/test_vercel_ai_sdk.py, once, into .cache/ai-sdk. Pinned: the
# test's docstring measured these versions (ai 7 declares node >= 22 and runs on Debian's node
# 20 all the same; npm only warns). Re-run only when a pinned version is missing.
AI_SDK_VERSION="${AI_SDK_VERSION:-7.0.173}"
AI_SDK_COMPAT_VERSION="${AI_SDK_COMPAT_VERSION:-3.0.92}"
ai_prefix="$(cd "$(dirname "$0")/.." && pwd)/.cache/ai-sdk"
ai_installed() {
  node -e 'const [d, a, c] = process.argv.slice(1); const r = (p) => require(d + "/node_modules/" + p + "/package.json").version;
    process.exit(r("ai") === a && r("@ai-sdk/openai-compatible") === c ? 0 : 1)' \
    "$ai_prefix" "$AI_SDK_VERSION" "$AI_SDK_COMPAT_VERSION" >/dev/null 2>&1
}
if command -v npm >/dev/null 2>&1 && ! ai_installed; then
  mkdir -p "$ai_prefix"
  npm install --prefix "$ai_prefix" --save-exact --no-audit --no-fund --loglevel=error \
    "ai@$AI_SDK_VERSION" "@ai-sdk/openai-compatible@$AI_SDK_COMPAT_VERSION" "zod@4.6.7" >/dev/null \
    || echo "test-deps: npm install of the Vercel AI SDK failed; tests/e2e/test_vercel_ai_sdk.py will skip" >&2
fi
# opencode, once, into .cache/opencode (its npm package carries the native binary), for
# tests/e2e/test_opencode_on_messages.py (a chat client on an Anthropic-only upstream),
# tests/e2e/test_retry_loops.py and bench/retry_loops.py. Pinned: the corpus requests in
# tests/corpus/requests/chat-opencode-*.json and the loop breaker page's retry table (docs/errors/loop-breaker.md) were measured with it.
# The provider package its config names is fetched by opencode itself on first use, into
# .cache/opencode/xdg-cache.
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
oc_prefix="$(cd "$(dirname "$0")/.." && pwd)/.cache/opencode"
if command -v npm >/dev/null 2>&1 && { [ ! -x "$oc_prefix/node_modules/.bin/opencode" ] ||
    [ "$("$oc_prefix/node_modules/.bin/opencode" --version 2>/dev/null)" != "$OPENCODE_VERSION" ]; }; then
  mkdir -p "$oc_prefix"
  npm install --prefix "$oc_prefix" --no-audit --no-fund --loglevel=error "opencode-ai@$OPENCODE_VERSION" >/dev/null \
    || echo "test-deps: npm install opencode-ai failed; the opencode tests will skip" >&2
fi
# Gemini CLI, once, into .cache/gemini-cli, for tests/e2e/test_gemini_cli.py (Gemini API clients
# on a chat upstream). Pinned: the corpus requests tests/corpus/requests/gemini-cli-0.61-*.json
# were captured with it.
GEMINI_CLI_VERSION="${GEMINI_CLI_VERSION:-0.61.0}"
gemini_prefix="$(cd "$(dirname "$0")/.." && pwd)/.cache/gemini-cli"
if command -v npm >/dev/null 2>&1 && { [ ! -x "$gemini_prefix/node_modules/.bin/gemini" ] ||
    [ "$("$gemini_prefix/node_modules/.bin/gemini" --version 2>/dev/null)" != "$GEMINI_CLI_VERSION" ]; }; then
  mkdir -p "$gemini_prefix"
  npm install --prefix "$gemini_prefix" --no-audit --no-fund --loglevel=error "@google/gemini-cli@$GEMINI_CLI_VERSION" >/dev/null \
    || echo "test-deps: npm install @google/gemini-cli failed; the Gemini CLI tests will skip" >&2
fi
# The google-genai SDK in a venv of its own (.venv-genai: no dependency of the gateway), for
# tests/e2e/test_google_genai.py. Pinned: tests/corpus/requests/genai-3.6-*.json were captured with it.
GENAI_VERSION="${GENAI_VERSION:-3.6.1}"
genai_venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-genai"
if ! "$genai_venv/bin/python" -c "import google.genai, sys; sys.exit(google.genai.__version__ != '$GENAI_VERSION')" >/dev/null 2>&1; then
  { python3 -m venv "$genai_venv" && "$genai_venv/bin/pip" install -q "google-genai==$GENAI_VERSION" >/dev/null; } \
    || echo "test-deps: pip install google-genai failed; the google-genai tests will skip" >&2
fi
# The OpenAI Agents SDK in a venv of its own (.venv-agents), for tests/e2e/test_agents_sdk.py.
# Pinned, with the openai SDK under it: tests/corpus/requests/agents-sdk-0.24-*.json were captured
# with these two.
AGENTS_SDK_VERSION="${AGENTS_SDK_VERSION:-0.24.0}"
AGENTS_OPENAI_VERSION="${AGENTS_OPENAI_VERSION:-3.57.0}"
agents_venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-agents"
if ! "$agents_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('openai-agents') != '$AGENTS_SDK_VERSION')" >/dev/null 2>&1; then
  { python3 -m venv "$agents_venv" && "$agents_venv/bin/pip" install -q "openai-agents==$AGENTS_SDK_VERSION" \
      "openai==$AGENTS_OPENAI_VERSION" >/dev/null; } \
    || echo "test-deps: pip install openai-agents failed; the Agents SDK tests will skip" >&2
fi
exit 0

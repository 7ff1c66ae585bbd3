#!/usr/bin/env bash
# What `make docs-check` needs to look at the built site as a reader: Debian's Chromium and
# playwright-core from npm (the driver alone; it downloads no browser), into .cache/.
# Separate from scripts/test-deps.sh: Chromium and its libraries are a few hundred MB.
# Every step is skipped when its result is already there.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
PLAYWRIGHT_CORE_VERSION="${PLAYWRIGHT_CORE_VERSION:-1.57.0}"
prefix="${PLAYWRIGHT_CORE_PREFIX:-$(cd "$(dirname "$0")/.." && pwd)/.cache/playwright-core}"
installed="$(node -p "require('$prefix/node_modules/playwright-core/package.json').version" 2>/dev/null || true)"
if [ "$installed" != "$PLAYWRIGHT_CORE_VERSION" ]; then
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_CORE_VERSION" >/dev/null
fi

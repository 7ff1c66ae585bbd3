#!/usr/bin/env bash
# Installs the real servers the test suite talks to (Debian packages), once:
# Prometheus (scrapes /metrics) and Redis (the shared state store).
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool  >/dev/null 2>&1 || need+=(prometheus)
command -v curl      >/dev/null 2>&1 || need+=(curl)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  # --no-install-recommends: we only need the binaries, not a running system service.
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The package may start its own daemon; the tests run their own on a free port.
  $SUDO service prometheus stop >/dev/null 2>&1 || true
  $SUDO service redis-server stop >/dev/null 2>&1 || true
fi
exit 0

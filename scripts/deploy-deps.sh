#!/usr/bin/env bash
# Installs what `make test-deploy` builds and runs containers with, once:
#   podman, runc, mmdebstrap            from Debian (crun refuses this host's cgroup layout: runc)
#   prometheus, promtool, redis-server  from Debian (via scripts/test-deps.sh)
#   .cache/deploy/python.tar            a Debian 12 root (python3 3.11, pip) standing in for the
#                                        python:3.11-slim base, which no registry here can serve
#   .cache/deploy/redis.tar             a Debian 12 root with redis-server, standing in for the
#                                        redis image of deploy/compose.yaml
# and imports both into podman under the names the Dockerfile and compose.yaml use. The tars
# are kept so a new podman store is filled again in seconds. A second run prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test-deps.sh

need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

CACHE=.cache/deploy
mkdir -p "$CACHE"
PATH_ENV='PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

base() {  # base NAME TAG PACKAGES [--change ...]
  local name=$1 tag=$2 packages=$3
  shift 3
  if [ ! -s "$CACHE/$name.tar" ]; then
    echo "deploy-deps: building the $tag stand-in from Debian packages (about a minute, once)"
    mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" bookworm "$CACHE/$name.tar.part"
    mv "$CACHE/$name.tar.part" "$CACHE/$name.tar"
  fi
  if ! podman image exists "$tag"; then
    podman import --quiet --change "ENV $PATH_ENV" "$@" "$CACHE/$name.tar" "$tag" >/dev/null
  fi
}

base python docker.io/library/python:3.11-slim python3,python3-pip,python-is-python3,ca-certificates \
  --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1'
base redis docker.io/library/redis:7.4-alpine redis-server,redis-tools \
  --change 'CMD ["redis-server"]'
echo "deploy-deps: podman $(podman --version | awk '{print $3}'), base images ready"

#!/usr/bin/env bash
# Packs what `python -m bench.public` needs on a bare many-core machine that has a Python
# but no network (a lent benchmark VM): the runtime's wheels for that machine's Python, the
# wrk binary with its LuaJIT, and the command that runs it. The machine's own packages are
# not used: the wheels are the versions this checkout's .venv runs, so the figures are of
# the same code and libraries as the 2-core ones.
#
#   bash scripts/bench-kit.sh [PYTHON_VERSION]    (default 3.12) -> .bench-kit/
#   then, on the machine, from a copy of this checkout with .bench-kit in it:
#   bash .bench-kit/run.sh [bench.public arguments]    (default: --cores 4 --scaling)
#
# Needs: make's .venv (for the pinned versions), pip's access to PyPI, Debian's wrk here.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-3.12}"
kit=.bench-kit
rm -rf "$kit" && mkdir -p "$kit/whl" "$kit/lib"

# The runtime's dependencies, pinned to what .venv resolved (the gateway itself travels as source).
.venv/bin/python - <<'EOF' > "$kit/requirements.txt"
import importlib.metadata as md, re
seen, todo = set(), ["llm-gateway"]
while todo:
    dist = md.distribution(todo.pop())
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            print(f"{name}=={md.version(name)}")
            todo.append(name)
        except md.PackageNotFoundError:
            pass  # a marker kept it out of this .venv (another platform or Python)
EOF
.venv/bin/python -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --no-deps -d "$kit/whl" -r "$kit/requirements.txt"

wrk="$(command -v wrk)" || { echo "bench-kit: needs wrk here (apt-get install wrk)" >&2; exit 1; }
cp "$wrk" "$kit/"
cp -L "$(ldd "$wrk" | awk '/luajit/ {print $3}')" "$kit/lib/"

cat > "$kit/run.sh" <<'EOF'
# On the benchmark machine, from the checkout's root: bench.public with the kit's wheels and wrk.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/bench-kit-site .bench-kit/whl/*.whl || exit 1
export PYTHONPATH=/tmp/bench-kit-site:$PWD PATH=$PWD/.bench-kit:$PATH LD_LIBRARY_PATH=$PWD/.bench-kit/lib PYTHONUNBUFFERED=1
echo "kernel $(uname -r), $(nproc) cores, $(python3 --version)"
# A clock without vDSO support makes every clock read a system call (~10 per request here).
echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)," \
  "time.monotonic() $(python3 -m timeit -s 'from time import monotonic' 'monotonic()' | sed 's/.*: //')"
out="${OUT:-bench/results}"
mkdir -p "$out"
[ $# -gt 0 ] || set -- --cores 4 --scaling
python3 -m bench.public "$@" --out "$out" 2>&1 | tee "$out/public.log"
EOF
echo "bench-kit: $(ls "$kit/whl" | wc -l) wheels for Python $py, wrk; $(du -sh "$kit" | cut -f1) in $kit/"

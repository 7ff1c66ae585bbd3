"""Stock agents' retry loops against a provider that fails for good: how many calls reach the
provider for one client turn, and how long the turn takes, with the client pointed at the
provider directly and through the gateway.

Every client runs as a user runs it: its own defaults (retries, backoff, timeouts), no
retry environment variables, its default model (Claude Code also with a non-default one,
``--model claude-sonnet-4-5``: it retries a 529 for minutes then). The provider is the
scriptable fake upstream (tests/fakeupstream.py), failing the same way on every call:

    503      503 server_error (OpenAI APIs) / 529 overloaded_error (Messages) / 503 UNAVAILABLE
             (Gemini)
    down     every connection is reset as soon as it is accepted (counted; a refused
             connection could not be)
    429      429 with ``retry-after: 3600`` (a long rate limit)
    timeout  no response head, ever (through the gateway only, with ``timeouts.first_byte_s: 5``:
             direct, a client waits out its own timeout, 10 minutes for Claude Code)

The gateway is ``python -m gateway`` with the shipped config/gateway.yaml (defaults:
``provider_unavailable`` 5 retries, ``rate_limit`` 3, circuit ``failure_threshold: 5``, ``open_s: 30``).
A client whose API no upstream speaks yet (Gemini CLI) reaches, through the gateway, a
provider in the API it is translated to (``Client.upstream_api``: chat completions), and
directly the fake's own Gemini API.

    python -m bench.retry_loops                               the whole matrix (about 20 minutes)
    python -m bench.retry_loops --clients codex --failures 503 --via gateway
    python -m bench.retry_loops --json results.json            also keep the rows

Runs go in parallel (``--jobs``, default 4): each has its own fake upstream and gateway.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from gateway.fake import gemini
from tests.fakeupstream import FakeUpstream, Hang, Reply
from tests.procs import ROOT, RunningProcess, base_env, free_port, start

CACHE = ROOT / ".cache"
CLAUDE = CACHE / "claude-code" / "node_modules" / ".bin" / "claude"
CODEX = CACHE / "codex" / "node_modules" / ".bin" / "codex"
OPENCODE = CACHE / "opencode" / "node_modules" / ".bin" / "opencode"
AI_SDK = CACHE / "ai-sdk"
AI_SDK_SCRIPT = ROOT / "tests" / "e2e" / "node" / "generate_text.cjs"
GEMINI_CLI = CACHE / "gemini-cli" / "node_modules" / ".bin" / "gemini"
GATEWAY_CONFIG = ROOT / "config" / "gateway.yaml"
FIRST_BYTE_S = 5  # the gateway's timeouts.first_byte_s for the "timeout" failure

CLIENT_CAP_S = float(os.environ.get("RETRY_LOOPS_CAP_S", "420"))  # a run still retrying then is killed

OPENAI_503 = {"error": {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                        "param": None, "code": None}}  # fmt: skip
OPENAI_429 = {"error": {"message": "Rate limit reached for requests per day (RPD): Limit 10000, Used 10000.",
                        "type": "requests", "param": None, "code": "rate_limit_exceeded"}}  # fmt: skip
ANTHROPIC_529 = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                 "request_id": "req_fake0001"}  # fmt: skip
ANTHROPIC_429 = {"type": "error", "error": {"type": "rate_limit_error",
                                            "message": "Number of requests has exceeded your daily rate limit"},
                 "request_id": "req_fake0001"}  # fmt: skip
LONG_WAIT = {"retry-after": "3600"}


# -- clients ------------------------------------------------------------------------------------


@dataclass
class ClientRun:
    ok: bool  # the client ended the turn with an answer
    seconds: float
    killed: bool  # still retrying at the cap
    tail: str  # the last lines it printed (for a failing assertion's message)


def _run(cmd: list[str], env: dict[str, str], cwd: Path, cap_s: float) -> ClientRun:
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    killed = False
    try:
        out, err = p.communicate(timeout=cap_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        killed = True
    tail = "\n".join((out + "\n" + err).strip().splitlines()[-6:])
    return ClientRun(p.returncode == 0 and not killed, time.monotonic() - t0, killed, tail)


def _home(work: Path) -> Path:
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def run_codex(root: str, work: Path, cap_s: float) -> ClientRun:
    """``codex exec``: a provider entry for the base URL and nothing else (no model, no retry knobs)."""
    home = _home(work)
    codex_home = home / "codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n\n'
        '[model_providers.gw]\nname = "gw"\n'
        f'base_url = "{root}/v1"\nwire_api = "responses"\nenv_key = "GW_KEY"\nrequires_openai_auth = false\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
    return _run([str(CODEX), "exec", "--skip-git-repo-check", "say hi"], env, home, cap_s)


def claude_runner(model: str | None) -> Callable[[str, Path, float], ClientRun]:
    def run(root: str, work: Path, cap_s: float) -> ClientRun:
        """``claude -p`` as in CI: a fresh HOME, no login, only the base URL and a token."""
        home = _home(work)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_AUTH_TOKEN": "dummy",
               "ANTHROPIC_BASE_URL": root, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
        extra = ["--model", model] if model else []
        return _run([str(CLAUDE), "-p", *extra, "say hi"], env, home, cap_s)

    return run


def run_opencode(root: str, work: Path, cap_s: float) -> ClientRun:
    """``opencode run`` with one OpenAI-compatible provider (opencode has no default model
    without one). Its provider package is fetched once into .cache/opencode."""
    home = _home(work)
    project = work / "project"
    project.mkdir(exist_ok=True)
    (project / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
        "provider": {"gw": {"npm": "@ai-sdk/openai-compatible", "name": "gateway",
                            "options": {"baseURL": f"{root}/v1", "apiKey": "dummy"},
                            "models": {"gpt-4o-mini": {"name": "gpt-4o-mini"}}}},
        "model": "gw/gpt-4o-mini",
    }))  # fmt: skip
    shared = CACHE / "opencode"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CACHE_HOME": str(shared / "xdg-cache"),
           "npm_config_cache": str(shared / "npm-cache"),
           # opencode (a Bun binary) unpacks a 5.5 MB native library into TMPDIR on every run
           # and never removes it: keep it inside the run's own directory.
           "TMPDIR": str(home)}  # fmt: skip
    return _run([str(OPENCODE), "run", "say hi"], env, project, cap_s)


def run_ai_sdk(root: str, work: Path, cap_s: float) -> ClientRun:
    """The Vercel AI SDK's ``generateText`` at its defaults (maxRetries 2)."""
    node = shutil.which("node") or "node"
    run = _run([node, str(AI_SDK_SCRIPT), str(AI_SDK), f"{root}/v1", "gpt-4o-mini", "say hi"],
               {"PATH": "/usr/bin:/bin"}, work, cap_s)  # fmt: skip
    # The script always exits 0; its last line says whether generateText returned.
    with contextlib.suppress(ValueError, IndexError):
        run.ok = run.ok and bool(json.loads(run.tail.splitlines()[-1])["ok"])
    return run


_PY_OPENAI = """
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="dummy")
c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "say hi"}])
"""
_PY_ANTHROPIC = """
import sys, anthropic
c = anthropic.Anthropic(base_url=sys.argv[1], api_key="dummy")
c.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "say hi"}])
"""


def run_gemini_cli(root: str, work: Path, cap_s: float) -> ClientRun:
    """``gemini -p`` headless at its stock model ("auto") and settings, but for the two a base
    URL needs (README's Agents entry): ``gemini-api-key`` auth and a trusted workspace."""
    home = _home(work)
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "GEMINI_CLI_HOME": str(home),
           "GOOGLE_GEMINI_BASE_URL": root, "GEMINI_API_KEY": "dummy", "GEMINI_CLI_TRUST_WORKSPACE": "true",
           "NO_COLOR": "1"}  # fmt: skip
    return _run([str(GEMINI_CLI), "-p", "say hi", "--output-format", "text"], env, home, cap_s)


def python_sdk_runner(code: str) -> Callable[[str, Path, float], ClientRun]:
    def run(root: str, work: Path, cap_s: float) -> ClientRun:
        env = {k: v for k, v in base_env().items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        return _run([sys.executable, "-c", code, root], env, work, cap_s)

    return run


@dataclass(frozen=True)
class Client:
    name: str
    api: str  # chat | messages | responses: where it sends a turn
    run: Callable[[str, Path, float], ClientRun]
    binary: Path | None = None  # must exist for the client to be measured
    upstream_api: str | None = None  # the API the gateway reaches the provider in (None: ``api``)


CLIENTS = {c.name: c for c in (
    Client("codex", "responses", run_codex, CODEX),
    Client("claude-code", "messages", claude_runner(None), CLAUDE),
    Client("claude-code --model claude-sonnet-4-5", "messages", claude_runner("claude-sonnet-4-5"), CLAUDE),
    Client("opencode", "chat", run_opencode, OPENCODE),
    Client("ai-sdk", "chat", run_ai_sdk, AI_SDK / "node_modules" / "ai"),
    Client("openai-python", "chat", python_sdk_runner(_PY_OPENAI)),
    Client("anthropic-python", "messages", python_sdk_runner(_PY_ANTHROPIC)),
    Client("gemini-cli", "gemini", run_gemini_cli, GEMINI_CLI, upstream_api="chat"),
)}  # fmt: skip
SHORT = {"codex": "codex", "claude": "claude-code", "claude-sonnet": "claude-code --model claude-sonnet-4-5",
         "opencode": "opencode", "ai-sdk": "ai-sdk", "openai": "openai-python", "anthropic": "anthropic-python",
         "gemini": "gemini-cli"}  # fmt: skip
FAILURES = ("503", "down", "429", "timeout")


def available(client: Client) -> bool:
    return client.binary is None or client.binary.exists()


# -- upstreams ----------------------------------------------------------------------------------


class ResettingListener:
    """An upstream that is down: every connection is reset as soon as it is accepted, and counted."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def failing_step(api: str, failure: str) -> Reply | Hang:
    if failure == "timeout":
        return Hang(3600)
    anthropic = api == "messages"
    if api == "gemini":  # Google's words: a 503 UNAVAILABLE, a 429 whose RetryInfo asks for the hour
        return gemini.unavailable() if failure == "503" else gemini.rate_limited(gemini.MODEL, 3600)
    if failure == "503":
        return Reply(529, ANTHROPIC_529) if anthropic else Reply(503, OPENAI_503)
    if failure == "429":
        return Reply(429, ANTHROPIC_429 if anthropic else OPENAI_429, dict(LONG_WAIT))
    raise ValueError(failure)


@contextlib.contextmanager
def failing_upstream(api: str, failure: str) -> Iterator[tuple[str, Callable[[], int]]]:
    """(its root URL, a function counting the turn's calls so far)."""
    if failure == "down":
        listener = ResettingListener()
        try:
            yield f"http://127.0.0.1:{listener.port}", lambda: listener.connections
        finally:
            listener.close()
        return
    with FakeUpstream.in_thread() as fake:
        fake.script(*[failing_step(api, failure)] * 10_000)
        if api == "gemini":  # generateContent and streamGenerateContent alike (not countTokens)
            yield (f"http://127.0.0.1:{fake.port}", lambda: sum(
                1 for r in fake.requests if (gemini.method_of(r.path) or ("", "", "countTokens"))[2] != "countTokens"))
            return
        path = {"chat": "/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}[api]
        yield (f"http://127.0.0.1:{fake.port}",
               lambda: sum(1 for r in fake.requests if r.method == "POST" and r.path.endswith(path)))


@contextlib.contextmanager
def gateway(upstream_root: str, failure: str, work: Path, apis: str | None = None) -> Iterator[RunningProcess]:
    """``python -m gateway`` with the shipped config (first_byte_s shortened for "timeout");
    ``apis``: the upstream's (UPSTREAM_APIS), when it speaks only another API than the client's."""
    text = GATEWAY_CONFIG.read_text()
    if failure == "timeout":
        text = text.replace("first_byte_s: 300", f"first_byte_s: {FIRST_BYTE_S}")
        assert f"first_byte_s: {FIRST_BYTE_S}" in text, "config/gateway.yaml changed: update bench/retry_loops.py"
    config = work / "gateway.yaml"
    config.write_text(text)
    port = free_port()
    env = base_env(GATEWAY_PORT=str(port), UPSTREAM_BASE_URL=upstream_root + "/v1", **({"UPSTREAM_APIS": apis} if apis else {}))
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], env, port, work / "gateway.log")
    try:
        yield gw
    finally:
        gw.stop()


# -- one measurement ----------------------------------------------------------------------------


@dataclass
class Row:
    client: str
    failure: str
    via: str  # direct | gateway
    calls: int  # calls that reached the provider for the one turn
    seconds: float
    ok: bool
    killed: bool
    tail: str


def measure(client: Client, failure: str, via: str, cap_s: float = CLIENT_CAP_S) -> Row:
    with tempfile.TemporaryDirectory(prefix="retry-loops-") as tmp:
        work = Path(tmp)
        api = client.api if via == "direct" else client.upstream_api or client.api
        with failing_upstream(api, failure) as (root, calls):
            if via == "direct":
                run = client.run(root, work, cap_s)
            else:
                with gateway(root, failure, work, client.upstream_api) as gw:
                    run = client.run(gw.base, work, cap_s)
            return Row(client.name, failure, via, calls(), round(run.seconds, 1), run.ok, run.killed, run.tail)


# -- the table ----------------------------------------------------------------------------------


def _cell(row: Row | None) -> str:
    if row is None:
        return "-"
    calls = f"{row.calls} call{'' if row.calls == 1 else 's'}"
    if row.killed:
        return f"{calls}, still running at {row.seconds:.0f} s"
    return f"{calls}, {row.seconds:.1f} s"


def table(rows: list[Row]) -> str:
    by = {(r.client, r.failure, r.via): r for r in rows}
    out = ["| client | failure | direct | through the gateway |", "| --- | --- | --- | --- |"]
    for name in CLIENTS:
        for failure in FAILURES:
            d, g = by.get((name, failure, "direct")), by.get((name, failure, "gateway"))
            if d is None and g is None:
                continue
            out.append(f"| {name} | {failure} | {_cell(d)} | {_cell(g)} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default=",".join(SHORT), help=f"comma-separated, of: {', '.join(SHORT)}")
    ap.add_argument("--failures", default=",".join(FAILURES))
    ap.add_argument("--via", default="direct,gateway")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    clients = [CLIENTS[SHORT[c]] for c in args.clients.split(",")]
    missing = [c.name for c in clients if not available(c)]
    if missing:
        print(f"not installed (bash scripts/test-deps.sh): {', '.join(missing)}", file=sys.stderr)
    todo = [(c, f, v) for c in clients if available(c) for f in args.failures.split(",")
            for v in args.via.split(",") if not (f == "timeout" and v == "direct")]  # fmt: skip
    rows: list[Row] = []
    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(measure, *t): t for t in todo}
        for fut in as_completed(futures):
            row = fut.result()
            rows.append(row)
            print(f"[{time.monotonic() - started:6.0f} s] {row.client} | {row.failure} | {row.via}: "
                  f"{_cell(row)}", file=sys.stderr, flush=True)  # fmt: skip
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()

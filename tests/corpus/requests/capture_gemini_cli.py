"""Capture what Gemini CLI really sends to a Gemini API endpoint.

A loopback aiohttp logger saves every request (method, path, query without ``key``, headers
without the credential, body untouched) and answers in the Gemini API's own shapes: a
``streamGenerateContent?alt=sse`` stream of GenerateContentResponse events, a
``generateContent`` JSON answer, ``countTokens`` and an empty model list. In ``tool`` mode
the first streamed answer is one ``functionCall`` (``list_directory`` on the working folder,
a read-only tool headless mode runs), so the second request carries a real
``functionCall`` / ``functionResponse`` round; every other answer is plain text.

    python tests/corpus/requests/capture_gemini_cli.py OUT_DIR text|tool|auto [GEMINI_BIN]

Gemini CLI runs headless (``gemini -p``) with a fresh ``GEMINI_CLI_HOME`` whose
settings.json selects ``gemini-api-key`` auth, ``GOOGLE_GEMINI_BASE_URL`` pointing at the
logger, ``GEMINI_API_KEY=dummy``, the workspace trusted (``GEMINI_CLI_TRUST_WORKSPACE``)
and ``-m`` naming the model, so no routing call is made first. ``auto`` runs ``text``'s
prompt without ``-m``, on the stock "auto" model: the first request is then the routing call
(a buffered ``generateContent`` with its JSON schema), answered ``{}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[3]
GEMINI = Path(
    os.environ.get("GEMINI_CLI_BIN") or ROOT / ".cache" / "gemini-cli" / "node_modules" / ".bin" / "gemini"
)
MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}
CREDENTIALS = {"x-goog-api-key", "authorization"}


def _sse(docs: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(d).encode() + b"\r\n\r\n" for d in docs)


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        c["finishReason"] = finish
    return c


def _stream(n: int, mode: str, workdir: str) -> bytes:
    if mode == "tool" and n == 1:
        call = {"functionCall": {"name": "list_directory", "args": {"dir_path": workdir}}}
        return _sse(
            [{"candidates": [_candidate([call], "STOP")], "usageMetadata": USAGE, "modelVersion": MODEL}]
        )
    return _sse([
        {"candidates": [_candidate([{"text": "Hi"}], None)], "modelVersion": MODEL},
        {"candidates": [_candidate([{"text": " there."}], "STOP")], "usageMetadata": USAGE, "modelVersion": MODEL},
    ])  # fmt: skip


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    if len(sys.argv) > 3:
        global GEMINI
        GEMINI = Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="gemini-capture-")
    Path(workdir, "notes.txt").write_text("hello\n")
    home = tempfile.mkdtemp(prefix="gemini-home-")
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    Path(home, ".gemini").mkdir()
    Path(home, ".gemini", "settings.json").write_text(json.dumps(settings))
    seen = asyncio.run(_run(mode, workdir, home))
    env = {"PATH": os.environ["PATH"], "HOME": home, "GEMINI_CLI_HOME": home}
    version = subprocess.run([str(GEMINI), "--version"], capture_output=True, text=True, env=env).stdout.strip()
    for i, s in enumerate(seen):
        s = {"client": f"Gemini CLI {version} (npm @google/gemini-cli)", "what": f"{mode} #{i + 1}", **s}
        Path(out, f"{mode}-{i + 1}.json").write_text(json.dumps(s, indent=1, ensure_ascii=False) + "\n")
    print("saved", len(seen), "requests in", out)


async def _run(mode: str, workdir: str, home: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        query = {k: v for k, v in request.query.items() if k != "key"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in CREDENTIALS}
        doc: Any = json.loads(body) if body else None
        seen.append({"method": request.method, "path": request.path, "query": query,
                     "headers": headers, "body": doc})  # fmt: skip
        path = request.path
        if path.endswith(":streamGenerateContent"):
            n = sum(1 for s in seen if s["path"].endswith(":streamGenerateContent"))
            return web.Response(body=_stream(n, mode, workdir), content_type="text/event-stream")
        if path.endswith(":generateContent"):
            answer = {"candidates": [_candidate([{"text": "{}"}], "STOP")], "usageMetadata": USAGE}
            return web.json_response(answer)
        if path.endswith(":countTokens"):
            return web.json_response({"totalTokens": 100})
        return web.json_response({"models": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    site = web.SockSite(runner, sock)
    await site.start()
    env = {
        "PATH": os.environ["PATH"], "HOME": home, "GEMINI_CLI_HOME": home,
        "GEMINI_API_KEY": "dummy", "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}",
        "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1", "CI": "1",
    }  # fmt: skip
    prompt = "List the files in the current folder, then say what you found" if mode == "tool" else "say hi"
    model = [] if mode == "auto" else ["-m", MODEL]
    proc = await asyncio.create_subprocess_exec(
        str(GEMINI), "-p", prompt, *model, "--output-format", "text", cwd=workdir, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 240)
    await runner.cleanup()
    print("rc", proc.returncode, "stdout", stdout.decode()[-2000:], "stderr", stderr.decode()[-3000:])
    return seen


if __name__ == "__main__":
    main()

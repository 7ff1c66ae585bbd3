"""Capture what Claude Code really sends: a loopback aiohttp logger that saves every
``POST /v1/messages`` body untouched and answers with a scripted Anthropic stream.

The first answer calls a tool so the second request carries a real ``tool_use`` /
``tool_result`` round; the second answer is plain text and ends the run. SCENARIO ``bash``
calls ``Bash`` (``echo hi``); ``image`` calls ``Read`` on a 1x1 PNG in the work directory (its
result comes back as an image block); ``pdf`` on a one-page PDF (a document block in the result). Extra ``NAME=VALUE`` arguments go into Claude Code's
environment (``MAX_THINKING_TOKENS=0`` turns thinking off).

    .venv/bin/python tests/corpus/requests/capture_claude_code.py OUT_DIR bash|image|pdf [NAME=VALUE...]

Claude Code runs headless the way tests/e2e/test_claude_code.py runs it (clean environment,
fresh HOME, ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``, ``ANTHROPIC_API_KEY=dummy``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[3]
CLAUDE = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"


def _sse(name: str, doc: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()


def _png() -> bytes:
    """A 1x1 red PNG, built here so the capture needs no image file."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
            + chunk(b"IEND", b""))


def _pdf() -> bytes:
    """A one-page PDF saying "Hello PDF", built here with its cross-reference table."""
    stream = b"BT /F1 24 Tf 20 100 Td (Hello PDF) Tj ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%b\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]  # fmt: skip
    out, offsets = b"%PDF-1.4\n", []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (n, body)
    table = b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + (b"xref\n0 %d\n0000000000 65535 f \n%btrailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
                  % (len(objects) + 1, table, len(objects) + 1, len(out)))


def _answer(n: int, tool: tuple[str, dict[str, Any]]) -> bytes:
    msg = {"id": f"msg_capture{n}", "type": "message", "role": "assistant", "model": "claude-opus-4-8",
           "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 10, "output_tokens": 1}}
    out = [_sse("message_start", {"type": "message_start", "message": msg})]
    if n == 0:
        block = {"type": "tool_use", "id": "toolu_capture01", "name": tool[0], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(tool[1])}
        stop = "tool_use"
    else:
        block, delta, stop = {"type": "text", "text": ""}, {"type": "text_delta", "text": "hi"}, "end_turn"
    out += [
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(out)


async def record(work: Path, home: Path, tool: tuple[str, dict[str, Any]], prompt: str,
                 extra_env: dict[str, str]) -> tuple[list[dict[str, Any]], int | None, bytes, bytes]:  # fmt: skip
    """Serves the logger on a free loopback port and runs Claude Code against it once."""
    seen: list[dict[str, Any]] = []

    async def messages(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "x-api-key")}
        seen.append({"path": request.path_qs, "headers": headers, "body": json.loads(raw)})
        if not seen[-1]["body"].get("stream"):
            return web.json_response({"id": "msg_side", "type": "message", "role": "assistant",
                                      "model": "claude-haiku", "content": [{"type": "text", "text": "ok"}],
                                      "stop_reason": "end_turn", "stop_sequence": None,
                                      "usage": {"input_tokens": 1, "output_tokens": 1}})  # fmt: skip
        n = len([s for s in seen if s["body"].get("stream")]) - 1
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_answer(min(n, 1), tool))
        await resp.write_eof()
        return resp

    async def other(request: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application(client_max_size=50 * 2**20)
    app.router.add_post("/v1/messages", messages)
    app.router.add_route("*", "/{tail:.*}", other)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_API_KEY": "dummy",
           "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           **extra_env}  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        str(CLAUDE), "-p", prompt, cwd=work, env=env,
        stdin=subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    await runner.cleanup()
    return seen, proc.returncode, out, err


def main(out_dir: Path, scenario: str, extra_env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        work.mkdir()
        if scenario == "pdf":
            (work / "doc.pdf").write_bytes(_pdf())
            tool: tuple[str, dict[str, Any]] = ("Read", {"file_path": str(work / "doc.pdf")})
            prompt = "summarise doc.pdf"
        elif scenario == "image":
            (work / "dot.png").write_bytes(_png())
            tool = ("Read", {"file_path": str(work / "dot.png")})
            prompt = "describe dot.png"
        else:
            tool = ("Bash", {"command": "echo hi", "description": "Print hi"})
            prompt = "run `echo hi` with Bash, then say hi"
        seen, rc, out, err = asyncio.run(record(work, home, tool, prompt, extra_env))
    version = subprocess.run([str(CLAUDE), "--version"], capture_output=True, text=True).stdout.strip()
    print("rc", rc, "stdout", out.decode()[-300:], "stderr", err.decode()[-300:], file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(seen):
        (out_dir / f"raw-{i}.json").write_text(json.dumps({"version": version, **s}, indent=1))
    print(len(seen), "requests saved", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:]))

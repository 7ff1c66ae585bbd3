"""Capture what Codex really sends to a Responses endpoint.

A loopback aiohttp logger saves every ``POST /v1/responses`` body untouched (headers without
the credential) and answers with a scripted Responses stream: the first answer is one
``function_call`` so that the second request carries a real ``function_call`` /
``function_call_output`` round, the second answer is plain text and ends the turn.

    .venv/bin/python tests/corpus/requests/capture_codex.py OUT_DIR exec|namespace|image|tool_search|notify

``exec`` calls ``exec_command`` (``echo hi``); ``namespace`` calls ``close_agent`` inside
Codex's ``multi_agent_v1`` namespace tool (the item carries ``namespace``, as the Responses
API sends it); ``image`` attaches a 1x1 PNG with ``codex exec -i`` and calls ``view_image``
on it; ``tool_search`` runs Codex on ``gpt-5.5`` (a slug Codex knows, so it offers its
client-executed ``tool_search`` and defers its MCP tools) with a one-tool MCP server, and
answers with a ``tool_search_call``, which Codex runs and sends back with its
``tool_search_output``; ``notify`` runs Codex on its default model (no ``model`` key: code mode,
the responses-lite shape) and answers with a ``custom_tool_call`` of ``exec`` whose script calls
``notify()`` twice before ``exec_command``, so the second request carries the script's output and
each notification as outputs of that one call. Codex runs headless the way tests/e2e/test_codex.py runs it (clean
environment, fresh CODEX_HOME, ``wire_api = "responses"``, ``GW_KEY=dummy``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[3]
CODEX = ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex"
# A stdio MCP server with one tool, for the tool_search scenario.
MCP_SERVER = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "demo", "version": "1"}}
    elif m["method"] == "tools/list":
        result = {"tools": [{"name": "lookup_ticket", "description": "Look up a support ticket by id",
                             "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}},
                                             "required": ["id"]}}]}
    elif m["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": "ticket is OPEN"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"""
USAGE = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}  # fmt: skip


def _png() -> bytes:
    """A 1x1 red PNG, built here so the capture needs no image file."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _answer(n: int, call: dict[str, Any]) -> bytes:
    seq = iter(range(100))
    out: list[bytes] = []

    def ev(name: str, **data: Any) -> None:
        doc = {"type": name, "sequence_number": next(seq), **data}
        out.append(f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode())

    shell = {"id": f"resp_capture{n}", "object": "response", "created_at": int(time.time()),
             "status": "in_progress", "model": "gpt-5-codex", "output": [], "usage": None}  # fmt: skip
    ev("response.created", response=shell)
    if n == 0 and "item" in call:
        done = call["item"]
        ev("response.output_item.added", output_index=0, item={**done, "status": "in_progress"})
    elif n == 0:
        item = {"id": "fc_capture1", "type": "function_call", "status": "in_progress", "call_id": "call_capture1",
                "arguments": "", **call}  # fmt: skip
        args = item.pop("args")
        ev("response.output_item.added", output_index=0, item=item)
        ev("response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=args)
        ev("response.function_call_arguments.done", item_id=item["id"], output_index=0, arguments=args)
        done = {**item, "status": "completed", "arguments": args}
    else:
        item = {
            "id": "msg_capture2",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        ev("response.output_item.added", output_index=0, item=item)
        ev("response.output_text.delta", item_id=item["id"], output_index=0, content_index=0, delta="Done.")
        done = {
            **item,
            "status": "completed",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        }
    ev("response.output_item.done", output_index=0, item=done)
    ev("response.completed", response={**shell, "status": "completed", "output": [done], "usage": USAGE})
    return b"".join(out)


async def capture(scenario: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    call: dict[str, Any] = {}

    async def responses(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen.append({"path": request.path_qs,
                     "headers": {k: v for k, v in request.headers.items() if k.lower() != "authorization"},
                     "body": json.loads(raw)})  # fmt: skip
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_answer(min(len(seen) - 1, 1), dict(call)))
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=50 * 2**20)
    app.router.add_post("/v1/responses", responses)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp, "home")
        codex_home = home / "codex"
        codex_home.mkdir(parents=True)
        model: str | None = "gpt-5-codex"
        mcp = ""
        if scenario == "notify":
            model = None  # Codex's default: code mode, the responses-lite shape
        if scenario == "tool_search":
            (home / "mcp.py").write_text(MCP_SERVER)
            model, mcp = "gpt-5.5", f'\n[mcp_servers.demo]\ncommand = "{sys.executable}"\nargs = ["{home / "mcp.py"}"]\n'
        (codex_home / "config.toml").write_text(
            (f'model = "{model}"\n' if model else "") + 'model_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n'
            f'\n[model_providers.gw]\nname = "gw"\nbase_url = "http://127.0.0.1:{port}/v1"\nwire_api = "responses"\n'
            'env_key = "GW_KEY"\nrequires_openai_auth = false\nrequest_max_retries = 0\nstream_max_retries = 0\n' + mcp
        )
        args = [str(CODEX), "exec", "--skip-git-repo-check"]
        if scenario == "image":
            (home / "dot.png").write_bytes(_png())
            call.update(name="view_image", args=json.dumps({"path": str(home / "dot.png")}))
            args += ["What colour is this image? Look at dot.png too.", "-i", str(home / "dot.png")]
        elif scenario == "tool_search":
            call.update(item={"id": "tsc_capture1", "type": "tool_search_call", "status": "completed",
                              "execution": "client", "call_id": "call_capture1",
                              "arguments": {"query": "support ticket"}})  # fmt: skip
            args += ["Look up support ticket 42"]
        elif scenario == "notify":
            script = ('notify("step one done"); notify("step two done"); '
                      'const r = await tools.exec_command({cmd: "echo hi"}); text(JSON.stringify(r));')  # fmt: skip
            call.update(item={"id": "ctc_capture1", "type": "custom_tool_call", "status": "completed",
                              "call_id": "call_capture1", "name": "exec", "namespace": "functions",
                              "input": script})  # fmt: skip
            args += ["Run echo hi and tell me what it printed; notify me of each step"]
        elif scenario == "namespace":
            call.update(
                name="close_agent", namespace="multi_agent_v1", args=json.dumps({"target": "nonexistent"})
            )
            args += ["Close the agent named nonexistent"]
        else:
            call.update(name="exec_command", args=json.dumps({"cmd": "echo hi"}))
            args += ["Run echo hi in the shell and tell me what it printed"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
        proc = await asyncio.create_subprocess_exec(*args, cwd=home, env=env, stdin=subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    await runner.cleanup()
    print(
        "rc", proc.returncode, "stdout", out.decode()[-300:], "stderr", err.decode()[-300:], file=sys.stderr
    )
    return seen


def main(out_dir: Path, scenario: str) -> None:
    seen = asyncio.run(capture(scenario))
    version = subprocess.run([str(CODEX), "--version"], capture_output=True, text=True).stdout.strip()
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(seen):
        (out_dir / f"raw-{scenario}-{i}.json").write_text(json.dumps({"version": version, **s}, indent=1))
    print(len(seen), "requests saved", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

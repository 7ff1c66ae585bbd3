"""Captures what real chat-completions clients send, for tests/corpus/requests/.

Starts a logging chat-completions server on loopback, points the stock clients at it and
writes each request body as a corpus file with its source:

* the openai Python SDK (the version in .venv), as a user's code calls it;
* the Vercel AI SDK (``ai`` + ``@ai-sdk/openai-compatible`` from .cache/ai-sdk, installed by
  scripts/test-deps.sh), a two-step tool loop driven by ``scripts/capture_ai_sdk.cjs``;
* opencode (``opencode-ai`` from npm in .cache/opencode: ``npm install --prefix .cache/opencode
  opencode-ai``), ``opencode run`` with a custom openai-compatible provider: its title request,
  and its agent loop calling its ``read`` tool once.

The server answers like a chat upstream: a tool call when the request offers tools and the
conversation does not end in a tool result, else a short text; streamed when asked.

    .venv/bin/python scripts/capture_chat_clients.py    # rewrites tests/corpus/requests/chat-*.json
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "corpus" / "requests"
OPENCODE = ROOT / ".cache" / "opencode" / "node_modules" / ".bin" / "opencode"
OPENCODE_DIR = Path(tempfile.gettempdir()) / "capture-opencode"
# A 1x1 PNG, so the image part is a real data URL.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e2216bc90000000049454e44ae426082"
    )
).decode()


def _answer(req: dict[str, Any]) -> dict[str, Any]:
    messages = req.get("messages") or []
    tools = req.get("tools") or []
    message: dict[str, Any] = {"role": "assistant", "content": "Done."}
    finish = "stop"
    if tools and messages and messages[-1].get("role") != "tool":
        name = tools[0]["function"]["name"]
        arguments = {"city": "Paris"}
        if any(t["function"]["name"] == "read" for t in tools):  # opencode: read its own config
            name, arguments = "read", {"filePath": str(OPENCODE_DIR / "opencode.json")}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_capture_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-capture",
        "object": "chat.completion",
        "created": 1764000000,
        "model": req.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def _as_stream(doc: dict[str, Any]) -> bytes:
    from gateway.apis.synthesize import chat_stream

    return chat_stream(doc, include_usage=True)


class Logger:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(
            {"path": request.path, "user_agent": request.headers.get("user-agent"), "body": body}
        )
        doc = _answer(body)
        if body.get("stream"):
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(_as_stream(doc))
            await resp.write_eof()
            return resp
        return web.json_response(doc)

    def run(self, ready: threading.Event) -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self.handle)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            await asyncio.Event().wait()

        asyncio.run(main())


def _openai_sdk(base: str) -> list[tuple[str, str]]:
    import openai

    client = openai.OpenAI(base_url=base, api_key="sk-capture")
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    out = []
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}],
        max_completion_tokens=256,
        temperature=1.5,
        top_p=0.9,
        stop=["\n\n"],
        user="user-42",
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        reasoning_effort="low",
    )
    for _ in stream:
        pass
    out.append(
        (
            "chat-openai-python-stream-knobs",
            "openai.OpenAI().chat.completions.create(stream=True, stream_options, max_completion_tokens, "
            "temperature, top_p, stop, user, seed, penalties, reasoning_effort)",
        )
    )
    client.chat.completions.create(
        model="gpt-4o-mini",
        tools=[weather],
        tool_choice="required",
        parallel_tool_calls=False,
        messages=[
            {"role": "developer", "content": "Use tools when asked about weather."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in these pictures, and the weather in Paris and Rome?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PIXEL}", "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_b2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a1", "content": "18C, cloudy"},
            {"role": "tool", "tool_call_id": "call_b2", "content": [{"type": "text", "text": "24C, sunny"}]},
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "And tomorrow?"},
        ],
    )
    out.append(
        (
            "chat-openai-python-tools-images",
            "openai.OpenAI().chat.completions.create(tools, tool_choice='required', "
            "parallel_tool_calls=False, developer + mid-conversation system message, image data URL "
            "and http URL, two tool results)",
        )
    )
    client.chat.completions.create(
        model="gpt-4o-mini",
        n=2,
        logprobs=True,
        top_logprobs=2,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"type": "string"}},
                    "required": ["answer"],
                    "additionalProperties": False,
                },
            },
        },
        tools=[weather],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "Reply in JSON."}],
    )
    out.append(
        (
            "chat-openai-python-uncarried",
            "openai.OpenAI().chat.completions.create(n=2, logprobs, top_logprobs, "
            "response_format json_schema, tool_choice naming a function)",
        )
    )
    return out


def _opencode(base: str) -> None:
    OPENCODE_DIR.mkdir(exist_ok=True)
    config = {"$schema": "https://opencode.ai/config.json", "provider": {"gw": {
        "npm": "@ai-sdk/openai-compatible", "name": "gateway",
        "options": {"baseURL": base, "apiKey": "sk-capture"},
        "models": {"gpt-4o-mini": {"name": "gpt-4o-mini"}}}}}  # fmt: skip
    (OPENCODE_DIR / "opencode.json").write_text(json.dumps(config))
    home = OPENCODE_DIR / "home"  # its own data and cache, nothing of the user's
    subprocess.run([str(OPENCODE), "run", "--model", "gw/gpt-4o-mini",
                    "Read opencode.json and say what provider it sets."],
                   cwd=OPENCODE_DIR, env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
                   check=True, timeout=180, capture_output=True)  # fmt: skip


def main() -> int:
    sys.path.insert(0, str(ROOT))
    logger = Logger()
    ready = threading.Event()
    threading.Thread(target=logger.run, args=(ready,), daemon=True).start()
    ready.wait(10)
    base = f"http://127.0.0.1:{logger.port}/v1"
    import openai

    today = datetime.date.today().isoformat()
    made: list[tuple[str, str, str]] = []
    start = 0
    for name, how in _openai_sdk(base):
        made.append((name, f"openai Python SDK {openai.__version__}", how))
    sdk_dir = ROOT / ".cache" / "ai-sdk"
    versions = {
        p: json.loads((sdk_dir / "node_modules" / p / "package.json").read_text())["version"]
        for p in ("ai", "@ai-sdk/openai-compatible")
    }
    before = len(logger.seen)
    subprocess.run(
        ["node", str(ROOT / "scripts" / "capture_ai_sdk.cjs"), str(sdk_dir), base, PIXEL],
        check=True,
        timeout=60,
    )
    compat = versions["@ai-sdk/openai-compatible"]
    label = f"Vercel AI SDK ai {versions['ai']} + @ai-sdk/openai-compatible {compat}"
    steps = len(logger.seen) - before
    for i in range(steps):
        made.append(
            (
                f"chat-ai-sdk-tool-loop-step{i + 1}",
                label,
                f"streamText with a system prompt, an image (base64), one tool and stopWhen stepCountIs(2): "
                f"request {i + 1} of {steps}",
            )
        )
    if OPENCODE.exists():
        version = subprocess.run([str(OPENCODE), "--version"], capture_output=True, text=True, check=True)
        before = len(logger.seen)
        _opencode(base)
        names = ["chat-opencode-title", "chat-opencode-agent-step1", "chat-opencode-agent-step2"]
        got = logger.seen[before:]
        # The title request runs alongside the agent's: order them by kind, not by arrival.
        got.sort(key=lambda s: (bool(s["body"].get("tools")), len(s["body"]["messages"])))
        logger.seen[before:] = got
        for name in names[: len(got)]:
            made.append((name, f"opencode {version.stdout.strip()}",
                         "opencode run 'Read opencode.json and say what provider it sets.' with a custom "
                         "@ai-sdk/openai-compatible provider; the server answered the agent's first request "
                         "with a call of its read tool"))  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    for (name, client, how), seen in zip(made, logger.seen[start:], strict=True):
        doc = {
            "source": f"{client}, captured {today} by scripts/capture_chat_clients.py: {how}; "
            "the client pointed at a logging loopback server (its base_url), body as received",
            "client": client,
            "user_agent": seen["user_agent"],
            "path": seen["path"],
            "body": seen["body"],
        }
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        print("wrote", OUT / f"{name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""opencode (``opencode-ai`` from npm, pinned in scripts/test-deps.sh) as a user runs it,
``opencode run`` with a custom OpenAI-compatible provider whose base URL is the gateway, and the
gateway's only upstream an Anthropic Messages fake: every request goes out translated
(chat → Messages) and every answer comes back as chat completions.

The fake plays Claude in a tool loop: asked with tools and no tool result yet, it streams a
``tool_use`` of opencode's ``read`` tool (with a thinking block first); asked again with the
result, it streams the answer. opencode really runs its tool, sends the result back, and
prints the answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, RunningGateway, launch_cli
from tests.fakeupstream import FakeUpstream, Stream, anthropic_head, anthropic_tail, sse, text_delta

pytestmark = pytest.mark.e2e

OPENCODE = ROOT / ".cache" / "opencode" / "node_modules" / ".bin" / "opencode"
ANSWER = "The config sets one provider, gw, through the gateway."


@pytest.fixture(scope="module")
def opencode() -> str:
    if not OPENCODE.exists():
        r = subprocess.run(["bash", str(ROOT / "scripts" / "test-deps.sh")], capture_output=True, text=True,
                           timeout=600, check=False)  # fmt: skip
        if not OPENCODE.exists():
            pytest.skip(f"!!! OPENCODE NOT TESTED: npm install into .cache/opencode failed: "
                        f"{(r.stderr or r.stdout)[-800:]} !!!")  # fmt: skip
    if shutil.which("node") is None:
        pytest.skip("!!! OPENCODE NOT TESTED: node is not installed !!!")
    return str(OPENCODE)


def _claude(payload: dict[str, Any]) -> Stream:
    """Anthropic's stream for this request: a read call when the tools are offered and no tool
    result came back yet, else a text answer (a title, or the final answer)."""
    model = payload.get("model", "")
    last = payload["messages"][-1]["content"]
    has_result = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    if not payload.get("tools") or has_result:
        text = ANSWER if has_result else "Reading the config"
        return Stream([*anthropic_head(model), text_delta(text), *anthropic_tail()])
    start, ping, _ = anthropic_head(model)
    path = json.dumps({"filePath": "opencode.json"})
    return Stream([start, ping,
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "thinking_delta", "thinking": "I should read it."}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_01OpencodeRead", "name": "read", "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                    "delta": {"type": "input_json_delta", "partial_json": path[:9]}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                    "delta": {"type": "input_json_delta", "partial_json": path[9:]}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
        *anthropic_tail(stop_reason="tool_use")[1:],
    ])  # fmt: skip


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture(scope="module")
def gateway(claude: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(claude, tmp_path_factory.mktemp("ocgw"),
                    upstream_yaml=", apis: [messages], model_map: {'*': claude-sonnet-4-5}")  # fmt: skip
    yield gw
    gw.stop()


def test_opencode_runs_a_tool_loop_on_an_anthropic_upstream(
    opencode: str, gateway: RunningGateway, claude: FakeUpstream, tmp_path: Path
) -> None:
    config = {"$schema": "https://opencode.ai/config.json", "provider": {"gw": {
        "npm": "@ai-sdk/openai-compatible", "name": "gateway",
        "options": {"baseURL": gateway.base + "/v1", "apiKey": "sk-opencode"},
        "models": {"gpt-4o-mini": {"name": "gpt-4o-mini"}}}}}  # fmt: skip
    (tmp_path / "opencode.json").write_text(json.dumps(config))
    claude.script(*[_claude] * 6)
    done = subprocess.run([opencode, "run", "--model", "gw/gpt-4o-mini", "What provider does opencode.json set?"],
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)},
                          capture_output=True, timeout=180, check=False)  # fmt: skip
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    assert ANSWER in out
    sent = [r.json() for r in claude.messages_requests()]
    assert sent and all(r["model"] == "claude-sonnet-4-5" for r in sent)
    assert not claude.chat_requests()  # nothing reached the upstream in an API it does not speak
    # opencode ran its read tool on the call it got and sent the file back as the result
    [loop_end] = [r for r in sent if r["messages"][-1]["role"] == "user"
                  and any(b.get("type") == "tool_result" for b in r["messages"][-1]["content"])]  # fmt: skip
    call = loop_end["messages"][-2]["content"]
    assert call == [{"type": "tool_use", "id": "toolu_01OpencodeRead", "name": "read",
                     "input": {"filePath": "opencode.json"}}]  # fmt: skip
    [result] = loop_end["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_01OpencodeRead" and "@ai-sdk/openai-compatible" in json.dumps(result)
    print(f"opencode through the gateway on a Messages upstream: {len(sent)} requests translated, "
          f"{sum(len(json.dumps(r)) for r in sent)} bytes sent")

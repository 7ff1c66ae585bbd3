"""opencode (``opencode-ai`` from npm, pinned in scripts/test-deps.sh) as a user runs it, with a
custom OpenAI-compatible provider whose base URL is the gateway, and the gateway's only upstream
a fake that speaks only the Responses API (``apis: [responses]``, as OpenAI serves gpt-5-codex):
every request goes out translated (chat → Responses) and every answer comes back as chat
completions.

The fake plays a Responses model in a tool loop: asked with tools and no tool output yet, it
streams a ``function_call`` of opencode's ``read`` tool (after a reasoning summary); asked again
with the output, it streams the answer. opencode really runs its tool, sends the result back, and
prints the answer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway, launch_cli
from tests.e2e.test_opencode_on_messages import opencode  # noqa: F401 (fixture)
from tests.fakeupstream import FakeUpstream, Seq, Stream, response_object, responses_stream

pytestmark = pytest.mark.e2e

ANSWER = "The config sets one provider, gw, through the gateway."


def _model(payload: dict[str, Any]) -> Stream:
    """The Responses stream for this request: a read call when tools are offered and no output
    came back yet, else a text answer (a title, or the final answer)."""
    items = payload["input"]
    has_output = any(i.get("type") == "function_call_output" for i in items)
    if not payload.get("tools") or has_output:
        text = ANSWER if has_output else "Reading the config"
        return Stream(responses_stream("gpt-5-codex", (text[:4], text[4:])), then="eof")
    seq = Seq()
    args = json.dumps({"filePath": "opencode.json"})
    thought = {"id": "rs_oc", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Read it."}]}
    call = {"id": "fc_oc", "type": "function_call", "status": "completed", "call_id": "call_OpencodeRead",
            "name": "read", "arguments": args}  # fmt: skip
    done = {**response_object("gpt-5-codex"), "id": "resp_oc", "output": [thought, call]}
    where = {"item_id": "fc_oc", "output_index": 1}
    return Stream([
        seq("response.created", response={**done, "status": "in_progress", "output": [], "usage": None}),
        seq("response.output_item.added", output_index=0, item={**thought, "summary": []}),
        seq("response.reasoning_summary_text.delta", item_id="rs_oc", output_index=0, summary_index=0,
            delta="Read it."),
        seq("response.output_item.done", output_index=0, item=thought),
        seq("response.output_item.added", output_index=1, item={**call, "status": "in_progress", "arguments": ""}),
        seq("response.function_call_arguments.delta", **where, delta=args[:9]),
        seq("response.function_call_arguments.delta", **where, delta=args[9:]),
        seq("response.function_call_arguments.done", **where, arguments=args),
        seq("response.output_item.done", output_index=1, item=call),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip


@pytest.fixture(scope="module")
def openai_responses() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture(scope="module")
def gateway(openai_responses: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(openai_responses, tmp_path_factory.mktemp("ocresp"),
                    upstream_yaml=", apis: [responses], model_map: {'*': gpt-5-codex}")  # fmt: skip
    yield gw
    gw.stop()


def test_opencode_runs_a_tool_loop_on_a_responses_only_upstream(
    opencode: str, gateway: RunningGateway, openai_responses: FakeUpstream, tmp_path: Path  # noqa: F811
) -> None:
    config = {"$schema": "https://opencode.ai/config.json", "provider": {"gw": {
        "npm": "@ai-sdk/openai-compatible", "name": "gateway",
        "options": {"baseURL": gateway.base + "/v1", "apiKey": "sk-opencode"},
        "models": {"gpt-4o-mini": {"name": "gpt-4o-mini"}}}}}  # fmt: skip
    (tmp_path / "opencode.json").write_text(json.dumps(config))
    openai_responses.script(*[_model] * 6)
    done = subprocess.run([opencode, "run", "--model", "gw/gpt-4o-mini", "What provider does opencode.json set?"],
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)},
                          capture_output=True, timeout=180, check=False)  # fmt: skip
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    assert ANSWER in out
    sent = [r.json() for r in openai_responses.responses_requests()]
    assert sent and all(r["model"] == "gpt-5-codex" and r["store"] is False for r in sent)
    assert not openai_responses.chat_requests()  # nothing reached the upstream in an API it does not speak
    [loop_end] = [r for r in sent if r["input"][-1].get("type") == "function_call_output"]
    call, output = loop_end["input"][-2:]
    assert (call["type"], call["call_id"], call["name"], json.loads(call["arguments"])) == (
        "function_call", "call_OpencodeRead", "read", {"filePath": "opencode.json"})
    assert output["call_id"] == "call_OpencodeRead" and "@ai-sdk/openai-compatible" in output["output"]

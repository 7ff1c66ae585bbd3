"""Claude Code itself (`claude -p`) through the gateway to an upstream that speaks only chat
completions (the fake, `apis: [chat]`): the Messages → chat translator carries its real
requests and turns chat chunks back into the Messages stream it reads, over a tool loop
(its Bash tool called through translated `tool_calls`, the result sent back as a `tool`
message and answered)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway
from tests.e2e.test_claude_code import claude_bin, launch, run_claude, workdir  # noqa: F401 (fixtures)
from tests.fakeupstream import FakeUpstream, Reply, Stream, chat_completion, chunk

pytestmark = pytest.mark.e2e

CHAT_ONLY = ", apis: [chat], model_map: {'claude-*': qwen3-coder}"


@pytest.fixture(scope="module")
def chat_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccchat"), upstream_yaml=CHAT_ONLY)
    yield gw
    gw.stop()


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 0, "model": "qwen3-coder",
            "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}  # fmt: skip


def _tool_call_turn(call_id: str, command: str) -> Stream:
    """A chat stream calling Bash the way llama.cpp and OpenAI stream it: id and name first,
    the arguments in pieces."""
    args = json.dumps({"command": command, "description": "Print a marker"})
    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": "Bash", "arguments": ""}}
    pieces = [args[i : i + 9] for i in range(0, len(args), 9)]
    return Stream([
        chunk({"role": "assistant", "content": None}, model="qwen3-coder"),
        chunk({"reasoning_content": "The user wants the marker printed."}, model="qwen3-coder"),
        chunk({"tool_calls": [head]}, model="qwen3-coder"),
        *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}, model="qwen3-coder") for p in pieces],
        chunk({}, "tool_calls", model="qwen3-coder"),
        _usage(21000, 40),
    ])  # fmt: skip


def _answer_turn(text: str) -> Stream:
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    return Stream([chunk({"role": "assistant", "content": ""}, model="qwen3-coder"),
                   *[chunk({"content": w}, model="qwen3-coder") for w in words],
                   chunk({}, "stop", model="qwen3-coder"), _usage(21100, len(words))])  # fmt: skip


def test_claude_code_runs_a_bash_tool_loop_on_a_chat_only_upstream(
    claude_bin: Path, chat_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    def turn(payload: dict[str, Any]) -> Stream:
        last = payload["messages"][-1]
        if last["role"] == "tool":
            return _answer_turn(f"The command printed {last['content'].strip()}.")
        return _tool_call_turn("call_e2e_1", "echo translated-marker-42")

    upstream.script(turn, turn)
    r = run_claude(claude_bin, chat_gateway, workdir, "print the marker with Bash", timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert "The command printed translated-marker-42." in r.out
    sent = [req.json() for req in upstream.chat_requests()]
    assert len(sent) == 2 and not upstream.messages_requests()  # only chat completions went upstream
    first, second = sent
    assert first["model"] == "qwen3-coder" and first["stream"] is True and len(first["tools"]) > 5
    assert [m["role"] for m in first["messages"]][:2] == ["system", "user"]
    assert "system" not in [m["role"] for m in first["messages"][1:]]
    tool_turn = second["messages"][-2:]
    assert tool_turn[0]["role"] == "assistant" and tool_turn[0]["tool_calls"][0]["id"] == "call_e2e_1"
    assert tool_turn[1] == {"role": "tool", "tool_call_id": "call_e2e_1", "content": tool_turn[1]["content"]}
    assert "translated-marker-42" in tool_turn[1]["content"]
    # The prompt's prefix is unchanged from turn 1 to turn 2 (a chat server's prefix cache holds).
    assert second["messages"][: len(first["messages"])] == first["messages"]


def test_a_chat_stream_cut_mid_answer_reaches_claude_code_as_its_typed_error_and_it_recovers(
    claude_bin: Path, chat_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    """The cut ends the translated stream in Anthropic's `event: error`; Claude Code then asks
    again without streaming (measured in CLAUDE_CODE_NOTES.md), which the buffered answer
    translation carries."""
    cut = Stream([chunk({"role": "assistant", "content": ""}, model="qwen3-coder"),
                  chunk({"content": "The answer"}, model="qwen3-coder")], then="drop")  # fmt: skip
    upstream.script(cut, Reply(200, chat_completion("qwen3-coder", "Forty-two.")))
    r = run_claude(claude_bin, chat_gateway, workdir, "what is the answer?", timeout=90)
    sent = [req.json() for req in upstream.chat_requests()]
    assert len(sent) == 2 and sent[0]["stream"] is True and not sent[1].get("stream")
    assert r.rc == 0, (r.out, r.err)
    assert "Forty-two." in r.out

"""Claude Code itself (`claude -p`) through the gateway to an upstream that speaks only chat
completions (the fake, `apis: [chat]`): the Messages → chat translator carries its real
requests and turns chat chunks back into the Messages stream it reads, over a tool loop
(its Bash tool called through translated `tool_calls`, the result sent back as a `tool`
message and answered)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway
from tests.e2e.test_claude_code import claude_bin, launch, run_claude, tokens, workdir  # noqa: F401 (fixtures)
from tests.fakeupstream import FakeUpstream, Reply, Stream, chat_completion, chunk, overflow_error

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


def _tool_call_turn(call_id: str, command: str, name: str = "Bash", tool_input: dict[str, Any] | None = None) -> Stream:
    """A chat stream calling a tool the way llama.cpp and OpenAI stream it: id and name
    first, the arguments in pieces."""
    args = json.dumps(tool_input or {"command": command, "description": "Print a marker"})
    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
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


def test_claude_code_loads_a_deferred_tool_with_tool_search_on_a_chat_only_upstream(
    claude_bin: Path, chat_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    """2.1.332 defers CronList, loads it with ToolSearch and sends the result as a
    ``tool_reference`` block: the chat model is told, in the tool message, that the tool is
    loaded (it was a 400 that cost Claude Code 3 failed calls)."""
    def turn(payload: dict[str, Any]) -> Stream:
        if any(m["role"] == "tool" for m in payload["messages"]):
            return _answer_turn("CronList is ready.")
        return _tool_call_turn("call_search_1", "", "ToolSearch", {"query": "select:CronList", "max_results": 1})

    upstream.script(turn, turn)
    r = run_claude(claude_bin, chat_gateway, workdir, "list my cron jobs", timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert "CronList is ready." in r.out
    sent = [req.json() for req in upstream.chat_requests()]
    assert len(sent) == 2  # nothing refused, nothing retried
    # Claude Code adds the loaded tool to `tools` (with defer_loading), a plain function here.
    assert "CronList" in [t["function"]["name"] for t in sent[1]["tools"]]
    [result] = [m for m in sent[1]["messages"] if m["role"] == "tool"]
    assert result["tool_call_id"] == "call_search_1" and "Tool CronList loaded" in result["content"]


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


@pytest.mark.parametrize("style", ["openai", "groq", "mistral"])
def test_claude_code_runs_on_a_model_that_refuses_its_effort_and_its_budget(
    claude_bin: Path, fake: FakeUpstream, upstream: FakeUpstream, workdir: Path,  # noqa: F811
    tmp_path: Path, style: str,
) -> None:  # fmt: skip
    """On a chat model that refuses ``reasoning_effort`` and any budget above 16,384 tokens, as
    OpenAI's gpt-4o does, stock Claude Code's first turn costs three upstream calls (its effort
    refused, then its 128000-token budget, 2.1.332's, then the fixed request) and every later turn one. The
    effort refused in Groq's words (a 400) or Mistral's (a 422 validation error) costs the same."""
    gw = launch(fake, tmp_path, upstream_yaml=", apis: [chat], model_map: {'claude-*': gpt-4o}")
    upstream.output_limit = 16384
    upstream.refused_params = frozenset({"reasoning_effort"})
    upstream.refusal_style = style
    try:
        upstream.script(_answer_turn("Hello from a smaller model."), _answer_turn("Hello again."))
        first = run_claude(claude_bin, gw, workdir, "say hello", timeout=90)
        assert first.rc == 0, (first.out, first.err)
        assert "Hello from a smaller model." in first.out
        second = run_claude(claude_bin, gw, workdir, "say hello again", timeout=90)
        assert second.rc == 0, (second.out, second.err)
        assert "Hello again." in second.out
    finally:
        gw.stop()
    asked = [(req.json()["max_tokens"], "reasoning_effort" in req.json()) for req in upstream.chat_requests()]
    assert asked == [(128000, True), (128000, False), (16384, False), (16384, False)]


@dataclass
class ChatAgent:
    """A chat model for a headless Claude Code run: `rounds` Read calls (which Claude Code
    really executes), then an answer; a request over `window` (the fake's count of the chat
    body) gets the OpenAI-style overflow 400 a chat server sends."""

    workdir: Path
    rounds: int
    window: int
    asked: int = 0
    overflowed: list[int] = field(default_factory=list)

    def __call__(self, payload: dict[str, Any]) -> Any:
        used = tokens(payload)
        if used > self.window:
            self.overflowed.append(used)
            return overflow_error(self.window, used, None)
        if self.asked < self.rounds and not self.overflowed:
            self.asked += 1
            path = str(self.workdir / f"module_{self.asked}.py")
            return _tool_call_turn(f"call_read_{self.asked}", "", "Read", {"file_path": path})
        return _answer_turn("Hello from the chat model.")


def test_an_overflow_on_a_chat_upstream_is_rescued_once_and_the_tool_pairs_stay_valid(
    claude_bin: Path, chat_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    """One Read of a big file overflows the chat model's window; the gateway compresses the
    Messages conversation once, translates it again and the run ends with the answer."""
    lines = (f"value_1_{n} = compute(1, {n})  # line {n} of module 1\n" for n in range(1500))
    (workdir / "module_1.py").write_text("".join(lines))
    # The window holds 2.1.332's ~14k-token first request (2.1.197's was ~37k), not the read next.
    agent = ChatAgent(workdir, rounds=1, window=30_000)
    upstream.script(*[agent] * 20)
    r = run_claude(claude_bin, chat_gateway, workdir, "Read module_1.py and summarise it.", timeout=90)
    sizes = [tokens(req.json()) for req in upstream.chat_requests()]
    assert agent.overflowed, f"the scenario did not overflow: {sizes}"
    assert r.rc == 0 and "Hello from the chat model." in r.out, (r.rc, r.out, r.err)
    sent = [req.json() for req in upstream.chat_requests()]
    k = next(i for i, body in enumerate(sent) if tokens(body) > agent.window)
    rescued = sent[k + 1]
    assert tokens(rescued) <= agent.window and len(sent) == k + 2  # one rescue, which answered
    calls = {c["id"] for m in rescued["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in rescued["messages"] if m["role"] == "tool"}
    assert calls == results == {"call_read_1"}  # every tool call still answered, none orphaned
    assert rescued["messages"][0] == sent[k]["messages"][0] and rescued["tools"] == sent[k]["tools"]

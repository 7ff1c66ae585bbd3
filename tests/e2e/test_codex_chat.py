"""Codex CLI itself (`codex exec`) on a chat-completions-only upstream, through the gateway's
Responses → chat translation: a shell function-call loop, a namespaced tool, and a plain
answer. Codex refuses ``wire_api = "chat"``, so this is the only way it reaches such a server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.fake.messages import sign
from tests.e2e.conftest import RunningGateway, launch_cli
from tests.e2e.test_codex import codex  # noqa: F401  (the installed CLI, a fixture)
from tests.fakeupstream import (
    FakeUpstream,
    Stream,
    anthropic_head,
    anthropic_stream,
    anthropic_tail,
    chunk,
    sse,
    text_delta,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def chat_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexchat"), "",
                    upstream_yaml=", apis: [chat], model_map: {'gpt-*': qwen}")  # fmt: skip
    yield gw
    gw.stop()


def call(call_id: str, name: str, args: str, thinking: str = "") -> Stream:
    """A chat stream calling one tool, after some ``reasoning_content`` when ``thinking``."""
    think = [chunk({"role": "assistant", "content": None, "reasoning_content": thinking})] if thinking else []
    return Stream([
        *think,
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
        chunk({}, "tool_calls"),
    ])  # fmt: skip


def text(words: tuple[str, ...]) -> Stream:
    return Stream([chunk({"role": "assistant", "content": ""}), *[chunk({"content": w}) for w in words],
                   chunk({}, "stop")])  # fmt: skip


def run_codex(
    codex_bin: Path, gw: RunningGateway, tmp: Path, prompt: str, model: str = "gpt-5-codex", more: str = "",
    top: str = "",
) -> subprocess.CompletedProcess[str]:
    """``more``: further config.toml tables (an MCP server); ``top``: further top-level keys;
    ``model`` "": none named (Codex's default)."""
    home = tmp / "home"
    codex_home = home / "codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    named = f'model = "{model}"\n' if model else ""
    (codex_home / "config.toml").write_text(
        f'{named}model_provider = "gw"\napproval_policy = "never"\nsandbox_mode = "read-only"\n{top}'
        f'\n[model_providers.gw]\nname = "gw"\nbase_url = "{gw.base}/v1"\nwire_api = "responses"\n'
        'env_key = "GW_KEY"\nrequires_openai_auth = false\nrequest_max_retries = 0\nstream_max_retries = 0\n' + more
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "GW_KEY": "dummy"}
    return subprocess.run([str(codex_bin), "exec", "--skip-git-repo-check", prompt], env=env, cwd=home,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)  # fmt: skip


def sent(up: FakeUpstream) -> list[dict[str, Any]]:
    assert all(r.path == "/v1/chat/completions" for r in up.requests), [r.path for r in up.requests]
    return [r.json() for r in up.requests]


def test_codex_runs_a_shell_call_loop_on_a_chat_upstream(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    upstream.script(
        call(
            "call_sh1",
            "exec_command",
            '{"cmd":"echo hi-from-shell"}',
            thinking="The user wants a shell command.",
        ),
        text(("It printed ", "hi.")),
    )
    r = run_codex(codex, chat_gateway, tmp_path, "Run echo hi-from-shell and tell me what it printed")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "It printed hi."
    first, second = sent(upstream)
    assert first["model"] == "qwen" and first["messages"][0]["role"] == "system"
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_sh1" and assistant["content"] == ""
    assert tool == {**tool, "role": "tool", "tool_call_id": "call_sh1"} and "hi-from-shell" in tool["content"]
    assert "Process exited with code 0" in tool["content"]  # Codex really ran it
    # The reasoning item did not trouble Codex; Codex replays it and it goes back as that turn's
    # reasoning (issue #36: DeepSeek's thinking mode requires it on a tool-call turn), never as text.
    assert assistant.get("reasoning_content") == "The user wants a shell command."
    assert "The user wants" not in str([{k: v for k, v in m.items() if k != "reasoning_content"}
                                        for m in second["messages"]])


def test_codex_dispatches_a_namespaced_call_by_name_and_namespace(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """The chat model calls ``multi_agent_v1__close_agent``; Codex must get ``close_agent`` in
    namespace ``multi_agent_v1`` (a flat name is answered "unsupported call")."""
    upstream.script(
        call("call_ns1", "multi_agent_v1__close_agent", '{"target":"nonexistent"}'), text(("Done.",))
    )
    r = run_codex(codex, chat_gateway, tmp_path, "Close the agent named nonexistent")
    assert r.returncode == 0, r.stderr
    _, second = sent(upstream)
    tool = second["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_ns1"
    assert "unsupported call" not in tool["content"] and "nonexistent" in tool["content"]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"


def test_codex_on_its_default_model_gets_its_tools_on_a_chat_upstream(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """No model in config.toml: Codex's default (gpt-6.1-sol in 0.169, gpt-6.2-sol in 0.171)
    sends the responses-lite shape, its tools in an ``additional_tools`` input item
    (corpus codex-0.171-lite-first.json). Every turn was refused 400 untranslatable. The chat
    model gets those tools, calls the custom ``exec`` in namespace ``functions``, and Codex runs it."""
    script = 'const r = await tools.exec_command({cmd: "echo hi-from-lite"}); text(JSON.stringify(r));'
    upstream.script(call("call_lite1", "functions__exec", json.dumps({"input": script})), text(("It printed hi.",)))
    r = run_codex(codex, chat_gateway, tmp_path, "Run echo hi-from-lite and tell me what it printed", model="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "It printed hi."
    first, second = sent(upstream)
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"functions__exec", "clock__sleep", "collaboration__spawn_agent"} <= offered, offered
    assert not any("additional_tools" in str(m.get("content")) for m in first["messages"])
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "functions__exec"
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_lite1"
    assert "hi-from-lite" in tool["content"] and "Script completed" in tool["content"]  # Codex ran it


def test_a_length_cut_answer_reaches_codex_as_an_incomplete_response(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """finish_reason length → response.incomplete (max_output_tokens), as the Responses API
    does; Codex 0.169 reports it and does not reconnect."""
    upstream.script(
        Stream([chunk({"role": "assistant", "content": "A long"}), chunk({"content": " story"}, "length")])
    )
    r = run_codex(codex, chat_gateway, tmp_path, "Tell a story")
    assert r.returncode != 0
    assert "Incomplete response returned, reason: max_output_tokens" in r.stderr
    assert len(upstream.requests) == 1


def test_codex_compacts_its_own_history_on_a_chat_upstream(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex compacts before a turn when the usage it was told nears the window; on a
    non-OpenAI provider that is a plain request with a compaction prompt, and the summary comes
    back as a user message: both pass through the translation like any turn."""
    near_full = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen", "choices": [],
                 "usage": {"prompt_tokens": 989990, "completion_tokens": 10, "total_tokens": 990000}}  # fmt: skip
    answer = Stream([chunk({"role": "assistant", "content": "Hi there."}), chunk({}, "stop"), near_full])
    upstream.script(
        answer, Stream([chunk({"role": "assistant", "content": "SUMMARY-1"}), chunk({}, "stop")]), answer
    )
    assert run_codex(codex, chat_gateway, tmp_path, "say hi").returncode == 0
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home / "codex"), "GW_KEY": "dummy"}
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "resume", "--last", "again"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)  # fmt: skip
    assert r.returncode == 0, r.stderr
    _, compaction, turn = sent(upstream)
    assert "COMPACTION" in compaction["messages"][-1]["content"]
    assert any("SUMMARY-1" in m["content"] for m in turn["messages"] if m["role"] == "user")
    assert turn["messages"][-1] == {"role": "user", "content": "again"}


@pytest.fixture(scope="module")
def rules_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    rules = "tool_outputs:\n  upfront: true\n  rules:\n    - {tool: exec_command, oversized: exclude, max_tokens: 500}\n"
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexrules"), rules,
                    upstream_yaml=", apis: [chat], model_map: {'gpt-*': qwen}")  # fmt: skip
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def messages_gateway(
    fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("codexmsg"), "",
                    upstream_yaml=", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-5}")  # fmt: skip
    yield gw
    gw.stop()


def test_codex_gets_the_structured_result_for_an_oversized_shell_output_and_narrows(
    codex: Path,  # noqa: F811
    rules_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex's exec_command output (a Responses function_call_output) above the rule's 500
    tokens reaches the model as the structured result; the scripted model narrows only when
    it sees it, and the narrower command's output passes whole."""
    seen: list[str] = []

    def model(payload: dict[str, Any]) -> Stream:
        tools = [m for m in payload["messages"] if m["role"] == "tool"]
        if not tools:
            seen.append("none")
            return call("call_big", "exec_command", '{"cmd":"seq 1 20000"}')
        if '"status": "oversized"' in tools[-1]["content"]:
            seen.append("oversized")
            return call("call_small", "exec_command", '{"cmd":"seq 1 5"}')
        seen.append("narrow")
        return text(("Done.",))

    upstream.script(*[model] * 5)
    r = run_codex(codex, rules_gateway, tmp_path, "Count to twenty thousand with seq")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Done." and seen == ["none", "oversized", "narrow"]
    _, second, third = sent(upstream)
    [big] = [m for m in second["messages"] if m["role"] == "tool"]
    result = json.loads(big["content"])
    assert big["tool_call_id"] == "call_big" and result["tool"] == "exec_command" and result["limit_tokens"] == 500
    small = [m for m in third["messages"] if m["role"] == "tool"][-1]
    assert small["tool_call_id"] == "call_small" and "Process exited with code 0" in small["content"]
    for body in (second, third):
        assert "19999" not in json.dumps(body)  # nothing of the big output reached the upstream


def test_codex_on_a_messages_only_upstream_through_chat(
    codex: Path,  # noqa: F811
    messages_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex on an Anthropic-only upstream: Responses → chat → Messages, composed."""
    r = run_codex(codex, messages_gateway, tmp_path, "say hi")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Hello from fake."
    [sent] = upstream.requests
    assert sent.path == "/v1/messages" and sent.json()["model"] == "claude-sonnet-4-5"


def messages_call(tool_id: str, name: str, args: str) -> Stream:
    """An Anthropic stream calling one tool, its input in one fragment."""
    head = anthropic_head()[0]  # message_start
    return Stream([
        head,
        sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": tool_id, "name": name, "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": args}}),
        *anthropic_tail(stop_reason="tool_use"),
    ])  # fmt: skip


def thinking_call(thought: str, tool_id: str, name: str, args: str) -> Stream:
    """An Anthropic stream that thinks (signed by the fake) then calls one tool."""
    head = anthropic_head()[0]  # message_start
    return Stream([
        head,
        sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "thinking", "thinking": "", "signature": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "thinking_delta", "thinking": thought}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "signature_delta", "signature": sign(thought)}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": tool_id, "name": name, "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
            "type": "input_json_delta", "partial_json": args}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
        *anthropic_tail(stop_reason="tool_use")[1:],
    ])  # fmt: skip


def test_codex_on_its_default_model_runs_its_exec_tool_on_a_messages_upstream(
    codex: Path,  # noqa: F811
    messages_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex's default model (responses-lite: its tools in an ``additional_tools`` item) on an
    Anthropic-only upstream, whose fake refuses what Anthropic refuses: Claude gets the tools,
    calls ``functions__exec``, and Codex runs it as its custom ``exec`` in ``functions``."""
    script = 'const r = await tools.exec_command({cmd: "echo hi-from-claude"}); text(JSON.stringify(r));'
    upstream.script(messages_call("toolu_01L", "functions__exec", json.dumps({"input": script})),
                    Stream(anthropic_stream(words=("It printed hi.",))))  # fmt: skip
    r = run_codex(codex, messages_gateway, tmp_path, "Run echo hi-from-claude", model="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "It printed hi."
    first, second = [q.json() for q in upstream.requests]
    assert "functions__exec" in {t["name"] for t in first["tools"]}
    [result] = [b for m in second["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip
    assert result["tool_use_id"] == "toolu_01L" and "hi-from-claude" in json.dumps(result["content"])


def test_codexs_notify_calls_reach_claude_as_one_result_of_their_script(
    codex: Path,  # noqa: F811
    messages_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex's code mode sends a script's output and each ``notify()`` it made as outputs of one
    call; carried apart they were three results for one call, which Anthropic (and the fake)
    refuse ("each tool_use must have a single result"), and Codex resent them every turn after
    (audit). They reach Claude as one result, every notification in it, and the turn ends."""
    script = ('notify("step one done"); notify("step two done"); '
              'const r = await tools.exec_command({cmd: "echo hi-from-claude"}); text(JSON.stringify(r));')  # fmt: skip
    upstream.script(messages_call("toolu_01N", "functions__exec", json.dumps({"input": script})),
                    Stream(anthropic_stream(words=("Done, in two steps.",))))  # fmt: skip
    r = run_codex(codex, messages_gateway, tmp_path, "Run echo hi-from-claude, notifying each step", model="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Done, in two steps."
    first, second = [q.json() for q in upstream.requests]
    [result] = [b for m in second["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip
    said = json.dumps(result["content"])
    assert result["tool_use_id"] == "toolu_01N"
    assert all(t in said for t in ("hi-from-claude", "step one done", "step two done")), said


def test_codex_keeps_claude_thinking_on_after_a_tool_call(
    codex: Path,  # noqa: F811
    messages_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """With ``model_reasoning_effort`` set, the request after a tool call keeps thinking on:
    Codex sends the reasoning item back with the signed thinking sealed in its
    ``encrypted_content``, and the turn that called the tool starts with that thinking block,
    as Anthropic requires (the fake refuses it otherwise, and an altered signature)."""
    thought = "The user wants echo hi run: call exec_command."
    upstream.script(thinking_call(thought, "toolu_01T", "exec_command", '{"cmd": "echo hi"}'),
                    Stream(anthropic_stream(words=("It printed hi.",))))  # fmt: skip
    r = run_codex(codex, messages_gateway, tmp_path, "Run echo hi", top='model_reasoning_effort = "high"\n')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "It printed hi."
    first, second = [q.json() for q in upstream.requests]
    assert first["thinking"]["type"] in ("enabled", "adaptive")
    assert second["thinking"]["type"] in ("enabled", "adaptive")
    [turn] = [m for m in second["messages"] if m["role"] == "assistant"]
    assert turn["content"][0] == {"type": "thinking", "thinking": thought, "signature": sign(thought)}
    assert turn["content"][-1]["type"] == "tool_use"


def test_codex_compacts_a_session_that_ran_a_tool_on_a_messages_upstream(
    codex: Path,  # noqa: F811
    messages_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """Codex's compaction request replays the session's tool rounds with ``tools: []``, which
    Anthropic refuses ("Requests which include `tool_use` or `tool_result` blocks must define
    tools.", and the fake with it): Codex then ended in "Failed to run pre-sampling compact"."""
    near_full = [*anthropic_head(input_tokens=989990), text_delta("It printed hi."), *anthropic_tail()]
    upstream.script(
        messages_call("toolu_01A", "exec_command", '{"cmd": "echo hi"}'),
        Stream(near_full),
        Stream(anthropic_stream(words=("SUMMARY-1",))),
        Stream(anthropic_stream(words=("Again.",))),
    )
    assert run_codex(codex, messages_gateway, tmp_path, "Run echo hi").returncode == 0
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home / "codex"), "GW_KEY": "dummy"}
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "resume", "--last", "again"], env=env, cwd=home,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Again."
    _, _, compaction, turn = [q.json() for q in upstream.requests]
    assert "COMPACTION" in json.dumps(compaction["messages"][-1])
    assert [t["name"] for t in compaction["tools"]] == ["exec_command"]
    assert compaction["tool_choice"] == {"type": "none"}
    assert "SUMMARY-1" in json.dumps(turn["messages"])


def test_codex_finds_an_mcp_tool_with_its_client_tool_search_on_a_chat_upstream(
    codex: Path,  # noqa: F811
    chat_gateway: RunningGateway,
    upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """On a model slug it knows (gpt-5.5) Codex defers its MCP tools behind its client-executed
    ``tool_search``: the chat model searches, Codex runs the search, and the tool it loaded is
    called by its namespace and name (it was dropped as a hosted tool: no MCP tool was
    reachable)."""
    mcp = tmp_path / "mcp.py"
    mcp.write_text(MCP_SERVER)
    upstream.script(
        call("call_ts1", "tool_search", '{"query": "support ticket"}'),
        call("call_lk1", "mcp__demo__lookup_ticket", '{"id": "42"}'),
        text(("Ticket 42 is open.",)),
    )
    r = run_codex(codex, chat_gateway, tmp_path, "Look up support ticket 42", model="gpt-5.5",
                  more=f'\n[mcp_servers.demo]\ncommand = "{sys.executable}"\nargs = ["{mcp}"]\n'
                  'default_tools_approval_mode = "approve"\n')  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Ticket 42 is open."
    first, second, third = sent(upstream)
    assert "tool_search" in [t["function"]["name"] for t in first["tools"]]
    found = second["messages"][-1]
    assert found["role"] == "tool" and found["tool_call_id"] == "call_ts1"
    assert json.loads(found["content"])["loaded_tools"][0]["name"] == "mcp__demo__lookup_ticket"
    assert "mcp__demo__lookup_ticket" in [t["function"]["name"] for t in second["tools"]]
    answered = third["messages"][-1]
    assert answered["tool_call_id"] == "call_lk1" and "ticket 42 is OPEN" in answered["content"]


# A stdio MCP server with one tool that answers "ticket <id> is OPEN".
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
        result = {"content": [{"type": "text", "text": "ticket " + m["params"]["arguments"]["id"] + " is OPEN"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"""

"""The fake's Messages endpoint refuses what Anthropic refuses, in Anthropic's words
(gateway/fake/messages_rules.py), and takes what Anthropic takes."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.fake.messages_rules import refusal

PATH = "/v1/messages"
BETA = {"anthropic-beta": "claude-code-20250219,mid-conversation-system-2026-04-07"}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def call(i: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": i, "name": "Bash", "input": {"command": "ls"}}


def result(i: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": i, "content": "ok"}


def refused(messages: list[dict[str, Any]], headers: dict[str, str] | None = None, **payload: Any) -> str | None:
    reply = refusal(PATH, {"model": "claude-x", "max_tokens": 10, "messages": messages, **payload}, headers or {})
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
    return str(reply.body["error"]["message"])


@pytest.mark.parametrize(("messages", "words"), [
    ([], "messages: at least one message is required"),
    ([user(text("hi")), {"role": "system", "content": "x"}], "messages.1.role: Input should be 'user' or 'assistant'"),
    ([user(text(""))], "messages: text content blocks must be non-empty"),
    ([{"role": "user", "content": ""}], "messages: text content blocks must be non-empty"),
    ([user(text("hi")), assistant(call("toolu_1")), user(text("go on"))],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"),
    ([user(text("hi")), assistant(call("toolu_1"), call("toolu_2")), user(result("toolu_1"))],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2"),
    ([user(text("hi")), assistant(text("ok")), user(result("toolu_9"))],
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each `tool_result` "
     "block must have a corresponding `tool_use` block in the previous message."),
])  # fmt: skip
def test_what_anthropic_refuses(messages: list[dict[str, Any]], words: str) -> None:
    assert refused(messages) == words


def test_max_tokens_is_required() -> None:
    reply = refusal(PATH, {"model": "claude-x", "messages": [user(text("hi"))]}, {})
    assert reply is not None and reply.body["error"]["message"] == "max_tokens: Field required"


@pytest.mark.parametrize("messages", [
    [user(text("hi"))],
    [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1"), text("and then"))],
    [user(text("hi")), assistant(text("a")), assistant(text("b"))],  # two assistant turns: accepted (measured)
    [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1")),
     assistant(call("toolu_1")), user(result("toolu_1"))],  # an id used twice: accepted (measured)
])  # fmt: skip
def test_what_anthropic_takes(messages: list[dict[str, Any]]) -> None:
    assert refused(messages) is None


def test_claude_codes_system_turns_with_its_beta() -> None:
    # Claude Code names the beta, then sends system turns between the others: a tool call's
    # result is looked for past them.
    convo = [user(text("hi")), assistant(call("toolu_1")), {"role": "system", "content": "<reminder>"},
             user(result("toolu_1"))]  # fmt: skip
    assert refused(convo, BETA) is None
    assert refused(convo) == "messages.2.role: Input should be 'user' or 'assistant'"


def test_other_paths_are_not_judged_here() -> None:
    assert refusal("/v1/messages/count_tokens", {"messages": []}, {}) is None
    assert refusal("/v1/chat/completions", {"messages": []}, {}) is None

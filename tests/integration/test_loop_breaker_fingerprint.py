"""The loop breaker fingerprints a failure when it is remembered, after every stage has built
on the request (tool outputs capped, a stream asked for its usage, the request translated,
an overflow compressed), and a repeat when it arrives, before any of them: the two match only
if no stage changed the admitted request in place. Each request here is one those stages do
change (the first answer's headers say so), and its repeat must be answered from memory."""

from __future__ import annotations

from typing import Any

import pytest

from tests.anthropic_convo import messages_conversation
from tests.convo import agent_conversation
from tests.fakeupstream import Reply, overflow_error
from tests.responses_convo import responses_conversation

BAD = Reply(400, {"error": {"message": "Invalid 'tools[0]'", "type": "invalid_request_error",
                            "code": "invalid_value"}})
LB_CAP = "loop_breaker: {enabled: true}\ncompression: {max_tool_output_tokens: 200}\n"
CHAT_ONLY = ", apis: [chat], model_map: {'*': qwen}"


async def _twice(gw: Any, api: str, payload: dict[str, Any]) -> tuple[Any, Any]:
    send = getattr(gw, api)
    first = await send(payload)
    calls = len(gw.fake.requests)
    again = await send(payload)
    assert len(gw.fake.requests) == calls, "the repeat reached the upstream: its fingerprint differed"
    assert first[0] == again[0] >= 400 and again[2] == first[2]
    assert again[1]["x-llm-from-memory"] == "1" and again[1]["x-llm-attempts"] == "0"
    return first[1], again[1]


@pytest.mark.parametrize("api, upstream_yaml, payload", [
    ("chat", "", {"model": "gpt-4o-mini", "stream": True,
                  "messages": agent_conversation(rounds=2, output_bytes=20_000)}),
    ("messages", "", {"model": "claude-x", "max_tokens": 100, "stream": True,
                      "messages": messages_conversation(rounds=2, output_bytes=20_000)}),
    ("messages", CHAT_ONLY, {"model": "claude-x", "max_tokens": 100, "stream": True,
                             "messages": messages_conversation(rounds=2, output_bytes=20_000)}),
    ("responses", CHAT_ONLY, {"model": "gpt-5-codex", "stream": True,
                              "input": responses_conversation(rounds=2, output_bytes=20_000)}),
    ("chat", ", apis: [messages]", {"model": "gpt-4o-mini",
                                    "messages": agent_conversation(rounds=2, output_bytes=20_000)}),
], ids=["chat-stream-usage", "messages", "messages-on-chat", "responses-on-chat", "chat-on-messages"])
async def test_a_failed_request_the_stages_changed_is_recognised_when_repeated(
    make_gateway, api: str, upstream_yaml: str, payload: dict[str, Any]
) -> None:
    gw = await make_gateway(LB_CAP, upstream_yaml)
    gw.fake.script(BAD)
    first, _ = await _twice(gw, api, payload)
    assert int(first["x-llm-tool-outputs-capped"]) >= 1  # the stages did build on this request


@pytest.mark.parametrize("api, upstream_yaml, payload", [
    ("chat", "", {"model": "gpt-4o-mini", "max_tokens": 1000, "messages": agent_conversation(rounds=40)}),
    ("messages", CHAT_ONLY, {"model": "claude-x", "max_tokens": 1000, "messages": messages_conversation(rounds=40)}),
    ("responses", CHAT_ONLY, {"model": "gpt-5-codex", "max_output_tokens": 1000,
                              "input": responses_conversation(rounds=40)}),
], ids=["chat", "messages-on-chat", "responses-on-chat"])
async def test_an_overflow_still_too_long_after_compression_is_recognised_when_repeated(
    make_gateway, api: str, upstream_yaml: str, payload: dict[str, Any]
) -> None:
    gw = await make_gateway("loop_breaker: {enabled: true}\n", upstream_yaml)
    # Too long, and still too long once compressed.
    gw.fake.script(overflow_error(16000, 40000, None), overflow_error(16000, 17000, None))
    first, _ = await _twice(gw, api, payload)
    assert first["x-llm-error-type"] == "context_overflow" and first["x-llm-compressed"] == "true"


async def test_a_resend_that_differs_in_its_client_metadata_alone_is_recognised(make_gateway) -> None:
    """Codex stamps every WebSocket resend of a turn with the time it sent it
    (`client_metadata["x-codex-ws-stream-request-start-ms"]`): no resend matched the failure
    remembered, and a permanent 429 reached the provider 33 times a turn, 9 over HTTPS (audit)."""
    gw = await make_gateway("loop_breaker: {enabled: true}\n", "")
    gw.fake.script(BAD)
    payload = {"model": "gpt-5-codex", "stream": True, "input": responses_conversation(rounds=1),
               "client_metadata": {"x-codex-ws-stream-request-start-ms": "1764540801182"}}
    first = await gw.responses(payload)
    calls = len(gw.fake.requests)
    again = await gw.responses({**payload, "client_metadata": {"x-codex-ws-stream-request-start-ms": "1764540805219"}})
    assert len(gw.fake.requests) == calls, "the resend reached the upstream"
    assert first[0] == again[0] >= 400 and again[1]["x-llm-from-memory"] == "1"

"""Every guarantee holds on translated traffic, with the real translators: one rescue of an
overflow (tool pairs valid in the client's shape and in the upstream's), continuation of a cut
stream spliced before it is translated, the loop breaker, the retry count of a permanent
outage, and a pair composed through chat (Responses on an Anthropic upstream)."""

from __future__ import annotations

import json
from typing import Any

from tests.anthropic_convo import SYSTEM, assert_valid_messages, messages_conversation
from tests.convo import agent_conversation, assert_valid_conversation
from tests.fakeupstream import Reply, Stream, chunk, named_events

CHAT_ONLY = ", apis: [chat], model_map: {'*': qwen}"


def _text(body: bytes) -> str:
    return "".join(d["delta"].get("text", "") for n, d in named_events(body) if n == "content_block_delta")


async def test_an_overflowing_claude_code_conversation_on_a_chat_upstream_is_rescued_once(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY + ", context_window: 6000")
    gw.fake.context_limit = 6000
    req = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": SYSTEM,
           "messages": messages_conversation(rounds=20)}
    status, headers, body = await gw.messages(req)
    doc = json.loads(body)
    assert status == 200 and doc["type"] == "message" and doc["model"] == "claude-sonnet-4-5", body[:300]
    assert headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "2"
    first, second = [r.json() for r in gw.fake.chat_requests()]
    assert len(json.dumps(second)) < len(json.dumps(first))
    assert_valid_conversation(second["messages"])  # every tool call answered, in chat's shape
    assert second["messages"][-1] == first["messages"][-1]  # the newest turn kept as it was


async def test_an_overflowing_codex_conversation_on_a_chat_upstream_is_rescued_once(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY + ", context_window: 6000")
    gw.fake.context_limit = 6000
    items: list[dict[str, Any]] = [{"type": "message", "role": "developer", "content": "You are Codex."},
                                   {"type": "message", "role": "user", "content": "Fix the bug."}]
    for i in range(20):
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "exec_command",
                      "arguments": json.dumps({"cmd": f"cat f{i}.py"})})
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": "x = 1\n" * 300})
    items.append({"type": "message", "role": "user", "content": "Now fix it."})
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": items})
    assert status == 200 and json.loads(body)["status"] == "completed", body[:300]
    assert headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "2"
    second = gw.fake.chat_requests()[-1].json()
    assert_valid_conversation(second["messages"])
    assert second["messages"][0]["role"] == "system" and second["messages"][-1]["content"] == "Now fix it."


async def test_an_overflowing_chat_conversation_on_an_anthropic_upstream_is_rescued_once(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'*': claude-sonnet-4-5}, context_window: 6000")
    gw.fake.context_limit = 6000
    status, headers, body = await gw.chat({"model": "gpt-4o", "max_tokens": 512, "messages": agent_conversation(20)})
    assert status == 200 and json.loads(body)["object"] == "chat.completion", body[:300]
    assert headers["x-llm-compressed"] == "true"
    second = gw.fake.messages_requests()[-1].json()
    assert_valid_messages(second["messages"])  # tool_use / tool_result pairs intact on the wire


async def test_a_cut_chat_stream_under_a_messages_client_is_continued_then_translated(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY + ", continuation: prefix")
    gw.fake.script(
        Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Once upon"}),
                chunk({"content": " a"})], then="drop"),
        Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " time."}), chunk({}, "stop")]),
    )
    status, _, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
                                         "messages": [{"role": "user", "content": "a story"}]})
    names = [n for n, _ in named_events(body)]
    assert status == 200 and names.count("message_start") == 1 and names[-1] == "message_stop"
    assert "error" not in names and _text(body) == "Once upon a time."
    second = gw.fake.chat_requests()[-1].json()
    assert second["messages"][-1] == {"role": "assistant", "content": "Once upon a", "prefix": True}


async def test_a_translated_request_that_failed_is_answered_from_memory_when_repeated(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY, extra_yaml="loop_breaker: {enabled: true}\n")
    gw.fake.script(Reply(400, {"error": {"message": "bad tool schema", "type": "invalid_request_error"}}))
    req = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    first = await gw.messages(req)
    again = await gw.messages(req)
    assert first[0] == again[0] == 400 and json.loads(again[2])["type"] == "error"
    assert again[1]["x-llm-from-memory"] == "1" and again[1]["x-llm-attempts"] == "0"
    assert len(gw.fake.requests) == 1


async def test_a_permanent_outage_costs_the_gateways_own_attempts_translated_or_not(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(*[Reply(503, {"error": {"message": "down", "type": "server_error"}})] * 10)
    status, headers, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64,
                                               "messages": [{"role": "user", "content": "hi"}]})
    assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"
    assert headers["x-llm-attempts"] == "6" and len(gw.fake.requests) == 6  # 1 + provider_unavailable.max_retries


async def test_codex_on_an_anthropic_upstream_is_composed_through_chat(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'*': claude-sonnet-4-5}")
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": "hi", "max_output_tokens": 100})
    doc = json.loads(body)
    assert status == 200 and headers["x-llm-translated"] == "responses->messages"
    assert doc["object"] == "response" and doc["model"] == "gpt-5-codex"
    assert doc["output"][-1]["content"][0]["text"] == "Hello from the fake upstream."
    [sent] = gw.fake.messages_requests()
    assert sent.json()["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    status, _, body = await gw.responses({"model": "gpt-5-codex", "input": "hi", "stream": True})
    names = [n for n, _ in named_events(body)]
    assert status == 200 and names[0] == "response.created" and names[-1] == "response.completed"
    seqs = [d["sequence_number"] for _, d in named_events(body)]
    assert seqs == list(range(len(seqs)))


async def test_claude_codes_64000_token_budget_on_a_small_vllm_style_server_is_lowered_once(make_gateway) -> None:
    # The window unknown: the server's refusal ("(P in the messages, C in the completion)")
    # gets the budget lowered by the one rescue.
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.context_limit = 8000  # answers OpenAI/vLLM's "(P in the messages, C in the completion)" overflow
    req = {"model": "claude-sonnet-4-5", "max_tokens": 64000, "system": SYSTEM,
           "messages": [{"role": "user", "content": "hi"}]}
    status, headers, body = await gw.messages(req)
    assert status == 200 and json.loads(body)["type"] == "message", body[:300]
    first, second = [r.json() for r in gw.fake.chat_requests()]
    assert first["max_tokens"] == 64000 and second["max_tokens"] < 8000
    assert second["messages"] == first["messages"]  # only the budget changed
    assert headers["x-llm-compressed"] == "true"


async def test_with_the_window_configured_that_budget_is_lowered_before_the_first_send(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY + ", context_window: 8000")
    gw.fake.context_limit = 8000
    req = {"model": "claude-sonnet-4-5", "max_tokens": 64000, "system": SYSTEM,
           "messages": [{"role": "user", "content": "hi"}]}
    status, headers, body = await gw.messages(req)
    assert status == 200 and json.loads(body)["type"] == "message", body[:300]
    [sent] = [r.json() for r in gw.fake.chat_requests()]
    assert sent["max_tokens"] < 8000 and headers["x-llm-output-capped"] == str(sent["max_tokens"])
    assert headers["x-llm-attempts"] == "1" and "x-llm-compressed" not in headers

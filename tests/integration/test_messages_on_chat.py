"""The anthropic SDK through the gateway to a chat-completions-only upstream (the fake), with
the real Messages → chat translator: what the upstream is asked, and what the SDK makes of
the answer, streamed and buffered, including a stream that breaks."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from tests.fakeupstream import Reply, Stream
from tests.unit.translate.messages_helpers import corpus_answer, wire_stream

UPSTREAM = ", apis: [chat], model_map: {'claude-*': qwen3-coder}"
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def _client(gw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="dummy", base_url=gw.base, max_retries=0)


def _raw_events(name: str) -> list[bytes]:
    wire = wire_stream(corpus_answer(name))
    return [e + b"\n\n" for e in wire.split(b"\n\n") if e and not e.startswith(b"data: [DONE]")]


async def test_sdk_stream_with_parallel_tool_calls(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Stream(_raw_events("openai-gpt-4o-parallel-tools.stream.json")))
    async with _client(gw) as client, client.messages.stream(
        model="claude-opus-4-8", max_tokens=512, tools=[WEATHER], tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather in Edinburgh, and AAPL?"}],
    ) as stream:  # fmt: skip
        message = await stream.get_final_message()
    assert message.model == "claude-opus-4-8" and message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]  # fmt: skip
    assert (message.usage.input_tokens, message.usage.output_tokens) == (149, 60)
    [sent] = gw.fake.chat_requests()
    body = sent.json()
    assert body["model"] == "qwen3-coder" and body["tool_choice"] == "required" and body["stream"] is True
    assert body["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]


async def test_sdk_buffered_answer_with_reasoning_and_a_tool_result_turn(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Reply(200, corpus_answer("deepseek-reasoner-tool-call.json")["body"]))
    async with _client(gw) as client:
        message = await client.messages.create(
            model="claude-opus-4-8", max_tokens=512, tools=[WEATHER],
            messages=[
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                   "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "4 C"}]},
            ],
        )  # fmt: skip
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[1].input == {"location": "San Francisco"} and message.stop_reason == "tool_use"
    assert message.usage.cache_read_input_tokens == 320
    [sent] = gw.fake.chat_requests()
    roles = [(m["role"], m.get("tool_call_id")) for m in sent.json()["messages"]]
    assert roles == [("user", None), ("assistant", None), ("tool", "toolu_1")]


async def test_a_stream_cut_mid_answer_ends_in_the_typed_error_the_sdk_raises(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM, extra_yaml="retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.01, max_delay_s: 0.01}}\n")
    events = _raw_events("openai-gpt-4o-text.stream.json")
    gw.fake.script(Stream(events[:10], then="drop"))
    seen: list[str] = []
    async with _client(gw) as client:
        with pytest.raises(anthropic.APIStatusError):
            async with client.messages.stream(model="claude-opus-4-8", max_tokens=64,
                                              messages=[{"role": "user", "content": "hi"}]) as stream:  # fmt: skip
                async for event in stream:
                    seen.append(event.type)
    assert seen[0] == "message_start" and "text" in seen  # shown before the cut, then the error


async def test_a_hosted_tool_is_refused_before_reaching_the_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    async with _client(gw) as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(
                model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "search"}],
                tools=[{"type": "web_search_20250305", "name": "web_search"}],
            )  # fmt: skip
    assert "web_search" in json.dumps(info.value.body) and gw.fake.requests == []


async def test_a_field_of_the_wrong_json_type_is_a_400_in_anthropics_envelope_never_sent(make_gateway) -> None:
    """`tool_choice: {"type": [5]}` was a 500 internal_error (a crash in the translator)."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    status, _, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "tools": [WEATHER],
                                         "messages": [{"role": "user", "content": "hi"}],
                                         "tool_choice": {"type": [5]}})  # fmt: skip
    error = json.loads(body)["error"]
    assert status == 400 and error["type"] == "invalid_request_error" and error["code"] == "invalid_type"
    assert error["message"] == "tool_choice.type: Input should be a valid string"
    assert gw.fake.requests == []


async def test_kimis_tool_call_ids_survive_a_chain_that_goes_back_to_anthropic(make_gateway) -> None:
    """docs/translation/index.md's chain, Anthropic first and a chat server (Kimi K2 on vLLM) as
    its fallback: Kimi names its calls ``functions.Read:1``, which Claude Code got as sent, and
    the next turn Anthropic answered refused the conversation ("tool_use.id: String should match
    pattern '^[a-zA-Z0-9_-]+$'"), and every turn after it. Anthropic (the fake, which refuses
    what Anthropic refuses) now takes it, and Kimi gets its own ids back."""
    from tests.fakeupstream import FakeUpstream, anthropic_error

    anthropic_fake, kimi = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=anthropic_fake, upstreams=(
            f"  - {{name: anthropic, base_url: '{anthropic_fake.url}', apis: [messages], models: ['claude-*'], fallbacks: [local]}}\n"
            f"  - {{name: local, base_url: '{kimi.url}', apis: [chat], model_map: {{'*': kimi-k2}}}}\n"
        ), extra_yaml="retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.01, max_delay_s: 0.01}}\n")
        read = {"name": "Read", "description": "Read a file", "input_schema": {
            "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}
        turn: list[Any] = [{"role": "user", "content": "what is in kimi_gdn_linear_attn.py?"}]
        overloaded = anthropic_error(529, "overloaded_error", "Overloaded")
        anthropic_fake.script(overloaded)
        kimi.script(Stream(_raw_events("chat-kimi-k2-tool-call.stream.json")))
        async with _client(gw) as client:
            async with client.messages.stream(model="claude-opus-4-8", max_tokens=512, tools=[read],
                                              messages=turn) as stream:  # fmt: skip
                first = await stream.get_final_message()
            [call] = first.content
            assert call.type == "tool_use" and call.name == "Read"
            turn += [{"role": "assistant", "content": [c.model_dump(exclude_none=True) for c in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "1\t# SPDX"}]}]
            second = await client.messages.create(model="claude-opus-4-8", max_tokens=512, tools=[read], messages=turn)
            assert second.stop_reason == "end_turn"  # Anthropic took the conversation
            turn += [{"role": "assistant", "content": [c.model_dump(exclude_none=True) for c in second.content]},
                     {"role": "user", "content": "and then?"}]
            anthropic_fake.script(overloaded)
            await client.messages.create(model="claude-opus-4-8", max_tokens=512, tools=[read], messages=turn)
        sent = [m for m in kimi.chat_requests()[-1].json()["messages"] if m.get("tool_calls") or m["role"] == "tool"]
        assert [m["tool_calls"][0]["id"] if m.get("tool_calls") else m["tool_call_id"] for m in sent] == [
            "functions.Read:1", "functions.Read:1"]
        assert [r.path for r in anthropic_fake.requests] == ["/v1/messages"] * 3
    finally:
        await kimi.close()
        await anthropic_fake.close()

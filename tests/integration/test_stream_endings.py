"""A translated stream whose end marker comes in an event of its own, which the translation
turns into nothing visible: the stream is complete, and the client must see a normal end.

The shapes are the providers' own: a Gemini stream's last event may carry only
``finishReason`` and usage, with no parts (pydantic/pydantic-ai#2631: "Sending a 'STOP'
finish_reason for Gemini without the content having any parts at all is actually expected
behavior"; agentjido/req_llm#638, after a tool call: su-kaka/gcli2api#407), or an empty text
part with a ``thoughtSignature`` (Gemini 3, BerriAI/litellm#17403). The end was read only when
the translation wrote something for the read that carried it, so when that event arrived in a
read of its own the clean close looked like a cut: every such answer ended in an error
(measured with the openai and anthropic SDKs).
"""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import openai
import pytest

from tests.fakeupstream import Stream, anthropic_head, anthropic_tail, chunk, named_events, sse, text_delta

USAGE = {"promptTokenCount": 9, "candidatesTokenCount": 3, "totalTokenCount": 12}


def gemini_event(parts: list[dict[str, Any]] | None, finish: str | None = None, usage: bool = False) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", **({"parts": parts} if parts is not None else {})},
                                 "index": 0}  # fmt: skip
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], **({"usageMetadata": USAGE} if usage else {}), "modelVersion": "gemini-2.5-flash"}


TEXT = [gemini_event([{"text": "Hello"}]), gemini_event([{"text": " world."}])]
ENDINGS = {
    "finish only": gemini_event(None, "STOP", usage=True),
    "empty text with a signature": gemini_event([{"text": "", "thoughtSignature": "c2lnbmF0dXJl"}], "STOP", usage=True),
}
GEMINI = ", apis: [gemini], api_key: k, model_map: {'*': gemini-2.5-flash}"


def gemini_upstream(fake_url: str) -> str:
    return f"  - {{name: google, base_url: '{fake_url.removesuffix('/v1')}/v1beta'{GEMINI}}}\n"


async def test_a_chat_client_sees_a_gemini_stream_end_normally(make_gateway: Any) -> None:
    for name, ending in ENDINGS.items():
        gw = await make_gateway()
        gw = await make_gateway(upstreams=gemini_upstream(gw.fake.url), fake=gw.fake)
        gw.fake.script(Stream([*TEXT, ending], delay_s=0.02))  # each event a read of its own
        client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="dummy")
        try:
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
                stream_options={"include_usage": True})  # fmt: skip
            text, finishes, usage = "", [], None
            async for c in stream:
                for choice in c.choices:
                    text += choice.delta.content or ""
                    finishes.append(choice.finish_reason)
                usage = c.usage or usage
            assert text == "Hello world." and [f for f in finishes if f] == ["stop"], name
            assert usage is not None and usage.prompt_tokens == 9, name
        finally:
            await client.close()


async def test_a_tool_call_then_a_finish_of_its_own_reaches_a_messages_client_as_tool_use(make_gateway: Any) -> None:
    gw = await make_gateway()
    gw = await make_gateway(upstreams=gemini_upstream(gw.fake.url), fake=gw.fake)
    call = gemini_event([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}])
    gw.fake.script(Stream([call, gemini_event(None, "STOP", usage=True)], delay_s=0.02))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="dummy")
    try:
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=256, messages=[{"role": "user", "content": "weather?"}],
            tools=[{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        ) as stream:  # fmt: skip
            message = await stream.get_final_message()
        assert message.stop_reason == "tool_use"
        assert [(b.type, getattr(b, "input", None)) for b in message.content] == [("tool_use", {"city": "Paris"})]
    finally:
        await client.close()


async def test_a_chat_stream_closed_after_its_finish_without_done_ends_normally_for_a_messages_client(
    make_gateway: Any,
) -> None:
    """Servers that send no ``[DONE]`` (ikawrakow/ik_llama.cpp#467): the finish chunk and the
    usage chunk came, then a clean close."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    usage = {**chunk({}), "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hi"}), chunk({"content": " there"}),
                           chunk({}, "stop"), usage], then="eof", delay_s=0.02))  # fmt: skip
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="dummy")
    try:
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=256, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            message = await stream.get_final_message()
        assert message.stop_reason == "end_turn" and message.content[0].text == "Hi there"  # type: ignore[union-attr]
        assert message.usage.output_tokens == 2
    finally:
        await client.close()


@pytest.mark.parametrize("then", ["eof", "drop"])
async def test_a_messages_stream_ended_after_its_stop_reason_without_message_stop_ends_normally_for_a_chat_client(
    make_gateway: Any, then: str,
) -> None:
    """The message_delta with the stop_reason ends the answer (message_stop only follows, as
    [DONE] follows chat's finish_reason): a clean close or a reset after it left the openai SDK
    with finish_reason "error", code stream_broken, where docs/translation/chat_messages.md
    promised the finish chunk."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'*': claude-x}")
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hi"), text_delta(" there"), *anthropic_tail(2)[:2]],
                          then=then))  # fmt: skip
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="dummy", max_retries=0)
    try:
        stream = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True, stream_options={"include_usage": True})  # fmt: skip
        chunks = [c async for c in stream]
    finally:
        await client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_a_messages_stream_closed_before_its_stop_reason_is_still_broken(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'*': claude-x}")
    counts_only = sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": None},
                                        "usage": {"output_tokens": 1}})  # fmt: skip
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hi"), counts_only], then="eof"))
    status, _, body = await gw.chat({"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and b"[DONE]" not in body and b'"code":"stream_broken"' in body


@pytest.mark.parametrize("then", ["eof", "drop", "stall"])
@pytest.mark.stall_timeouts
async def test_a_messages_stream_ended_after_its_stop_reason_reaches_a_messages_client_with_its_message_stop(
    make_gateway: Any, caplog: pytest.LogCaptureFixture, then: str,
) -> None:
    """Passed through untranslated, a stream whose upstream closed, reset or stalled after the
    message_delta with the stop_reason reached the client without message_stop, and the
    TypeScript SDK's MessageStream (Claude Code's too) makes its final message at message_stop
    alone: finalMessage() rejected "stream ended without producing a Message with
    role=assistant" (measured with @anthropic-ai/sdk 1.14.0). The gateway writes the one it owed."""
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway()  # idle_s: 1
    cut = [*anthropic_head(), text_delta("Hi"), text_delta(" there"), *anthropic_tail(2)[:2]]
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="dummy", max_retries=0)
    try:
        gw.fake.script(Stream(cut, then=then))
        raw = await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, stream=True,
                                           messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        kinds = [event.type async for event in raw]
        gw.fake.script(Stream(cut, then=then))
        async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=64,
                                          messages=[{"role": "user", "content": "hi"}]) as stream:  # fmt: skip
            message = await stream.get_final_message()
    finally:
        await client.close()
    assert kinds[-2:] == ["message_delta", "message_stop"] and kinds.count("message_stop") == 1
    assert message.stop_reason == "end_turn" and message.content[0].text == "Hi there"  # type: ignore[union-attr]
    assert message.usage.output_tokens == 2
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert len(lines) == 2 and all("ended_by" not in line and line["error_type"] == "none" for line in lines), lines


async def test_a_messages_stream_that_sends_its_message_stop_gets_no_second_one(make_gateway: Any) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hi"), *anthropic_tail(2)], then="drop"))
    status, _, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    names = [name for name, _ in named_events(body)]
    assert status == 200 and names[-2:] == ["message_delta", "message_stop"] and names.count("message_stop") == 1


@pytest.mark.parametrize("then", ["eof", "drop", "stall"])
@pytest.mark.stall_timeouts
async def test_a_chat_stream_ended_after_its_finish_reason_owes_a_chat_client_no_done(
    make_gateway: Any, then: str,
) -> None:
    """Unlike Messages, nothing is added: the openai SDK's stream helper (and the Vercel AI SDK's
    streamText, opencode's, measured apart: finishReason "stop", no error) ends on the body's end
    whether [DONE] came or not."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")  # idle_s: 1
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hi"}), chunk({"content": " there"}),
                           chunk({}, "stop")], then=then))  # fmt: skip
    status, _, body = await gw.chat({"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and b"[DONE]" not in body and b'"error"' not in body
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hi"}), chunk({"content": " there"}),
                           chunk({}, "stop")], then=then))  # fmt: skip
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="dummy", max_retries=0)
    try:
        async with client.chat.completions.stream(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]) as s:
            final = await s.get_final_completion()
    finally:
        await client.close()
    assert final.choices[0].message.content == "Hi there" and final.choices[0].finish_reason == "stop"

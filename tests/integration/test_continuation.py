"""A stream that breaks mid-answer is continued from the text the client already has,
once, where an upstream declares how; the client sees one complete answer."""

import asyncio
import json
import logging

import anthropic
import openai
import pytest

from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Seq,
    Stream,
    anthropic_error,
    anthropic_head,
    anthropic_tail,
    chunk,
    data_events,
    named_events,
    response_object,
    responses_continuation,
    responses_deltas,
    responses_error,
    responses_head,
    sse,
    text_delta,
)

REQ = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "Tell a story"}]}
FIRST = ["Once", " upon", " a"]
REST = [" time,", " the", " end."]




def text_of(body: bytes) -> str:
    out = ""
    for e in data_events(body):
        if e != "[DONE]":
            for c in json.loads(e).get("choices", []):
                out += c["delta"].get("content") or ""
    return out


def broken_chat(then: str = "drop") -> Stream:
    return Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in FIRST)], then=then)


def continued_chat() -> Stream:
    other = {"id": "chatcmpl-other", "created": 1}
    events = [{**chunk({"role": "assistant", "content": ""}), **other},
              *({**chunk({"content": w}), **other} for w in REST), {**chunk({}, "stop"), **other}]
    return Stream(events)


def request_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]


async def test_a_cut_chat_stream_is_continued_into_one_complete_answer(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    gw.fake.script(broken_chat(), continued_chat())
    status, headers, body = await gw.chat(REQ)
    events = data_events(body)
    assert status == 200 and events[-1] == "[DONE]" and "error" not in body.decode()
    assert text_of(body) == "".join(FIRST + REST)  # nothing repeated or lost at the seam
    docs = [json.loads(e) for e in events[:-1]]
    assert {d["id"] for d in docs} == {"chatcmpl-fake123"}  # one stream, one id
    assert docs[-1]["choices"][0]["finish_reason"] == "stop" and docs[-1]["x_llm_continued"] is True
    first, second = gw.fake.chat_requests()
    assert second.json()["messages"][-1] == {"role": "assistant", "content": "Once upon a", "prefix": True}
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="continued") == 1
    (line,) = request_lines(caplog)
    assert line["continued_after"] == "stream_broken" and "ended_by" not in line and line["status"] == 200


@pytest.mark.stall_timeouts
async def test_vllm_mode_and_a_stall_are_continued_the_same_way(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")  # idle_s: 1
    gw.fake.script(broken_chat(then="stall"), continued_chat())
    _, _, body = await asyncio.wait_for(gw.chat(REQ), 10)
    assert text_of(body) == "".join(FIRST + REST) and data_events(body)[-1] == "[DONE]"
    sent = gw.fake.chat_requests()[1].json()
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    assert sent["messages"][-1] == {"role": "assistant", "content": "Once upon a"}


async def test_a_target_that_rejects_the_prefill_ends_with_the_original_error(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(broken_chat(), Reply(400, {"error": {"message": "This model does not support assistant "
                                                                    "message prefill. The conversation must end with a user message.",
                                                         "type": "invalid_request_error", "code": None}}))
    status, _, body = await gw.chat(REQ)
    last = json.loads(data_events(body)[-1])
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["x_llm_error_type"] == "provider_unavailable"  # the cut, not the 400
    assert "prefill" not in body.decode() and text_of(body) == "".join(FIRST)
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="failed") == 1


async def test_never_after_a_tool_call_started(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "l'}}
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Let me look."}), chunk({"tool_calls": [call]})],
                          then="drop"))
    _, _, body = await gw.chat(REQ)
    assert json.loads(data_events(body)[-1])["choices"][0]["finish_reason"] == "error"
    assert len(gw.fake.chat_requests()) == 1


async def test_never_twice_for_one_stream(make_gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    gw.fake.script(broken_chat(), Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " time"})],
                                         then="drop"))
    _, _, body = await gw.chat(REQ)
    assert json.loads(data_events(body)[-1])["choices"][0]["finish_reason"] == "error"
    assert text_of(body) == "Once upon a time" and len(gw.fake.chat_requests()) == 2
    (line,) = request_lines(caplog)
    assert line["continued_after"] == "stream_broken" and line["ended_by"] == "stream_broken"


async def test_without_a_declared_mode_nothing_is_continued(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(broken_chat())
    _, _, body = await gw.chat(REQ)
    assert json.loads(data_events(body)[-1])["choices"][0]["finish_reason"] == "error"
    assert len(gw.fake.chat_requests()) == 1


async def test_the_openai_sdk_sees_an_ordinary_complete_stream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    gw.fake.script(broken_chat(), continued_chat())
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(**REQ)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(FIRST + REST)
    assert chunks[-1].choices[0].finish_reason == "stop"
    await client.close()


def broken_messages() -> Stream:
    return Stream([*anthropic_head(), text_delta("Once"), text_delta(" upon a ")], then="drop")


def continued_messages() -> Stream:
    return Stream([*anthropic_head(), text_delta(" time,"), text_delta(" the end."), *anthropic_tail(output_tokens=4)],
                  then="eof")


async def test_the_anthropic_sdk_sees_one_complete_message_after_a_prefill_continuation(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(broken_messages(), continued_messages())
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    async with client.messages.stream(model="claude-x", max_tokens=100,
                                      messages=[{"role": "user", "content": "Tell a story"}]) as s:
        final = await s.get_final_message()
    # The prefill left the trailing space out; the continuation's leading one is not doubled.
    assert [b.text for b in final.content] == ["Once upon a time, the end."]
    assert final.stop_reason == "end_turn"
    sent = gw.fake.messages_requests()[1].json()
    assert sent["messages"][-1] == {"role": "assistant", "content": "Once upon a"}
    await client.close()


async def test_an_anthropic_upstream_that_refuses_prefill_ends_with_the_original_error(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(broken_messages(), anthropic_error(400, "invalid_request_error",
                                                      "This model does not support assistant message prefill. "
                                                      "The conversation must end with a user message."))
    status, _, body = await gw.messages({"model": "claude-x", "max_tokens": 10, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})
    blocks = [b for b in body.decode().split("\n\n") if b]
    assert blocks[-1].startswith("event: error") and "message_stop" not in body.decode()
    assert "prefill" not in blocks[-1]
    doc = json.loads(blocks[-1].split("data: ", 1)[1])
    assert doc["error"]["x_llm_error_type"] == "provider_unavailable"


async def test_a_messages_stream_with_thinking_is_not_prefilled(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(broken_messages())
    await gw.messages({"model": "claude-x", "max_tokens": 2000, "stream": True,
                       "thinking": {"type": "enabled", "budget_tokens": 1024},
                       "messages": [{"role": "user", "content": "hi"}]})
    assert len(gw.fake.messages_requests()) == 1


async def test_a_messages_tool_use_in_progress_is_not_continued(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    tool = sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}})
    gw.fake.script(Stream([*anthropic_head(), text_delta("Let me run it."), tool], then="drop"))
    await gw.messages({"model": "claude-x", "max_tokens": 10, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})
    assert len(gw.fake.messages_requests()) == 1


# Responses: vLLM continues a trailing assistant input message marked in_progress.
RESP_REQ = {"model": "qwen3", "stream": True, "input": "Tell a story"}


def broken_responses(*extra: bytes, then: str = "drop") -> Stream:
    return Stream([*responses_head("qwen3"), *responses_deltas(tuple(FIRST)), *extra], then=then)


def continued_responses() -> Stream:
    return Stream(responses_continuation("".join(REST), REST, model="qwen3"), then="eof")


def responses_text(body: bytes) -> str:
    return "".join(d["delta"] for n, d in named_events(body) if n == "response.output_text.delta")


async def test_a_cut_responses_stream_is_continued_into_one_complete_response(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    gw.fake.script(broken_responses(), continued_responses())
    status, _, body = await gw.responses(RESP_REQ)
    evs = named_events(body)
    names = [n for n, _ in evs]
    assert status == 200 and names[-1] == "response.completed" and "response.failed" not in names
    assert names.count("response.created") == 1 and names.count("response.output_item.added") == 1
    assert responses_text(body) == "".join(FIRST + REST)  # nothing repeated or lost at the seam
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))  # one numbering
    assert {d["item_id"] for _, d in evs if "item_id" in d} == {"msg_fake1"}  # one item
    assert {d["output_index"] for _, d in evs if "output_index" in d} == {0}
    done = dict(evs)
    assert done["response.output_text.done"]["text"] == "".join(FIRST + REST)
    assert done["response.output_item.done"]["item"]["content"][0]["text"] == "".join(FIRST + REST)
    final = done["response.completed"]
    assert final["x_llm_continued"] is True and final["response"]["x_llm_continued"] is True
    assert final["response"]["id"] == "resp_fake123"
    assert [i["id"] for i in final["response"]["output"]] == ["msg_fake1"]
    assert final["response"]["output"][0]["content"][0]["text"] == "".join(FIRST + REST)
    assert final["response"]["usage"]["output_tokens"] > 3  # the shown part is counted too
    sent = gw.fake.responses_requests()[1].json()
    assert sent["input"] == [{"role": "user", "content": "Tell a story"},
                             {"role": "assistant", "content": "Once upon a", "status": "in_progress"}]
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="continued") == 1


@pytest.mark.stall_timeouts
async def test_a_stalled_responses_stream_after_finished_reasoning_keeps_the_reasoning(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")  # idle_s: 1
    seq = Seq()
    shell = {**response_object("qwen3"), "status": "in_progress", "output": [], "usage": None}
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]}
    msg = {"id": "msg_fake1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    gw.fake.script(Stream([
        seq("response.created", response=shell),
        seq("response.output_item.added", output_index=0, item={**reasoning, "summary": []}),
        seq("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta="Think."),
        seq("response.output_item.done", output_index=0, item=reasoning),
        seq("response.output_item.added", output_index=1, item=msg),
        seq("response.content_part.added", item_id="msg_fake1", output_index=1, content_index=0,
            part={"type": "output_text", "text": "", "annotations": []}),
        *(seq("response.output_text.delta", item_id="msg_fake1", output_index=1, content_index=0, delta=w)
          for w in FIRST),
    ], then="stall"), continued_responses())  # fmt: skip
    _, _, body = await asyncio.wait_for(gw.responses(RESP_REQ), 10)
    done = dict(named_events(body))
    output = done["response.completed"]["response"]["output"]
    assert [i["id"] for i in output] == ["rs_1", "msg_fake1"]
    assert output[1]["content"][0]["text"] == "".join(FIRST + REST)
    assert {d.get("output_index") for n, d in named_events(body) if n.startswith("response.output_text")} == {1}


async def test_a_responses_stream_ended_by_the_upstreams_error_event_is_continued_without_a_gap(
    make_gateway,
) -> None:
    """The upstream's error event is never relayed: the continuation's first event takes its
    number, and the client's numbers run 0, 1, 2, … to the end (found by audit E: 5, 7, 8)."""
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    n = len(responses_head("qwen3")) + len(FIRST)
    failed = sse("error", {"type": "error", "sequence_number": n, "code": "server_error",
                           "message": "An error occurred while processing your request.", "param": None})
    gw.fake.script(broken_responses(failed, then="eof"), continued_responses())
    _, _, body = await gw.responses(RESP_REQ)
    evs = named_events(body)
    assert evs[-1][0] == "response.completed" and responses_text(body) == "".join(FIRST + REST)
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))


async def test_a_responses_target_that_refuses_ends_with_the_original_failure(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    gw.fake.script(broken_responses(), responses_error(400, "Invalid input: unexpected assistant status",
                                                       "invalid_request_error", None))
    _, _, body = await gw.responses(RESP_REQ)
    evs = named_events(body)
    name, last = evs[-1]
    assert name == "response.failed" and "unexpected assistant" not in body.decode()
    assert last["response"]["error"]["x_llm_error_type"] == "provider_unavailable"  # the cut
    assert last["sequence_number"] == evs[-2][1]["sequence_number"] + 1
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="failed") == 1


async def test_a_responses_continuation_that_breaks_too_ends_once_with_a_numbered_failure(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    cut = continued_responses()
    cut.events, cut.then = cut.events[:6], "drop"  # created … two deltas, then the cut
    gw.fake.script(broken_responses(), cut)
    _, _, body = await gw.responses(RESP_REQ)
    evs = named_events(body)
    assert [n for n, _ in evs].count("response.failed") == 1 and evs[-1][0] == "response.failed"
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    assert responses_text(body) == "".join(FIRST + REST[:2]) and len(gw.fake.responses_requests()) == 2


async def test_a_responses_function_call_in_progress_is_not_continued(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "shell", "arguments": ""}
    gw.fake.script(broken_responses(sse("response.output_item.added", {
        "type": "response.output_item.added", "sequence_number": 7, "output_index": 1, "item": call})))
    _, _, body = await gw.responses(RESP_REQ)
    assert named_events(body)[-1][0] == "response.failed" and len(gw.fake.responses_requests()) == 1


async def test_a_responses_upstream_declaring_prefix_is_not_asked(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")  # DeepSeek's chat form only
    gw.fake.script(broken_responses())
    _, _, body = await gw.responses(RESP_REQ)
    assert named_events(body)[-1][0] == "response.failed" and len(gw.fake.responses_requests()) == 1
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="not_continuable") == 1


async def test_the_openai_sdk_assembles_one_complete_response(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    gw.fake.script(broken_responses(), continued_responses())
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    async with client.responses.stream(model="qwen3", input="Tell a story") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "".join(FIRST + REST)
    assert final.id == "resp_fake123" and final.status == "completed"
    await client.close()


async def test_the_continuation_goes_to_the_first_upstream_whose_mode_fits_the_wire_api(make_gateway) -> None:
    """The primary declares DeepSeek's chat-only prefix; its fallback continues Responses."""
    primary, backup = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=primary, upstreams=(
            f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup], continuation: prefix}}\n"
            f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here'], "
            "continuation: continue_final_message}\n"))  # fmt: skip
        primary.script(broken_responses())
        backup.script(continued_responses())
        _, _, body = await gw.responses(RESP_REQ)
        assert responses_text(body) == "".join(FIRST + REST) and named_events(body)[-1][0] == "response.completed"
        assert len(primary.responses_requests()) == 1 and len(backup.responses_requests()) == 1
        assert backup.responses_requests()[0].json()["input"][-1]["status"] == "in_progress"
        assert gw.metric("llm_gateway_continuations_total", upstream="backup", outcome="continued") == 1
    finally:
        await primary.close()
        await backup.close()


@pytest.mark.parametrize("deltas", [["\n    ", "    return 0\n"], ["\n", "        ", "return 0\n"],
                                    ["\n        return 0\n"], ["\n", " ", "       ", "return", " 0\n"]])
async def test_a_prefill_continuation_cut_inside_an_indent_repeats_no_whitespace(make_gateway, deltas) -> None:
    """The issue's case: a code answer cut after ``def area(self):\\n`` and 8 spaces."""
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    shown = ["class Shape:\n", "    def area(self):\n", "        "]
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(t) for t in shown)], then="drop"),
                   Stream([*anthropic_head(), *(text_delta(d) for d in deltas), *anthropic_tail()], then="eof"))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    async with client.messages.stream(model="claude-x", max_tokens=100,
                                      messages=[{"role": "user", "content": "Write Shape"}]) as s:
        final = await s.get_final_message()
    await client.close()
    assert [b.text for b in final.content] == ["class Shape:\n    def area(self):\n        return 0\n"]
    assert gw.fake.messages_requests()[1].json()["messages"][-1]["content"] == "class Shape:\n    def area(self):"


# A chunk the upstream never finished writing: JSON cut mid-string, then the stream goes on.
TRUNCATED_CHAT = b'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"delta": {"content": " ti\n\n'
TRUNCATED_MESSAGES = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"te\n\n'


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_after_a_malformed_event_another_upstream_continues_first_as_after_a_stall(make_gateway, api) -> None:
    """The upstream that just wrote an undecodable event is the likeliest to do it again, as
    one that went silent is: another upstream that can continue is asked first."""
    mode = "prefix" if api == "chat" else "prefill"
    primary, backup = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=primary, upstreams=(
            f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup], continuation: {mode}}}\n"
            f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here'], continuation: {mode}}}\n"))  # fmt: skip
        if api == "chat":
            primary.script(Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in FIRST),
                                   TRUNCATED_CHAT, chunk({}, "stop")]))  # fmt: skip
            backup.script(continued_chat())
            _, _, body = await gw.chat(REQ)
            assert text_of(body) == "".join(FIRST + REST) and data_events(body)[-1] == "[DONE]"
            sent = backup.chat_requests()[0].json()["messages"][-1]
        else:
            primary.script(Stream([*anthropic_head(), text_delta("Once"), text_delta(" upon a "), TRUNCATED_MESSAGES,
                                   *anthropic_tail(output_tokens=4)], then="eof"))  # fmt: skip
            backup.script(continued_messages())
            _, _, body = await gw.messages({"model": "claude-x", "max_tokens": 100, "stream": True,
                                            "messages": [{"role": "user", "content": "Tell a story"}]})  # fmt: skip
            names = [n for n, _ in named_events(body)]
            assert "error" not in names and names[-1] == "message_stop" and b'{"te' not in body
            sent = backup.messages_requests()[0].json()["messages"][-1]
        assert sent["role"] == "assistant" and sent["content"] == "Once upon a"
        assert len(primary.requests) == 1
        assert gw.metric("llm_gateway_continuations_total", upstream="backup", outcome="continued") == 1
    finally:
        await primary.close()
        await backup.close()


@pytest.mark.parametrize("mode", ["none", "prefix"])
async def test_a_gemini_clients_stream_on_a_chat_upstream_is_continued_as_chat(make_gateway, mode: str) -> None:
    """A Gemini client on a translated upstream: the continuation is the upstream's (a chat
    upstream with ``prefix`` here), spliced before the stream becomes Gemini's; without one the
    stream ends with Google's typed error, UNAVAILABLE, which Gemini CLI retries mid-stream
    (docs/agents/gemini-cli.md)."""
    gw = await make_gateway(upstream_yaml=f", apis: [chat], model_map: {{'gemini-*': qwen}}, continuation: {mode}")
    gw.fake.script(broken_chat(), continued_chat())
    body = {"contents": [{"role": "user", "parts": [{"text": "Tell a story"}]}]}
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                               json=body, headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
        assert r.status == 200
        docs = [json.loads(e) for e in data_events(await r.read())]
    said = "".join(p.get("text", "") for d in docs if "candidates" in d for p in d["candidates"][0]["content"]["parts"])
    if mode == "prefix":
        assert said == "".join(FIRST + REST) and "error" not in docs[-1]
        assert docs[-1]["candidates"][0]["finishReason"] == "STOP" and docs[-1]["x_llm_continued"] is True
        assert gw.fake.chat_requests()[1].json()["messages"][-1] == {"role": "assistant", "content": "Once upon a",
                                                                     "prefix": True}  # fmt: skip
    else:
        assert said == "".join(FIRST) and docs[-1]["error"]["status"] == "UNAVAILABLE"
        assert len(gw.fake.chat_requests()) == 1


def _chat_end(body: bytes) -> list[dict[str, object]]:
    """A chat stream's finish chunk and the usage chunk after it."""
    events = data_events(body)
    assert events[-1] == "[DONE]", body
    return [json.loads(e) for e in events[-3:-1]]


async def test_a_chat_client_continued_on_a_messages_upstream_is_told_so(make_gateway) -> None:
    # The splice marked the upstream's message_delta; the translated stream dropped the mark.
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'*': claude-x}, continuation: prefill")
    gw.fake.script(broken_messages(), continued_messages())
    status, _, body = await gw.chat({**REQ, "stream_options": {"include_usage": True}})
    finish, usage = _chat_end(body)
    assert status == 200 and text_of(body) == "Once upon a time, the end."
    assert finish["choices"][0]["finish_reason"] == "stop" and finish["x_llm_continued"] is True  # type: ignore[index]
    assert usage["choices"] == [] and usage["x_llm_continued"] is True


async def test_a_chat_client_continued_on_a_responses_upstream_is_told_so(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [responses], continuation: continue_final_message")
    gw.fake.script(broken_responses(), continued_responses())
    status, _, body = await gw.chat({**REQ, "model": "qwen3"})
    events = data_events(body)
    finish = json.loads(events[-2])
    assert status == 200 and text_of(body) == "".join(FIRST + REST)
    assert finish["choices"][0]["finish_reason"] == "stop" and finish["x_llm_continued"] is True


async def test_a_messages_client_continued_on_a_chat_upstream_is_told_so(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], continuation: prefix")
    gw.fake.script(broken_chat(), continued_chat())
    status, _, body = await gw.messages({"model": "claude-x", "max_tokens": 100, "stream": True,
                                         "messages": [{"role": "user", "content": "Tell a story"}]})  # fmt: skip
    evs = named_events(body)
    assert status == 200 and [n for n, _ in evs][-2:] == ["message_delta", "message_stop"]
    assert evs[-2][1]["delta"]["stop_reason"] == "end_turn" and evs[-2][1]["x_llm_continued"] is True


async def test_a_responses_client_continued_on_a_chat_upstream_is_told_so(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], continuation: prefix")
    gw.fake.script(broken_chat(), continued_chat())
    status, _, body = await gw.responses(RESP_REQ)
    name, final = named_events(body)[-1]
    assert status == 200 and name == "response.completed" and responses_text(body) == "".join(FIRST + REST)
    assert final["x_llm_continued"] is True and final["response"]["x_llm_continued"] is True


async def test_a_continuation_is_asked_for_what_is_left_of_the_output_budget(make_gateway) -> None:
    """Sent the client's whole budget again, a continued answer could run to nearly twice the
    limit the client set, and past what its key reserved (audit: max_tokens 3000 sent again
    after 571 tokens shown). "Once upon a" is 11 bytes: 3 tokens at 3.5 bytes each."""
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    gw.fake.script(broken_chat(), continued_chat())
    await gw.chat({**REQ, "max_tokens": 100})
    gw.fake.script(broken_chat(), continued_chat())
    await gw.chat({**REQ, "max_completion_tokens": 100})
    gw.fake.script(broken_chat(), continued_chat())
    await gw.chat({**REQ, "max_tokens": 2})  # the estimate says it is spent: one token, ended by a length finish
    gw.fake.script(broken_chat(), continued_chat())
    await gw.chat(REQ)  # no budget named: the provider's default, again
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [s.get("max_tokens") for s in sent] == [100, 97, None, None, 2, 1, None, None]
    assert [s.get("max_completion_tokens") for s in sent] == [None, None, 100, 97, None, None, None, None]


async def test_a_messages_and_a_responses_continuation_are_asked_for_what_is_left(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(broken_messages(), continued_messages())
    await gw.messages({"model": "claude-x", "max_tokens": 100, "stream": True,
                       "messages": [{"role": "user", "content": "Tell a story"}]})  # fmt: skip
    assert [r.json()["max_tokens"] for r in gw.fake.messages_requests()] == [100, 97]  # "Once upon a ": 3
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    gw.fake.script(broken_responses(), continued_responses())
    await gw.responses({**RESP_REQ, "max_output_tokens": 100})
    assert [r.json()["max_output_tokens"] for r in gw.fake.responses_requests()] == [100, 97]

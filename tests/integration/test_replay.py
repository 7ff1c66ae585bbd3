"""Replay and match: a stream broken mid-answer is finished on an upstream that cannot
prefill, by sending the request again and relaying only what follows the text already
shown; a replay that diverges ends with the original error."""

import asyncio
import json

import anthropic
import openai
import pytest

from tests.fakeupstream import (
    FakeUpstream,
    Seq,
    Stream,
    anthropic_head,
    anthropic_tail,
    chunk,
    data_events,
    named_events,
    response_object,
    responses_deltas,
    responses_head,
    sse,
    text_delta,
)

ANSWER = "Once upon a time, the end."
SHOWN = ["Once", " upon", " a"]
REQ = {"model": "gpt-4o-mini", "stream": True, "temperature": 0,
       "messages": [{"role": "user", "content": "Tell a story"}]}  # fmt: skip


def other(doc: dict) -> dict:
    return {**doc, "id": "chatcmpl-replay", "created": 1}


def broken_chat(then: str = "drop") -> Stream:
    return Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in SHOWN)], then=then)


def replayed_chat(pieces: list[str], finish: str = "stop", reasoning: bool = False) -> Stream:
    events = [other(chunk({"role": "assistant", "content": ""}))]
    if reasoning:
        events.append(other(chunk({"reasoning_content": "Think first."})))
    events += [other(chunk({"content": p})) for p in pieces]
    events += [other(chunk({}, finish)), {**other(chunk({})), "choices": [],
               "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}}]  # fmt: skip
    return Stream(events)


def chat_text(body: bytes) -> str:
    out = ""
    for e in data_events(body):
        if e != "[DONE]":
            for c in json.loads(e).get("choices", []):
                out += c["delta"].get("content") or ""
    return out


@pytest.mark.parametrize("pieces", [["Once upon a time,", " the end."], ["Once", " upon", " a", " time,", " the end."],
                                    list(ANSWER), ["Once upon a", " time, the end."], [ANSWER]])
async def test_a_cut_chat_stream_is_finished_by_a_replay_that_matches(make_gateway, pieces) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(broken_chat(), replayed_chat(pieces, reasoning=True))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(**REQ, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    await client.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER  # nothing repeated, lost or contradicted at the seam
    assert {c.id for c in chunks} == {"chatcmpl-fake123"}  # one stream, one id
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-2].model_extra["x_llm_continued"] is True
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8  # the replay's: whole answer
    assert not any(getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks if c.choices)
    first, second = gw.fake.chat_requests()
    assert first.json() == second.json()  # the same request again: no prefill
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="continued") == 1


@pytest.mark.parametrize("replay", [
    replayed_chat(["Once upon the", " end."]),  # other text
    replayed_chat(["Once upon"]),  # ended short of what the client has
    Stream([other(chunk({"role": "assistant", "content": "Once"})), other(chunk({"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}))]),
])
async def test_a_replay_that_diverges_ends_with_the_original_error(make_gateway, replay) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(broken_chat(), replay)
    status, _, body = await gw.chat(REQ)
    last = json.loads(data_events(body)[-1])
    assert last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == "stream_broken"
    assert chat_text(body) == "".join(SHOWN)  # nothing that contradicts what the client has
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="diverged") == 1


async def test_replay_is_not_spent_on_a_request_whose_answer_will_not_repeat(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(broken_chat())
    _, _, body = await gw.chat({**REQ, "temperature": 0.7})
    assert json.loads(data_events(body)[-1])["choices"][0]["finish_reason"] == "error"
    assert len(gw.fake.chat_requests()) == 1
    gw.fake.script(broken_chat(), replayed_chat([ANSWER]))
    _, _, body = await gw.chat({**REQ, "temperature": 0.7, "seed": 42})  # a seed: replayed
    assert chat_text(body) == ANSWER and len(gw.fake.chat_requests()) == 3


async def test_replay_any_replays_every_request(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay_any")
    gw.fake.script(broken_chat(), replayed_chat([ANSWER]))
    _, _, body = await gw.chat({k: v for k, v in REQ.items() if k != "temperature"})
    assert chat_text(body) == ANSWER and data_events(body)[-1] == "[DONE]"


async def test_a_replay_is_asked_for_the_whole_output_budget_again(make_gateway) -> None:
    # It writes the whole answer again, shown part and all: a continuation from the shown text
    # is asked for what is left of the budget, a replay for all of it.
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(broken_chat(), replayed_chat([ANSWER]))
    _, _, body = await gw.chat({**REQ, "max_tokens": 100})
    assert chat_text(body) == ANSWER
    assert [r.json()["max_tokens"] for r in gw.fake.chat_requests()] == [100, 100]


async def two(make_gateway, primary_mode: str, backup_mode: str):
    primary, backup = await FakeUpstream().start(), await FakeUpstream().start()
    gw = await make_gateway(fake=primary, upstreams=(
        f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup], continuation: {primary_mode}}}\n"
        f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here'], "
        f"continuation: {backup_mode}}}\n"))  # fmt: skip
    return gw, primary, backup


@pytest.mark.stall_timeouts
async def test_after_a_stall_another_upstream_replays_after_a_cut_the_same_one(make_gateway) -> None:
    gw, primary, backup = await two(make_gateway, "replay", "replay")
    try:
        primary.script(broken_chat(then="stall"))
        backup.script(replayed_chat([ANSWER]))
        _, _, body = await asyncio.wait_for(gw.chat(REQ), 10)  # idle_s: 1
        assert chat_text(body) == ANSWER
        assert len(primary.chat_requests()) == 1 and len(backup.chat_requests()) == 1
        primary.script(broken_chat(), replayed_chat([ANSWER]))
        _, _, body = await gw.chat(REQ)
        assert chat_text(body) == ANSWER
        assert len(primary.chat_requests()) == 3 and len(backup.chat_requests()) == 1
    finally:
        await primary.close()
        await backup.close()


async def test_an_upstream_that_continues_from_the_text_is_preferred_to_a_replay(make_gateway) -> None:
    gw, primary, backup = await two(make_gateway, "replay", "prefix")
    try:
        primary.script(broken_chat())
        backup.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " time, the end."}),
                              chunk({}, "stop")]))
        _, _, body = await gw.chat(REQ)
        assert chat_text(body) == ANSWER
        assert backup.chat_requests()[0].json()["messages"][-1] == {"role": "assistant", "content": "Once upon a",
                                                                     "prefix": True}
    finally:
        await primary.close()
        await backup.close()


async def test_a_replay_is_one_continuation_per_stream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    replay = replayed_chat(["Once upon a time,", " the"])
    replay.events, replay.then = replay.events[:3], "drop"
    gw.fake.script(broken_chat(), replay)
    _, _, body = await gw.chat(REQ)
    assert chat_text(body) == "Once upon a time, the" and len(gw.fake.chat_requests()) == 2
    assert json.loads(data_events(body)[-1])["choices"][0]["finish_reason"] == "error"


# Messages: the anthropic SDK assembles one message.
def messages_replay(pieces: list[str]) -> Stream:
    thinking = [sse("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "thinking", "thinking": ""}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "thinking_delta", "thinking": "Hm."}}),
                sse("content_block_stop", {"type": "content_block_stop", "index": 0})]  # fmt: skip
    head = anthropic_head()
    text_start = head[2].replace(b'"index": 0', b'"index": 1')
    tail = [t.replace(b'"index": 0', b'"index": 1') for t in anthropic_tail(output_tokens=12)]
    return Stream([*head[:2], *thinking, text_start, *(text_delta(p, 1) for p in pieces), *tail], then="eof")


@pytest.mark.parametrize("pieces", [["Once upon a time,", " the end."], list(ANSWER), ["Once upon a", " time, the end."]])
async def test_the_anthropic_sdk_sees_one_message_finished_by_a_replay(make_gateway, pieces) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(w) for w in SHOWN)], then="drop"), messages_replay(pieces))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    async with client.messages.stream(model="claude-x", max_tokens=100, extra_body={"temperature": 0},
                                      messages=[{"role": "user", "content": "Tell a story"}]) as s:
        final = await s.get_final_message()
    await client.close()
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == ANSWER
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 12 and final.id == "msg_fake123"
    first, second = gw.fake.messages_requests()
    assert first.json() == second.json()


async def test_a_messages_replay_that_diverges_ends_with_one_error_event(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(w) for w in SHOWN)], then="drop"),
                   messages_replay(["Once upon the end."]))
    _, _, body = await gw.messages({"model": "claude-x", "max_tokens": 10, "stream": True, "temperature": 0,
                                    "messages": [{"role": "user", "content": "hi"}]})
    names = [n for n, _ in named_events(body)]
    assert names[-1] == "error" and "message_stop" not in names and "the end" not in body.decode()


# Responses: the openai SDK assembles one response.
def responses_replay(pieces: list[str]) -> Stream:
    seq = Seq()
    shell = {**response_object("qwen3"), "id": "resp_other", "status": "in_progress", "output": [], "usage": None}
    reasoning = {"id": "rs_other", "type": "reasoning", "summary": []}
    msg = {"id": "msg_other", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    where = {"item_id": "msg_other", "output_index": 1, "content_index": 0}
    done = response_object("qwen3", ANSWER, output_tokens=8)
    done["id"], done["output"][0]["id"] = "resp_other", "msg_other"
    done["output"] = [{**reasoning, "summary": []}, done["output"][0]]
    return Stream([
        seq("response.created", response=shell), seq("response.in_progress", response=shell),
        seq("response.output_item.added", output_index=0, item=reasoning),
        seq("response.output_item.done", output_index=0, item=reasoning),
        seq("response.output_item.added", output_index=1, item=msg),
        seq("response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": []}),
        *(seq("response.output_text.delta", **where, delta=p, logprobs=[]) for p in pieces),
        seq("response.output_text.done", **where, text=ANSWER, logprobs=[]),
        seq("response.content_part.done", **where, part={"type": "output_text", "text": ANSWER, "annotations": []}),
        seq("response.output_item.done", output_index=1, item=done["output"][1]),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip


@pytest.mark.parametrize("pieces", [["Once upon a time,", " the end."], list(ANSWER), [ANSWER]])
async def test_the_openai_sdk_sees_one_response_finished_by_a_replay(make_gateway, pieces) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: replay")
    gw.fake.script(Stream([*responses_head("qwen3"), *responses_deltas(tuple(SHOWN))], then="drop"),
                   responses_replay(pieces))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    async with client.responses.stream(model="qwen3", input="Tell a story", temperature=0) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_response()
    await client.close()
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == ANSWER
    assert final.id == "resp_fake123" and [i.id for i in final.output] == ["msg_fake1"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.usage is not None and final.usage.output_tokens == 8
    done = [e for e in events if e.type == "response.output_text.done"]
    assert [d.text for d in done] == [ANSWER] and final.model_extra["x_llm_continued"] is True
    first, second = gw.fake.responses_requests()
    assert first.json() == second.json()

"""Claude's signed thinking through a Responses client (the openai SDK's, stock settings) on a
Messages upstream: Responses → chat → Messages and back. Anthropic keeps thinking on through a
tool loop only when the turn that called the tools comes back starting with its signed thinking
block; the fake refuses it otherwise, and refuses a signature it issued for other text
(gateway/fake/messages_rules.py). And an OpenAI upstream's own ``encrypted_content`` is passed
through untouched."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from gateway.fake.messages import sign
from tests.fakeupstream import Reply, Stream

UPSTREAM = ", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-5}"
TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}]  # fmt: skip
THOUGHT = "The user wants Paris's weather: call the tool."


@pytest.fixture
async def clients() -> Any:
    made: list[openai.AsyncOpenAI] = []

    def make(gw: Any) -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client"))
        return made[-1]

    yield make
    for c in made:
        await c.close()


def thinking_then_call() -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)},
                        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 30}}  # fmt: skip


def streamed(doc: dict[str, Any]) -> Stream:
    """``doc`` as Anthropic streams it: thinking as thinking_delta then signature_delta."""
    head = {**doc, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}]
    for i, block in enumerate(doc["content"]):
        if block["type"] == "thinking":
            events += [{"type": "content_block_start", "index": i,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                       {"type": "content_block_delta", "index": i,
                        "delta": {"type": "thinking_delta", "thinking": block["thinking"]}},
                       {"type": "content_block_delta", "index": i,
                        "delta": {"type": "signature_delta", "signature": block["signature"]}}]  # fmt: skip
        elif block["type"] == "tool_use":
            events += [{"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}},
                       {"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}]  # fmt: skip
        else:
            events += [{"type": "content_block_start", "index": i, "content_block": block}]
        events.append({"type": "content_block_stop", "index": i})
    events += [{"type": "message_delta", "delta": {"stop_reason": doc["stop_reason"]},
                "usage": {"output_tokens": 30}}, {"type": "message_stop"}]  # fmt: skip
    return Stream([f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events])


def text_answer() -> dict[str, Any]:
    return {**thinking_then_call(), "id": "msg_2", "content": [{"type": "text", "text": "Sunny in Paris."}],
            "stop_reason": "end_turn"}


def next_input(output: list[Any]) -> list[Any]:
    """What the client sends next: the conversation, the output items as received, the result."""
    items = [item.model_dump(exclude_none=True) for item in output]
    [call] = [i for i in items if i["type"] == "function_call"]
    return [{"role": "user", "content": "Weather in Paris?"}, *items,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]  # fmt: skip


def assert_thinking_kept(sent: dict[str, Any]) -> None:
    assert sent["thinking"]["type"] in ("enabled", "adaptive")
    turn = sent["messages"][1]
    assert turn["role"] == "assistant" and [b["type"] for b in turn["content"]] == ["thinking", "tool_use"]
    assert turn["content"][0] == {"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)}


async def test_a_tool_round_with_reasoning_keeps_thinking_on_buffered(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Reply(200, thinking_then_call()), Reply(200, text_answer()))
    client = clients(gw)
    first = await client.responses.create(model="gpt-5-codex", input="Weather in Paris?", tools=TOOLS,
                                          reasoning={"effort": "high"})  # fmt: skip
    assert [i.type for i in first.output] == ["reasoning", "function_call"]
    second = await client.responses.create(model="gpt-5-codex", input=next_input(first.output), tools=TOOLS,
                                           reasoning={"effort": "high"})  # fmt: skip
    assert second.output_text == "Sunny in Paris."
    first_sent, second_sent = (r.json() for r in gw.fake.messages_requests())
    assert first_sent["thinking"]["type"] in ("enabled", "adaptive")
    assert_thinking_kept(second_sent)


async def test_a_tool_round_with_reasoning_keeps_thinking_on_streamed(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(streamed(thinking_then_call()), streamed(text_answer()))
    client = clients(gw)
    async with client.responses.stream(model="gpt-5-codex", input="Weather in Paris?", tools=TOOLS,
                                       reasoning={"effort": "high"}) as s:  # fmt: skip
        first = await s.get_final_response()
    [reasoning] = [i for i in first.output if i.type == "reasoning"]
    assert reasoning.encrypted_content and reasoning.encrypted_content.startswith("llm-gateway.thinking.v1:")
    async with client.responses.stream(model="gpt-5-codex", input=next_input(first.output), tools=TOOLS,
                                       reasoning={"effort": "high"}) as s:  # fmt: skip
        second = await s.get_final_response()
    assert second.output_text == "Sunny in Paris."
    assert_thinking_kept(gw.fake.messages_requests()[1].json())


async def test_thinking_is_replayed_only_to_the_claude_model_that_made_it(make_gateway, clients) -> None:
    """Codex switching models (``/model``) on a route mapping each to another Claude model sent
    each the other's thinking, which Anthropic refuses ("blocks generated by a different model":
    anthropic-sdk-python#1598): a refused call and a resend on every switch. The seal names the
    model that made it and goes back to that one only."""
    per_model = ", apis: [messages], model_map: {'gpt-5-codex': claude-opus-4-5, 'gpt-*': claude-sonnet-4-5}"
    gw = await make_gateway(upstream_yaml=per_model)
    gw.fake.script(Reply(200, thinking_then_call()), Reply(200, text_answer()), Reply(200, text_answer()))
    client = clients(gw)
    first = await client.responses.create(model="gpt-5-codex", input="Weather in Paris?", tools=TOOLS,
                                          reasoning={"effort": "high"})  # fmt: skip
    for model in ("gpt-5.1", "gpt-5-codex"):  # switched, then back
        answer = await client.responses.create(model=model, input=next_input(first.output), tools=TOOLS,
                                               reasoning={"effort": "high"})  # fmt: skip
        assert answer.output_text == "Sunny in Paris."
    made, on_sonnet, on_opus = (r.json() for r in gw.fake.messages_requests())  # none refused, none resent
    assert [made["model"], on_sonnet["model"], on_opus["model"]] == ["claude-opus-4-5", "claude-sonnet-4-5",
                                                                     "claude-opus-4-5"]  # fmt: skip
    assert [b["type"] for b in on_sonnet["messages"][1]["content"]] == ["tool_use"]
    assert_thinking_kept(on_opus)


async def test_altered_thinking_is_refused_by_the_fake_as_anthropic_would(make_gateway, clients) -> None:
    """The fake's signature check, through the app: what would catch a gateway that rewrote the
    thinking on the way. The refusal is then met as any foreign signature is
    (tests/integration/test_reasoning_across_accounts.py): the turn is asked again without it."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    forged = thinking_then_call()
    forged["content"][0]["signature"] = sign("other thinking")
    gw.fake.script(Reply(200, forged), Reply(200, text_answer()))
    client = clients(gw)
    first = await client.responses.create(model="gpt-5-codex", input="Weather in Paris?", tools=TOOLS,
                                          reasoning={"effort": "high"})  # fmt: skip
    raw = await client.responses.with_raw_response.create(
        model="gpt-5-codex", input=next_input(first.output), tools=TOOLS, reasoning={"effort": "high"})
    assert raw.parse().output_text == "Sunny in Paris."
    assert raw.headers["x-llm-reasoning-dropped"] == "thinking,thinking_off"
    _, refused, kept = (r.json() for r in gw.fake.messages_requests())
    assert refused["messages"][1]["content"][0]["signature"] == sign("other thinking")
    assert "thinking" not in kept and [b["type"] for b in kept["messages"][1]["content"]] == ["tool_use"]


async def test_openai_encrypted_content_passes_through_untouched(make_gateway, clients) -> None:
    gw = await make_gateway()  # the fake speaks Responses: nothing is translated
    item = {"type": "reasoning", "id": "rs_1", "summary": [],
            "encrypted_content": "gAAAAABpOpenAIsOwnFernetTokenNotTheGateways=="}  # fmt: skip
    payload: Any = [{"role": "user", "content": "Weather?"}, item,
                    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]  # fmt: skip
    await clients(gw).responses.create(model="gpt-5-codex", input=payload, tools=TOOLS,
                                       include=["reasoning.encrypted_content"], store=False)  # fmt: skip
    [sent] = gw.fake.responses_requests()
    assert sent.json()["input"][1] == item

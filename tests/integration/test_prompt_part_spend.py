"""Prompt tokens the usage counts apart, charged through the gateway on every client API,
buffered and streamed (tests/corpus/usage/prompt_parts.json; the readers and prices are
tests/unit/keys/test_prompt_parts.py). The spend audit found two undercharged: Gemini's
``toolUsePromptTokenCount`` was never charged, on any client of a Gemini upstream, and OpenAI's
``cache_write_tokens`` was charged at the input price."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.fakeupstream import Reply, Seq, Step, Stream, chat_completion, response_object, responses_head
from tests.integration.conftest import Gateway, MakeGateway

CASES = {c["name"]: c["body"] for c in json.loads(
    (Path(__file__).parents[1] / "corpus" / "usage" / "prompt_parts.json").read_text())["cases"]}  # fmt: skip
KEY = "keys: [{name: alice, key: gk-alice, budget: {usd: 100, period: day}}]\n"
ALICE = {"Authorization": "Bearer gk-alice"}
HI = [{"role": "user", "content": "hi"}]


async def _spent(gw: Gateway) -> float:
    """The key's spend once nothing is held (settling runs after the answer)."""
    for _ in range(200):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
            state = await r.json()
        if not state["in_flight"] and not state["budget"]["reserved_usd"]:
            return float(state["budget"]["spent_usd"])
        await asyncio.sleep(0.02)
    raise AssertionError(state)


async def _each_client(gw: Gateway, model: str, answer: Callable[[bool], Step], usd: float,
                       caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:  # fmt: skip
    """One request of each client API, buffered then streamed, each answered by ``answer``;
    each must add ``usd`` to the key's spend. The log lines' ``usage``, in order."""
    oai = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    ant = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    spent = await _spent(gw)
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            for stream in (False, True):
                for client in ("chat", "messages", "responses", "gemini"):
                    gw.fake.script(answer(stream))
                    if client == "chat" and stream:
                        chunks = await oai.chat.completions.create(
                            model=model, messages=HI, stream=True, stream_options={"include_usage": True})  # type: ignore[arg-type]
                        async for _ in chunks:
                            pass
                    elif client == "chat":
                        await oai.chat.completions.create(model=model, messages=HI)  # type: ignore[arg-type]
                    elif client == "messages" and stream:
                        async with ant.messages.stream(model=model, max_tokens=64, messages=HI) as s:  # type: ignore[arg-type]
                            await s.get_final_message()
                    elif client == "messages":
                        await ant.messages.create(model=model, max_tokens=64, messages=HI)  # type: ignore[arg-type]
                    elif client == "responses" and stream:
                        events = await oai.responses.create(model=model, input="hi", stream=True)
                        async for _ in events:
                            pass
                    elif client == "responses":
                        await oai.responses.create(model=model, input="hi")
                    else:
                        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
                        async with gw.session.post(gw.base + f"/v1beta/models/{model}:{method}",
                                                   json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                                                   headers={"x-goog-api-key": "gk-alice"}) as r:  # fmt: skip
                            assert r.status == 200, await r.read()
                            await r.read()
                    now = await _spent(gw)
                    assert now - spent == pytest.approx(usd, abs=1e-6), (client, stream)
                    spent = now
    finally:
        await oai.close()
        await ant.close()
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"
             and r.msg.get("method") == "POST"]
    assert len(lines) == 8
    return [line["usage"] for line in lines]


async def test_the_tool_use_prompt_of_a_gemini_upstream_is_charged_on_every_client(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """A url_context answer's 377,545 tool-use prompt tokens (Arize-ai/openinference#2578) were
    charged nothing: $0.0077 of its $0.1213 at Gemini 2.5 Flash's shipped prices."""
    gw = await make_gateway(KEY, ", apis: [gemini], api_key: AIza-upkey")
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP",
                              "index": 0}], **CASES["gemini-url-context-tool-use-prompt"]}  # fmt: skip
    usage = await _each_client(gw, "gemini-2.5-flash", lambda stream: Stream([answer]) if stream else Reply(200, answer),
                               (378_586 * 0.30 + 3093 * 2.50) / 1e6, caplog)  # fmt: skip
    assert usage == [{"prompt": 1041 + 377545, "completion": 902 + 2191}] * 8


def _chat_answer(model: str, usage: dict[str, Any]) -> Callable[[bool], Step]:
    def answer(stream: bool) -> Step:
        if not stream:
            return Reply(200, {**chat_completion(model, "ok"), "usage": usage})
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}
        return Stream([{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                                             "finish_reason": None}]},
                       {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                       {**base, "choices": [], "usage": usage}])  # fmt: skip

    return answer


async def test_cache_writes_of_a_chat_upstream_serving_claude_are_charged_as_writes(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenRouter's usage: 194 prompt tokens of which 100 written to the cache, which a Claude
    model bills at 1.25x: they were charged as fresh input on every client of the chat upstream."""
    gw = await make_gateway(KEY, ", apis: [chat]")
    usage = CASES["openrouter-usage-accounting-cache-write"]["usage"]
    counted = await _each_client(gw, "claude-sonnet-4-6", _chat_answer("claude-sonnet-4-6", usage),
                                 (94 * 3.0 + 100 * 3.75 + 2 * 15.0) / 1e6, caplog)  # fmt: skip
    assert counted == [{"prompt": 194, "completion": 2, "cache_write": 100}] * 8


async def test_cache_writes_of_openai_are_charged_at_the_cache_write_price(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The prompt-caching guide's usage on gpt-6.2-sol ($2.00 in, $0.10 cached, $2.50 written):
    $0.0014 charged for $0.0016, on a Responses upstream and a chat one (the guide: the same
    fields under chat's ``prompt_tokens_details``). It states no output tokens; output is free
    here, so that what a stream's text is estimated at costs nothing."""
    prices = "prices: {'gpt-6.2-sol': {input: 2.0, output: 0, cache_read: 0.10, cache_write: 2.50}}\n"
    guide = CASES["openai-prompt-caching-guide-cache-write"]["usage"]

    def responses_answer(stream: bool) -> Step:
        done = {**response_object("gpt-6.2-sol", "ok"), "usage": guide}
        if not stream:
            return Reply(200, done)
        seq = Seq()
        where = {"item_id": "msg_fake1", "output_index": 0, "content_index": 0}
        return Stream([*responses_head("gpt-6.2-sol", seq), seq("response.output_text.delta", **where, delta="ok",
                                                                 logprobs=[]),
                       seq("response.output_text.done", **where, text="ok", logprobs=[]),
                       seq("response.output_item.done", output_index=0, item=done["output"][0]),
                       seq("response.completed", response=done)], then="eof")  # no chat [DONE] after it  # fmt: skip

    chat = {"prompt_tokens": guide["input_tokens"], "prompt_tokens_details": guide["input_tokens_details"]}
    for apis, answer in (("responses", responses_answer), ("chat", _chat_answer("gpt-6.2-sol", chat))):
        caplog.clear()
        gw = await make_gateway(prices + KEY, f", apis: [{apis}]")
        counted = await _each_client(gw, "gpt-6.2-sol", answer, (200 * 2.0 + 2000 * 0.10 + 400 * 2.50) / 1e6, caplog)
        for usage in counted:
            assert {k: usage[k] for k in ("prompt", "cache_read", "cache_write")} == {
                "prompt": 2600, "cache_read": 2000, "cache_write": 400}, apis


async def test_a_messages_clients_cache_write_breakdown_agrees_with_its_total(make_gateway: MakeGateway) -> None:
    """Read through the anthropic SDK, a chat upstream's 400 written tokens came back streamed as
    ``cache_creation_input_tokens: 400`` beside ``cache_creation: {ephemeral_5m_input_tokens: 0,
    ephemeral_1h_input_tokens: 0}``: the stream's first event stated zeros, and its
    ``message_delta`` has no place for the breakdown (review). A chat upstream states no TTL:
    no breakdown, buffered or streamed."""
    gw = await make_gateway("", ", apis: [chat]")
    guide = CASES["openai-prompt-caching-guide-cache-write"]["usage"]
    usage = {"prompt_tokens": guide["input_tokens"], "completion_tokens": 2,
             "prompt_tokens_details": guide["input_tokens_details"]}  # fmt: skip
    ant = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    try:
        for stream in (False, True):
            gw.fake.script(_chat_answer("gpt-6.2-sol", usage)(stream))
            if stream:
                async with ant.messages.stream(model="gpt-6.2-sol", max_tokens=64, messages=HI) as s:  # type: ignore[arg-type]
                    message = await s.get_final_message()
            else:
                message = await ant.messages.create(model="gpt-6.2-sol", max_tokens=64, messages=HI)  # type: ignore[arg-type]
            assert message.usage.cache_creation_input_tokens == 400, stream
            split = message.usage.cache_creation
            assert split is None or split.ephemeral_5m_input_tokens + split.ephemeral_1h_input_tokens == 400, stream
    finally:
        await ant.close()

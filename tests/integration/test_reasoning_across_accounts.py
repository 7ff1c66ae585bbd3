"""Reasoning signed for another account, left out once so that a conversation goes on
(``policy/foreign_reasoning.py``, ``pipeline/reasoning_fix.py``).

Providers bind what they hand back of the model's reasoning to the account that got it. A pool
that moves a conversation to another key (the first one rate-limited) then sends the old key's
signatures to the new one, which refuses them; so does a conversation that comes back from a
deployment the gateway translated. Each fake deployment here is a key of its own organization
(``FakeUpstream.orgs``), which refuses another's signatures as Anthropic and OpenAI do. Clients
are the SDKs with stock settings.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.fake import gemini
from gateway.fake.gemini_rules import signed_for
from gateway.fake.messages import sign
from gateway.fake.responses_rules import seal
from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK, GEMINI_SKIP
from gateway.translate import sealed_thinking
from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Seq,
    Stream,
    chat_completion,
    data_events,
    response_object,
    responses_error,
)
from tests.unit.translate.messages_helpers import corpus_answer

THOUGHT = "The user wants Paris's weather: call the tool."
TOOLS: Any = [{"name": "get_weather", "description": "Weather of a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]  # fmt: skip


def thinking_then_call(org: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": [{"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT, org)},
                        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 30}}  # fmt: skip


def sunny() -> dict[str, Any]:
    return {**thinking_then_call("x"), "id": "msg_2", "content": [{"type": "text", "text": "Sunny in Paris."}],
            "stop_reason": "end_turn"}


@pytest.fixture
async def two_accounts(make_gateway: Any) -> AsyncIterator[tuple[Any, dict[str, FakeUpstream]]]:
    """A pool of two Anthropic keys, each of its own organization, each its own fake."""
    fakes: dict[str, FakeUpstream] = {}
    lines = []
    for name in ("a", "b"):
        fake = await FakeUpstream().start()
        fake.orgs = {f"key-{name}": f"org-{name}"}
        fakes[name] = fake
        lines.append(f"  - {{name: {name}, base_url: '{fake.url}', api_key: key-{name}, key_header: x-api-key, "
                     f"apis: [messages], models: ['claude-*']}}\n")  # fmt: skip
    pools = "pools:\n  - {name: claude, models: ['claude-*'], deployments: [a, b]}\n"
    gw = await make_gateway(pools, fake=fakes["a"], upstreams="".join(lines))
    yield gw, fakes
    for fake in fakes.values():
        await fake.close()


async def test_a_conversation_moved_to_another_account_mid_tool_loop_goes_on_without_its_thinking(
    two_accounts: Any,
) -> None:
    gw, fakes = two_accounts
    for name, fake in fakes.items():
        fake.always = Reply(200, thinking_then_call(f"org-{name}"))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client")
    try:
        asked: Any = [{"role": "user", "content": "Weather in Paris?"}]
        thinking: Any = {"type": "enabled", "budget_tokens": 2048}
        first = await client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=asked,
                                             tools=TOOLS, thinking=thinking)  # fmt: skip
        [home] = [n for n, f in fakes.items() if f.messages_requests()]
        other = "b" if home == "a" else "a"
        # The conversation's key is rate-limited from now on: the pool moves it to the other.
        fakes[home].keys.limited_until(f"key-{home}", time.time() + 3600)
        fakes[other].always = Reply(200, sunny())
        turn = [*asked, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                              "content": "sunny"}]}]  # fmt: skip
        raw = await client.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=4096, messages=turn, tools=TOOLS, thinking=thinking)
        second = await raw.parse()
    finally:
        await client.close()
    assert second.content[0].type == "text" and second.content[0].text == "Sunny in Paris."
    assert raw.headers["x-llm-reasoning-dropped"] == "thinking,thinking_off"
    assert raw.headers["x-llm-upstream"] == other
    refused, kept = (r.json() for r in fakes[other].messages_requests())
    assert refused["messages"][1]["content"][0]["type"] == "thinking"  # as the client sent it
    # Sent again without the other account's thinking, and without thinking: the tool loop's
    # turn no longer starts with a thinking block, which Anthropic requires while it is on.
    assert [b["type"] for b in kept["messages"][1]["content"]] == ["tool_use"]
    assert "thinking" not in kept
    assert kept["messages"][2] == refused["messages"][2] and kept["tools"] == refused["tools"]
    # One call refused on the way: 429 on the old key, the refusal and the answer on the new one.
    assert fakes[home].calls_by_key() == {f"key-{home}": 2}
    assert fakes[other].calls_by_key() == {f"key-{other}": 2}


async def test_thinking_of_earlier_turns_from_another_account_is_left_out_and_thinking_stays_on(
    two_accounts: Any,
) -> None:
    """Past the tool loop, only the earlier turns carry the old account's thinking: they are
    left out and the request keeps thinking on."""
    gw, fakes = two_accounts
    fakes["a"].always = fakes["b"].always = Reply(200, sunny())
    history: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT, "org-z")},
                                          {"type": "text", "text": "Let me see."}]},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    status, headers, body = await gw.messages({
        "model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": history,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    })  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-reasoning-dropped"] == "thinking"
    served = [f for f in fakes.values() if f.messages_requests()]
    [fake] = served
    refused, kept = (r.json() for r in fake.messages_requests())
    assert kept["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert kept["messages"][1]["content"] == [{"type": "text", "text": "Let me see."}]


async def test_an_unrelated_refusal_is_not_retried(two_accounts: Any) -> None:
    gw, fakes = two_accounts
    refusal = {"type": "error", "error": {"type": "invalid_request_error",
                                          "message": "messages: at least one message is required"}}
    for fake in fakes.values():
        fake.orgs, fake.always = {}, Reply(400, refusal)  # the thinking below is valid on either
    history: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)},
                                          {"type": "text", "text": "Let me see."}]},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    status, headers, _ = await gw.messages({"model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": history})
    assert status == 400
    assert "x-llm-reasoning-dropped" not in headers
    assert sum(len(f.messages_requests()) for f in fakes.values()) == 1


async def test_encrypted_reasoning_of_another_account_is_left_out_once(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", api_key: key-b")
    gw.fake.orgs = {"key-b": "org-b"}
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("org-a")}
    conversation: Any = [
        {"role": "user", "content": "Weather?"}, item,
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]  # fmt: skip
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client")
    try:
        raw = await client.responses.with_raw_response.create(
            model="gpt-5-codex", input=conversation, include=["reasoning.encrypted_content"], store=False,
            tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}])
    finally:
        await client.close()
    assert raw.parse().status == "completed"
    assert raw.headers["x-llm-reasoning-dropped"] == "reasoning"
    refused, kept = (r.json() for r in gw.fake.responses_requests())
    assert refused["input"][1] == item
    assert [i.get("type", "message") for i in kept["input"]] == ["message", "function_call", "function_call_output"]
    assert kept["include"] == ["reasoning.encrypted_content"]


async def test_the_gateways_own_thinking_carriage_never_reaches_an_openai_upstream(make_gateway: Any) -> None:
    """A Codex conversation that began on a Claude deployment carries Claude's thinking in the
    gateway's own ``encrypted_content``; passed to an OpenAI Responses upstream (a fallback, a
    pool's other deployment) it would be refused on every turn: it is left out before the send."""
    gw = await make_gateway()
    carried = {"type": "reasoning", "id": "rs_1", "summary": [],
               "encrypted_content": GATEWAY_THINKING_MARK + "W10"}  # fmt: skip
    own = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAABpOpenAIsOwn=="}
    conversation: Any = [
        {"role": "user", "content": "Weather?"}, carried,
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}, own,
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "user", "content": "Thanks"},
    ]  # fmt: skip
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": conversation})
    assert status == 200, body
    assert "x-llm-reasoning-dropped" not in headers
    [sent] = gw.fake.responses_requests()
    items = sent.json()["input"]
    assert carried not in items and own in items and len(items) == len(conversation) - 1
    assert json.loads(body)["status"] == "completed"


async def test_reasoning_the_gateway_gave_from_a_chat_upstream_is_left_out_when_a_fallback_keeps_no_record(
    make_gateway: Any,
) -> None:
    """A Responses client on a chat upstream gets the model's reasoning as a reasoning item the
    gateway made (no ``encrypted_content``: chat has none). Replayed, as Codex and the Agents
    SDK replay their output, to an OpenAI Responses fallback under ``store: false``, it names a
    record OpenAI never kept (404): the turn is asked once more without it."""
    chat, responses = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=chat, upstreams=(
            f"  - {{name: chat, base_url: '{chat.url}', apis: [chat], fallbacks: [resp]}}\n"
            f"  - {{name: resp, base_url: '{responses.url}', apis: [responses], models: ['none-*']}}\n"))  # fmt: skip
        answer = chat_completion(model="gpt-5-codex", content="Paris.")
        answer["choices"][0]["message"]["reasoning_content"] = "The capital of France."
        chat.script(Reply(200, answer))
        client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
        try:
            first = await client.responses.create(model="gpt-5-codex", input="Capital of France?", store=False)
            assert [i.type for i in first.output] == ["reasoning", "message"]
            chat.always = Reply(503, {"error": {"message": "The server is overloaded", "type": "server_error"}})
            replay = [{"role": "user", "content": "Capital of France?"},
                      *[i.model_dump(exclude_none=True) for i in first.output],
                      {"role": "user", "content": "And of Italy?"}]  # fmt: skip
            raw = await client.responses.with_raw_response.create(model="gpt-5-codex", input=replay, store=False)
        finally:
            await client.close()
        assert raw.parse().status == "completed"
        assert raw.headers["x-llm-upstream"] == "resp" and raw.headers["x-llm-reasoning-dropped"] == "reasoning"
        refused, kept = (r.json() for r in responses.responses_requests())
        assert [i.get("type") for i in refused["input"]][1] == "reasoning"
        assert "reasoning" not in [i.get("type") for i in kept["input"]]
    finally:
        await responses.close()
        await chat.close()


async def test_a_gemini_thought_signature_of_another_account_becomes_googles_stand_in_once(
    make_gateway: Any,
) -> None:
    """Gemini binds thought signatures to the account (sub2api #393); another key's answers
    "Corrupted thought signature.": the turn is asked again with the value Google gives for
    history from elsewhere."""
    fake = await FakeUpstream().start()
    try:
        fake.orgs = {"key-b": "org-b"}
        gw = await make_gateway(fake=fake, upstreams=(
            f"  - {{name: google, base_url: '{fake.url.removesuffix('/v1')}/v1beta', apis: [gemini], "
            "api_key: key-b}\n"))  # fmt: skip
        call = {"functionCall": {"id": "fc_1", "name": "ls", "args": {}}, "thoughtSignature": signed_for("org-a")}
        body = {"contents": [
            {"role": "user", "parts": [{"text": "list files"}]}, {"role": "model", "parts": [call]},
            {"role": "user", "parts": [{"functionResponse": {"id": "fc_1", "name": "ls", "response": {"output": "a"}}}]},
        ], "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {"type": "object"}}]}]}  # fmt: skip
        async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent", json=body,
                                   headers={"x-goog-api-key": "client"}) as r:  # fmt: skip
            assert r.status == 200, await r.text()
            assert r.headers["x-llm-reasoning-dropped"] == "thought_signature"
        refused, kept = (r.json() for r in fake.requests)
        assert refused["contents"][1]["parts"][0]["thoughtSignature"] == signed_for("org-a")
        assert kept["contents"][1]["parts"][0]["thoughtSignature"] == GEMINI_SKIP
    finally:
        await fake.close()


async def test_the_gateways_sealed_thinking_goes_to_google_as_its_stand_in_counted_too(make_gateway: Any) -> None:
    """A conversation that moved from a Claude route to a Gemini one carries Claude's thinking
    sealed into a signature (translate/sealed_thinking.py), which Google refuses: swapped for
    its stand-in on generateContent, with and without a model_map, and on countTokens, which
    sent the client's body as it came (review)."""
    block = corpus_answer("messages-thinking-then-tool-use.json")["body"]["content"][0]
    sealed = sealed_thinking.seal([block])
    assert sealed is not None
    contents = [
        {"role": "user", "parts": [{"text": "list files"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "fc_1", "name": "ls", "args": {}},
                                     "thoughtSignature": sealed}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc_1", "name": "ls", "response": {"output": "a"}}}]},
    ]  # fmt: skip
    body = {"contents": contents, "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {"type": "object"}}]}]}
    for mapped in ("", ", model_map: {'gemini-*': gemini-2.5-pro}"):
        fake = await FakeUpstream().start()
        try:
            gw = await make_gateway(fake=fake, upstreams=(
                f"  - {{name: google, base_url: '{fake.url.removesuffix('/v1')}/v1beta', apis: [gemini], "
                f"api_key: key-b{mapped}}}\n"))  # fmt: skip
            for path, doc in ((":generateContent", body), (":countTokens", {"contents": contents}),
                              (":countTokens", {"generateContentRequest": {**body, "model": "models/gemini-2.5-flash"}})):
                async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash" + path, json=doc,
                                           headers={"x-goog-api-key": "client"}) as r:  # fmt: skip
                    assert r.status == 200, await r.text()
            assert len(fake.requests) == 3
            for sent in fake.requests:
                assert GATEWAY_THINKING_MARK.encode() not in sent.body
                assert GEMINI_SKIP.encode() in sent.body
        finally:
            await fake.close()


async def test_the_gateways_sealed_thinking_stays_swapped_when_an_overflow_is_sent_again(make_gateway: Any) -> None:
    """The swap is made where a leg's call is built; the compressed retry of an overflow is
    written again from the client's payload, and took the seal to Google as it came: "Corrupted
    thought signature." where the retry had been answered (review)."""
    block = corpus_answer("messages-thinking-then-tool-use.json")["body"]["content"][0]
    sealed = sealed_thinking.seal([block])
    assert sealed is not None
    overflow = next(c for c in IN_SAMPLE if c["name"] == "gemini-overflow")
    history: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "fix the bug"}]}]
    for i in range(8):
        history += [{"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"n": i}, "id": f"c{i}"},
                                                 "thoughtSignature": f"s{i}"}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "read", "id": f"c{i}",
                                                                     "response": {"output": "y" * 60000}}}]}]  # fmt: skip
    history += [
        {"role": "model", "parts": [{"functionCall": {"id": "fc_1", "name": "ls", "args": {}}, "thoughtSignature": sealed}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc_1", "name": "ls", "response": {"output": "a"}}}]},
    ]  # fmt: skip
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=fake, upstreams=(
            f"  - {{name: google, base_url: '{fake.url.removesuffix('/v1')}/v1beta', apis: [gemini], api_key: k}}\n"))  # fmt: skip
        fake.script(Reply(overflow["status"], overflow["body"]))
        async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent",
                                   json={"contents": history}, headers={"x-goog-api-key": "client"}) as r:  # fmt: skip
            assert r.status == 200, await r.text()
            assert r.headers["x-llm-compressed"] == "true"
        first, retried = fake.requests
        assert len(retried.body) < len(first.body)
        for sent in (first, retried):
            assert GATEWAY_THINKING_MARK.encode() not in sent.body
            assert GEMINI_SKIP.encode() in sent.body
    finally:
        await fake.close()


def answering(org: str, steps: int = 2) -> Any:
    """A key of ``org`` as Anthropic answers: thinking (signed for ``org``) only when asked, a
    call until the loop has ``steps`` results, then the answer."""

    def step(payload: dict[str, Any]) -> Reply:
        thinking = payload.get("thinking")
        thinks = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
        results = sum(1 for m in payload["messages"] if isinstance(m.get("content"), list)
                      for b in m["content"] if b.get("type") == "tool_result")  # fmt: skip
        content: list[dict[str, Any]] = []
        if thinks:
            text = f"{org} thinks over {len(payload['messages'])} messages."
            content.append({"type": "thinking", "thinking": text, "signature": sign(text, org)})
        calls = bool(payload.get("tools")) and results < steps
        if calls:
            content.append({"type": "tool_use", "id": f"toolu_{org.replace('-', '')}{results}",
                            "name": "get_weather", "input": {"city": "Paris"}})  # fmt: skip
        else:
            content.append({"type": "text", "text": f"Sunny, says {org}."})
        return Reply(200, {**thinking_then_call(org), "content": content,
                           "stop_reason": "tool_use" if calls else "end_turn"})  # fmt: skip

    return step


def as_sent(message: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}


async def test_a_tool_loop_moved_to_another_account_goes_on_to_its_end_and_thinks_again_after(
    two_accounts: Any,
) -> None:
    """The loop's turn on the new key was answered without thinking (the rescue turned it off):
    its next steps go without thinking (Anthropic refuses them with it: "Expected `thinking` or
    `redacted_thinking`, but found `tool_use`"), and the user's next turn thinks again."""
    gw, fakes = two_accounts
    for name, fake in fakes.items():
        fake.always = answering(f"org-{name}")
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client")
    thinking: Any = {"type": "adaptive"}
    asked: Any = [{"role": "user", "content": "Weather in Paris?"}]
    headers = []
    try:
        first = await client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=asked,
                                             tools=TOOLS, thinking=thinking)  # fmt: skip
        [home] = [n for n, f in fakes.items() if f.messages_requests()]
        other = "b" if home == "a" else "a"
        fakes[home].keys.limited_until(f"key-{home}", time.time() + 3600)
        answer = first
        for _ in range(2):  # two tool results: the new key's call, then its answer
            call = next(b for b in answer.content if b.type == "tool_use")
            asked = [*asked, as_sent(answer),
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}]  # fmt: skip
            raw = await client.messages.with_raw_response.create(
                model="claude-sonnet-4-6", max_tokens=4096, messages=asked, tools=TOOLS, thinking=thinking)
            answer = await raw.parse()
            headers.append(raw.headers)
        assert answer.content[-1].type == "text", answer.content
        asked = [*asked, as_sent(answer), {"role": "user", "content": "And tomorrow?"}]
        last = await client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=asked,
                                            tools=TOOLS, thinking=thinking)  # fmt: skip
    finally:
        await client.close()
    assert [h["x-llm-upstream"] for h in headers] == [other, other]
    assert [h["x-llm-reasoning-dropped"] for h in headers] == ["thinking,thinking_off", "thinking,thinking_off"]
    sent = [r.json() for r in fakes[other].messages_requests()]
    # The move: refused once for the old key's thinking, then asked without it and without
    # thinking; the loop's next step without either, up front; the next turn thinks again.
    assert len(sent) == 4
    refused, moved, step, after = sent
    assert "thinking" in refused and "thinking" not in moved and "thinking" not in step
    assert after["thinking"] == thinking
    assert [b.type for b in last.content] == ["thinking", "text"]
    # The old key's thinking never went to the new key again once refused.
    assert all(b.get("type") != "thinking" for r in (moved, step, after) for m in r["messages"][:-1]
               if isinstance(m["content"], list) for b in m["content"])  # fmt: skip
    assert fakes[other].calls_by_key() == {f"key-{other}": 4}


async def test_after_a_move_a_turn_costs_no_refused_call_and_the_new_keys_thinking_stays(
    two_accounts: Any,
) -> None:
    """The first turn on the new key pays one refused call; the later ones none: the old key's
    thinking is left out before they are sent, the new key's own kept."""
    gw, fakes = two_accounts
    for name, fake in fakes.items():
        fake.always = answering(f"org-{name}")
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client")
    thinking: Any = {"type": "adaptive"}
    asked: Any = []
    home = other = ""
    try:
        for turn in range(1, 6):
            asked = [*asked, {"role": "user", "content": f"Turn {turn}: how are you?"}]
            if turn == 3:
                [home] = [n for n, f in fakes.items() if f.messages_requests()]
                other = "b" if home == "a" else "a"
                fakes[home].keys.limited_until(f"key-{home}", time.time() + 3600)
            answer = await client.messages.create(model="claude-sonnet-4-6", max_tokens=4096, messages=asked,
                                                  thinking=thinking)  # fmt: skip
            assert answer.content[0].type == "thinking"
            asked = [*asked, as_sent(answer)]
    finally:
        await client.close()
    sent = [r.json() for r in fakes[other].messages_requests()]
    assert fakes[other].calls_by_key() == {f"key-{other}": 4}  # turns 3 (refused, answered), 4 and 5
    last = sent[-1]
    kept = [b["signature"] for m in last["messages"] if m["role"] == "assistant"
            for b in m["content"] if b["type"] == "thinking"]  # fmt: skip
    assert len(kept) == 2 and all(s == sign_of(last, s) for s in kept)  # the new key's own, turns 3 and 4
    assert last["thinking"] == thinking


def sign_of(doc: dict[str, Any], signature: str) -> str:
    """The signature's block, signed again as the fake signs for org-a or org-b: which it is."""
    for m in doc["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("signature") == signature:
                return next(s for s in (sign(b["thinking"], "org-a"), sign(b["thinking"], "org-b")) if s == signature)
    raise AssertionError(signature)


async def test_unsigned_thinking_from_a_chat_relay_never_reaches_a_messages_upstream(make_gateway: Any) -> None:
    """Claude Code's history holds thinking a chat relay gave it (``signature: ""``): left out
    before the send to Anthropic, which refuses it, rather than after a refused call."""
    fake = await FakeUpstream().start()
    try:
        fake.always = Reply(200, sunny())
        gw = await make_gateway(fake=fake, upstreams=f"  - {{name: anthropic, base_url: '{fake.url}', api_key: k, "
                                                     "key_header: x-api-key, apis: [messages]}\n")  # fmt: skip
        history: Any = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "relayed", "signature": ""},
                                              {"type": "text", "text": "Let me see."}]},
            {"role": "user", "content": "And tomorrow?"},
        ]  # fmt: skip
        status, headers, body = await gw.messages({"model": "claude-sonnet-4-6", "max_tokens": 4096,
                                                   "messages": history, "thinking": {"type": "adaptive"}})  # fmt: skip
        assert status == 200, body
        [sent] = [r.json() for r in fake.messages_requests()]
    finally:
        await fake.close()
    assert sent["messages"][1]["content"] == [{"type": "text", "text": "Let me see."}]
    assert headers["x-llm-reasoning-dropped"] == "thinking"


async def test_a_refusal_of_the_deployments_own_thinking_still_leaves_every_block_out(make_gateway: Any) -> None:
    """The deployment refuses a block it issued itself (its text changed on the way): not a
    matter of whose it is, so every block goes, as before the gateway knew whose they were."""
    fake = await FakeUpstream().start()
    try:
        fake.always = answering("org-x")
        gw = await make_gateway(fake=fake, upstreams=f"  - {{name: anthropic, base_url: '{fake.url}', api_key: k, "
                                                     "key_header: x-api-key, apis: [messages]}\n")  # fmt: skip
        fake.orgs = {"k": "org-x"}
        asked: Any = [{"role": "user", "content": "Weather in Paris?"}]
        payload = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "thinking": {"type": "adaptive"}}
        status, _, body = await gw.messages({**payload, "messages": asked})
        assert status == 200, body
        first = json.loads(body)
        assert first["content"][0]["type"] == "thinking"
        first["content"][0]["thinking"] += " (edited)"  # the signature no longer holds
        asked = [*asked, {"role": "assistant", "content": first["content"]}, {"role": "user", "content": "And tomorrow?"}]
        status, headers, body = await gw.messages({**payload, "messages": asked})
        assert status == 200, body
        refused, kept = (r.json() for r in fake.messages_requests()[1:])
    finally:
        await fake.close()
    assert refused["messages"][1]["content"][0]["type"] == "thinking"
    assert [b["type"] for b in kept["messages"][1]["content"]] == ["text"]
    assert headers["x-llm-reasoning-dropped"] == "thinking"


async def test_a_loop_begun_without_thinking_is_refused_once_then_goes_on_without(make_gateway: Any) -> None:
    """A loop whose turn came without thinking from where the gateway could not see (a chat
    relay, a client that turned thinking on mid loop) is refused by Anthropic with thinking on:
    asked again without, once; its later steps go without from the start."""
    fake = await FakeUpstream().start()
    try:
        fake.always = answering("org-x", steps=3)
        gw = await make_gateway(fake=fake, upstreams=f"  - {{name: anthropic, base_url: '{fake.url}', api_key: k, "
                                                     "key_header: x-api-key, apis: [messages]}\n")  # fmt: skip
        payload: Any = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "tools": TOOLS}
        asked: Any = [{"role": "user", "content": "Weather in Paris?"}]
        status, _, body = await gw.messages({**payload, "messages": asked})  # no thinking asked
        dropped = []
        for _ in range(2):
            turn = json.loads(body)
            call = next(b for b in turn["content"] if b["type"] == "tool_use")
            asked = [*asked, {"role": "assistant", "content": turn["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny"}]}]  # fmt: skip
            status, headers, body = await gw.messages({**payload, "messages": asked, "thinking": {"type": "adaptive"}})
            assert status == 200, body
            dropped.append(headers["x-llm-reasoning-dropped"])
        sent = [r.json() for r in fake.messages_requests()]
    finally:
        await fake.close()
    assert dropped == ["thinking_off", "thinking_off"]
    assert ["thinking" in s for s in sent] == [False, True, False, False]  # one refused call in all


@pytest.fixture
async def two_openai_accounts(make_gateway: Any) -> AsyncIterator[tuple[Any, dict[str, FakeUpstream]]]:
    """A pool of two OpenAI Responses keys, each of its own organization, each its own fake."""
    fakes: dict[str, FakeUpstream] = {}
    lines = []
    for name in ("a", "b"):
        fake = await FakeUpstream().start()
        fake.orgs = {f"key-{name}": f"org-{name}"}
        fakes[name] = fake
        lines.append(f"  - {{name: {name}, base_url: '{fake.url}', api_key: key-{name}, apis: [responses], "
                     f"models: ['gpt-*']}}\n")  # fmt: skip
    pools = "pools:\n  - {name: oai, models: ['gpt-*'], deployments: [a, b]}\n"
    gw = await make_gateway(pools, fake=fakes["a"], upstreams="".join(lines))
    yield gw, fakes
    for fake in fakes.values():
        await fake.close()


def reasoning_answer(org: str) -> Any:
    """A key of ``org`` as OpenAI answers a reasoning model asked for ``reasoning.encrypted_content``
    with ``store: false``: a reasoning item sealed for ``org`` (its own), then the message;
    streamed as the Responses API streams one (each item added, then done with its content)."""

    def step(payload: dict[str, Any]) -> Any:
        n = len(payload["input"])
        reasoning = {"id": f"rs_{org}_{n}", "type": "reasoning", "summary": [],
                     "encrypted_content": seal(org, f"{n}")}  # fmt: skip
        done = response_object(text=f"Fine, says {org}.", rid=f"resp_{org}_{n}")
        message = done["output"][0]
        done["output"] = [reasoning, message]
        if not payload.get("stream"):
            return Reply(200, done)
        seq = Seq()
        shell = {**done, "status": "in_progress", "output": [], "usage": None}
        return Stream([
            seq("response.created", response=shell), seq("response.in_progress", response=shell),
            seq("response.output_item.added", output_index=0, item={**reasoning, "encrypted_content": None}),
            seq("response.output_item.done", output_index=0, item=reasoning),
            seq("response.output_item.added", output_index=1, item={**message, "status": "in_progress", "content": []}),
            seq("response.content_part.added", item_id=message["id"], output_index=1, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []}),
            seq("response.output_text.delta", item_id=message["id"], output_index=1, content_index=0,
                delta=message["content"][0]["text"], logprobs=[]),
            seq("response.output_item.done", output_index=1, item=message),
            seq("response.completed", response=done),
        ])  # fmt: skip

    return step


@pytest.mark.parametrize("stream", [False, True])
async def test_after_a_move_a_codex_turn_costs_no_refused_call_and_the_new_keys_reasoning_stays(
    two_openai_accounts: Any, stream: bool
) -> None:
    """Codex sends back every reasoning item with its ``encrypted_content`` (``store: false``).
    Moved to a key of another organization, the first turn there pays one refused call; the later
    ones none: the old key's items are left out before they are sent, the new key's own kept.
    Before, every later turn was refused once and then sent with no reasoning at all."""
    gw, fakes = two_openai_accounts
    for name, fake in fakes.items():
        fake.always = reasoning_answer(f"org-{name}")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    asked: list[Any] = []
    home = other = ""
    dropped, issued = [], []
    try:
        for turn in range(1, 6):
            asked = [*asked, {"role": "user", "content": f"Turn {turn}: how are you?"}]
            if turn == 3:
                [home] = [n for n, f in fakes.items() if f.responses_requests()]
                other = "b" if home == "a" else "a"
                fakes[home].keys.limited_until(f"key-{home}", time.time() + 3600)
            raw = await client.responses.with_raw_response.create(
                model="gpt-5-codex", input=asked, include=["reasoning.encrypted_content"], store=False,
                stream=stream)
            dropped.append(raw.headers.get("x-llm-reasoning-dropped"))
            if stream:
                events = [e async for e in raw.parse()]
                answer = next(e.response for e in events if e.type == "response.completed")
            else:
                answer = raw.parse()
            assert [i.type for i in answer.output] == ["reasoning", "message"]
            issued.append(answer.output[0].encrypted_content)
            asked = [*asked, *(i.model_dump(exclude_none=True) for i in answer.output)]
    finally:
        await client.close()
    assert fakes[other].calls_by_key() == {f"key-{other}": 4}  # turns 3 (refused, answered), 4 and 5
    assert dropped == [None, None, "reasoning", "reasoning", "reasoning"]
    last = fakes[other].responses_requests()[-1].json()
    kept = [i["encrypted_content"] for i in last["input"] if i.get("type") == "reasoning"]
    assert kept == issued[2:4] and all(seal(f"org-{other}") in c for c in kept)  # the new key's own, turns 3 and 4



def signed_gemini_answer(org: str, stream: bool) -> Any:
    """A key of ``org`` as a Gemini thinking model answers: its text part carries a thought
    signature bound to ``org`` (each answer's its own); streamed, on the stream's last chunk."""

    def step(payload: dict[str, Any]) -> Any:
        signature = signed_for(org, f"s{len(payload['contents'])}")
        if not stream:
            return Reply(200, gemini.response(parts=[{"text": f"Fine, says {org}.", "thoughtSignature": signature}],
                                              meta=gemini.usage()))  # fmt: skip
        chunks = gemini.stream_chunks(words=("Fine,", f" says {org}."))
        chunks[-1]["candidates"][0]["content"]["parts"][0]["thoughtSignature"] = signature
        return Stream(chunks)

    return step


@pytest.mark.parametrize("stream", [False, True])
async def test_after_a_move_a_gemini_turn_costs_no_refused_call_and_the_new_keys_signatures_stay(
    make_gateway: Any, stream: bool
) -> None:
    """Gemini CLI sends every model turn back with its thought signatures. Moved to a key of
    another account, the first turn there pays one refused call ("Corrupted thought signature.");
    the later ones none: the old key's signatures become Google's stand-in before they are sent,
    the new key's own kept. Before, every later turn was refused once, then sent with none."""
    fakes: dict[str, FakeUpstream] = {}
    lines = []
    try:
        for name in ("a", "b"):
            fake = fakes[name] = await FakeUpstream().start()
            fake.orgs = {f"key-{name}": f"org-{name}"}
            fake.always = signed_gemini_answer(f"org-{name}", stream)
            lines.append(f"  - {{name: {name}, base_url: '{fake.url.removesuffix('/v1')}/v1beta', "
                         f"api_key: key-{name}, apis: [gemini], models: ['gemini-*']}}\n")  # fmt: skip
        pools = "pools:\n  - {name: gem, models: ['gemini-*'], deployments: [a, b]}\n"
        gw = await make_gateway(pools, fake=fakes["a"], upstreams="".join(lines))
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        contents: list[Any] = []
        home = other = ""
        dropped, issued = [], []
        for turn in range(1, 6):
            contents = [*contents, {"role": "user", "parts": [{"text": f"Turn {turn}: how are you?"}]}]
            if turn == 3:
                [home] = [n for n, f in fakes.items() if f.requests]
                other = "b" if home == "a" else "a"
                fakes[home].keys.limited_until(f"key-{home}", time.time() + 3600)
            async with gw.session.post(f"{gw.base}/v1beta/models/gemini-3-pro-preview:{method}",
                                       json={"contents": contents}, headers={"x-goog-api-key": "client"}) as r:
                assert r.status == 200, await r.text()
                dropped.append(r.headers.get("x-llm-reasoning-dropped"))
                docs = [json.loads(d) for d in data_events(await r.read())] if stream else [await r.json()]
            parts = [p for d in docs for p in d["candidates"][0]["content"]["parts"]]
            issued += [p["thoughtSignature"] for p in parts if "thoughtSignature" in p]
            contents = [*contents, {"role": "model", "parts": parts}]
        sent = [r.json() for r in fakes[other].requests]
    finally:
        for fake in fakes.values():
            await fake.close()
    assert len(sent) == 4  # turns 3 (refused, answered), 4 and 5
    assert dropped == [None, None, "thought_signature", "thought_signature", "thought_signature"]
    signatures = [p["thoughtSignature"] for c in sent[-1]["contents"] for p in c["parts"] if "thoughtSignature" in p]
    assert signatures == [GEMINI_SKIP, GEMINI_SKIP, *issued[2:4]]  # the old key's stood in for, the new key's own


async def test_a_refusal_of_a_reasoning_item_the_deployment_issued_still_leaves_every_item_out(
    make_gateway: Any,
) -> None:
    """OpenAI names the item it could not verify. When that is one the refusing deployment
    issued (its key's organization changed its keys, say), what the gateway knows of whose is
    whose does not explain the refusal: every reasoning item goes, as before it knew."""
    gw = await make_gateway(upstream_yaml=", api_key: key-b")
    gw.fake.orgs = {"key-b": "org-b"}
    answer = reasoning_answer("org-b")
    own: list[str] = []

    def step(payload: dict[str, Any]) -> Any:
        sealed = [i.get("encrypted_content") for i in payload["input"] if i.get("type") == "reasoning"]
        if own and own[0] in sealed:  # no longer readable, though this key's own
            return responses_error(400, "The encrypted content for item rs_org-b_1 could not be verified. "
                                   "Reason: Encrypted content could not be decrypted or parsed.",
                                   "invalid_request_error", "invalid_encrypted_content")  # fmt: skip
        return answer(payload)

    gw.fake.always = step
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        asked: list[Any] = [{"role": "user", "content": "hi"}]
        first = await client.responses.create(model="gpt-5-codex", input=asked, store=False,
                                              include=["reasoning.encrypted_content"])  # fmt: skip
        own.append(first.output[0].encrypted_content)
        # And an item the gateway never relayed (another replica's, say): its origin unknown.
        elsewhere = {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAAAelsewhere=="}
        asked = [*asked, *(i.model_dump(exclude_none=True) for i in first.output), elsewhere,
                 {"role": "user", "content": "and?"}]  # fmt: skip
        raw = await client.responses.with_raw_response.create(
            model="gpt-5-codex", input=asked, store=False, include=["reasoning.encrypted_content"])
    finally:
        await client.close()
    assert raw.parse().status == "completed" and raw.headers["x-llm-reasoning-dropped"] == "reasoning"
    *_, refused, kept = (r.json() for r in gw.fake.responses_requests())
    assert sum(i.get("type") == "reasoning" for i in refused["input"]) == 2
    assert not [i for i in kept["input"] if i.get("type") == "reasoning"]


async def test_a_turn_moved_by_a_brief_limit_and_answered_after_the_reasoning_retry_moves_its_home(
    two_openai_accounts: Any,
) -> None:
    """Audit (Codex through a pool of keys of different organizations): the home limited for a
    few seconds at turn 3, the sibling refused the home's reasoning and answered it left out.
    That answer came from the resend, after the pool had given back the refusal, and the home
    stayed: turn 4 went home after its reset, with the sibling's reasoning, and was refused
    there too (one call more, and the sibling's cache lost). A sibling that answers a turn of
    the main model becomes its home however it answered (docs/pools.md)."""
    gw, fakes = two_openai_accounts
    for name, fake in fakes.items():
        fake.always = reasoning_answer(f"org-{name}")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0,
                                default_headers={"session-id": "s-codex"})  # as Codex names its session
    asked: list[Any] = []
    served = []
    home = other = ""
    try:
        for turn in range(1, 6):
            asked = [*asked, {"role": "user", "content": f"Turn {turn}: how are you?"}]
            if turn == 3:
                [home] = [n for n, f in fakes.items() if f.responses_requests()]
                other = "b" if home == "a" else "a"
                fakes[home].keys.limited_until(f"key-{home}", time.time() + 1)
            if turn == 4:
                await asyncio.sleep(1.2)  # the old home's reset
            raw = await client.responses.with_raw_response.create(
                model="gpt-5-codex", input=asked, include=["reasoning.encrypted_content"], store=False)
            served.append(raw.headers["x-llm-upstream"])
            asked = [*asked, *(i.model_dump(exclude_none=True) for i in raw.parse().output)]
    finally:
        await client.close()
    assert served == [home, home, other, other, other]
    assert fakes[home].calls_by_key() == {f"key-{home}": 3}  # turns 1 and 2, the 429
    assert fakes[other].calls_by_key() == {f"key-{other}": 4}  # turns 3 (refused, answered), 4 and 5
    assert gw.metric("llm_gateway_affinity_breaks_total", pool="oai", reason="failed") == 1

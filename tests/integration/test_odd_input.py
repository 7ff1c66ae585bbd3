"""Odd but possible input, found by a fuzz of every client API (one field at a time, from the
corpus's real requests): each was a 500 or a cut stream, and is now answered as the client's
API would answer it, or served.

- A lone UTF-16 surrogate ("\\ud83d", what JavaScript's JSON.stringify writes for a string cut
  mid-emoji, as a client truncating a long tool output does) is valid JSON but no UTF-8: a
  rewritten, compressed or translated request holding one could not be written.
- A number beyond a double's range (1e400) read as inf, sent on as the non-JSON Infinity.
- A document nested between the 255 levels orjson writes and the 1024 it reads.
- Gemini callers told apart by the loop breaker only by headers they never send.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakeupstream import FakeUpstream

CUT_EMOJI = '"be brief \\ud83d"'  # as the bytes arrive: an escape json reads, no UTF-8 writes


async def test_a_responses_stream_translated_for_a_request_holding_a_lone_surrogate_streams(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    body = '{"model": "gpt-5", "stream": true, "instructions": ' + CUT_EMOJI + ', "input": "hi"}'
    status, _, raw = await gw.responses(data=body.encode(), headers={"Content-Type": "application/json"})
    assert status == 200 and b"response.completed" in raw  # it was a 200 with nothing after it
    sent = json.loads(gw.fake.chat_requests()[0].body)
    assert sent["messages"][0]["content"] == "be brief \ufffd"


async def test_an_overflow_is_rescued_when_the_conversation_holds_a_lone_surrogate(make_gateway: Any) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 300
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + "log line " * 60}
             for i in range(12)]  # fmt: skip
    turns.append({"role": "user", "content": "PLACEHOLDER"})
    body = json.dumps({"model": "gpt-4o-mini", "messages": turns}).replace('"PLACEHOLDER"', CUT_EMOJI)
    status, headers, _ = await gw.chat(data=body.encode())
    assert status == 200 and headers["x-llm-compressed"] == "true"  # the rescue was a 500


async def test_a_number_beyond_a_double_is_refused_as_nan_is(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    body = b'{"model": "gpt-5", "input": "hi", "temperature": 1e400}'
    status, _, raw = await gw.responses(data=body, headers={"Content-Type": "application/json"})
    assert status == 400 and json.loads(raw)["error"]["code"] == "invalid_json"
    assert not gw.fake.requests  # it went upstream as "temperature": Infinity


async def test_a_document_nested_past_what_json_writes_is_refused_not_a_500(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages]")
    deep = '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + \
        '{"a": ' * 995 + "1" + "}" * 995 + "}"
    status, _, raw = await gw.chat(data=deep.encode())
    assert status in (200, 400), raw
    if status == 400:
        assert json.loads(raw)["error"]["code"] == "invalid_json"


async def test_the_loop_breaker_tells_gemini_callers_apart_by_their_key(make_gateway: Any) -> None:
    async with FakeUpstream() as fake:
        fake.keys.revoke("badkey")
        fake.require_key = True
        root = fake.url.removesuffix("/v1")
        gw = await make_gateway("loop_breaker: {enabled: true}\n", fake=fake,
                                upstreams=f"  - {{name: google, base_url: '{root}/v1beta', apis: [gemini]}}\n")  # fmt: skip
        path = "/v1beta/models/gemini-2.5-flash:generateContent"
        body = {"contents": [{"role": "user", "parts": [{"text": "the same"}]}]}
        for key, expected in (("badkey", 400), ("goodkey", 200)):
            async with gw.session.post(gw.base + path, json=body, headers={"x-goog-api-key": key}) as r:
                assert r.status == expected, (key, await r.text())
        async with gw.session.post(gw.base + path + "?key=goodkey", json=body) as r:
            assert r.status == 200 and "x-llm-from-memory" not in r.headers


async def test_a_lone_surrogate_in_a_forwarded_requests_model_leaves_metrics_scrapable(make_gateway: Any) -> None:
    # Counted by the gateway (a chat-only upstream) and forwarded as it came (embeddings): the
    # model was read without mending, and its label made every later GET /metrics a 500.
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    count = b'{"model": "claude-sonnet-4-5\\ud800", "messages": [{"role": "user", "content": "hi"}]}'
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", data=count,
                               headers={"anthropic-version": "2023-06-01", "Content-Type": "application/json"}) as r:
        assert r.status == 200, await r.text()
    async with gw.session.post(gw.base + "/v1/embeddings", data=b'{"model": "emb\\ud800", "input": "x"}',
                               headers={"Content-Type": "application/json"}) as r:
        await r.read()
    requests = await gw.scraped("llm_gateway_requests_total")  # a 500 before
    models = {dict(labels)["model"] for labels in requests}
    assert {"claude-sonnet-4-5\ufffd", "emb\ufffd"} <= models, models

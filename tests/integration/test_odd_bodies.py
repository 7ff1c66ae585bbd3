"""Odd request bodies on every API endpoint, native and translated: whatever the gateway
refuses it refuses with a 4xx in the endpoint's own error shape, it never fails with a 5xx of
its own, and it answers normally afterwards. The bodies come from a seeded generator, so a
failure reproduces; the fake upstream refuses non-JSON as the real APIs do (gateway/fake)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.fakeupstream import FakeUpstream

ENDPOINTS = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/responses": "openai",
    "/v1/completions": "openai",
    "/v1/embeddings": "openai",
    "/v1beta/models/gpt-4o-mini:generateContent": "google",
    "/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse": "google",
}
VALUES: list[Any] = [None, True, False, 0, -1, 1.5, 2**70, "", "x", "é", [], [None], {}, {"a": 1},
                     [[]], [{}], ["x"], {"type": None}, {"role": "user"}]  # fmt: skip
KEYS = ["model", "messages", "input", "contents", "stream", "max_tokens", "max_output_tokens", "tools",
        "tool_choice", "system", "instructions", "temperature", "stop", "n", "metadata", "thinking",
        "reasoning", "generationConfig", "systemInstruction", "previous_response_id", "store",
        "response_format", "text", "stream_options"]  # fmt: skip
RAW = [b"{", b"[]", b"null", b"123", b'"x"', b'{"model": "gpt-4o-mini", "messages": [}', b"\xff\xfe", b" " * 10]


def message(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.4:
        content = rng.choice([*VALUES, "hi", [{"type": "text", "text": "hi"}], [{"type": "image", "source": {}}],
                              [{"type": "tool_result"}], [{"type": "tool_use", "id": 1}]])  # fmt: skip
        return {"role": rng.choice(["user", "assistant", "system", "tool", "developer", "model", 5, None]),
                "content": content}  # fmt: skip
    if pick < 0.6:
        return {"role": "user", "parts": rng.choice([[{"text": "hi"}], [{}], None, "x", [{"functionCall": {}}]])}
    return rng.choice(VALUES)


def body(rng: random.Random) -> bytes:
    doc: dict[str, Any] = {}
    for key in rng.sample(KEYS, rng.randint(0, 8)):
        many = key in ("messages", "input", "contents") and rng.random() < 0.5
        doc[key] = [message(rng) for _ in range(rng.randint(0, 3))] if many else rng.choice(VALUES)
    if rng.random() < 0.6:
        doc["model"] = rng.choice(["gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-pro", ""])
    if rng.random() < 0.6:
        doc.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps(doc).encode()


def in_its_shape(api: str, doc: Any) -> bool:
    if api == "anthropic":
        return isinstance(doc, dict) and doc.get("type") == "error" and isinstance(doc.get("error"), dict)
    return isinstance(doc, dict) and isinstance(doc.get("error"), dict)


@pytest.mark.parametrize("apis", ["", ", apis: [chat]"], ids=["native", "chat-only upstream"])
async def test_odd_bodies_get_a_4xx_in_their_apis_shape_and_the_gateway_stays_well(make_gateway, apis: str) -> None:
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(upstream_yaml=apis, fake=fake)
        rng = random.Random(38)
        sent = [(path, raw) for path in ENDPOINTS for raw in RAW]
        sent += [(rng.choice(list(ENDPOINTS)), body(rng)) for _ in range(150)]
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-x",
                   "anthropic-version": "2023-06-01"}  # fmt: skip
        statuses: dict[int, int] = {}
        for path, data in sent:
            async with gw.session.post(gw.base + path, data=data, headers=headers) as r:
                raw = await r.read()
                status, kind = r.status, r.headers.get("Content-Type", "")
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, (path, data, status, raw[:300])
            if status >= 400:
                assert "json" in kind, (path, data, status, raw[:300])
                assert in_its_shape(ENDPOINTS[path], json.loads(raw)), (path, data, raw[:300])
        assert statuses.get(200, 0) > 0 and sum(n for s, n in statuses.items() if s >= 400) > 0, statuses
        assert (await gw.chat())[0] == 200
        assert (await gw.messages())[0] == 200
    finally:
        await fake.close()

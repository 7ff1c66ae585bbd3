"""A chat upstream that cuts its text in UTF-16 code units (a JavaScript server: one reported in
elie222/rakazo#416, "a delta chunk ended with an orphaned high surrogate (\\ud83d)") ends one
chunk on the first half of an emoji and starts the next with the second. Translated, neither
half can be written as UTF-8: a Messages client's connection was cut mid-answer and a Gemini
client's stream left the second chunk out and ended as a success. Each client now gets all
the text, the split character as U+FFFD, and a normal end.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from tests.fakeupstream import Stream, chunk

SPLIT = [chunk({"role": "assistant", "content": "ok \ud83d"}), chunk({"content": "\udc4d done"}), chunk({}, "stop")]
SHOWN = "ok \ufffd\ufffd done"


async def test_a_messages_client_gets_every_word_and_a_normal_end(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(Stream(SPLIT))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="dummy")
    try:
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            message = await stream.get_final_message()
        assert message.content[0].text == SHOWN and message.stop_reason == "end_turn"  # type: ignore[union-attr]
    finally:
        await client.close()


async def test_a_responses_client_gets_every_word_and_a_normal_end(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(Stream(SPLIT))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="dummy")
    try:
        async with client.responses.stream(model="gpt-4o-mini", input="hi") as stream:
            response = await stream.get_final_response()
        assert response.output_text == SHOWN and response.status == "completed"
    finally:
        await client.close()


async def test_a_gemini_client_gets_every_word_and_a_normal_end(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(Stream(SPLIT))
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                               json=body, headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        assert r.status == 200
        raw = (await r.read()).decode()
    docs = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
    text = "".join(p.get("text", "") for d in docs for c in d.get("candidates", [])
                   for p in c.get("content", {}).get("parts", []))  # fmt: skip
    assert text == SHOWN and docs[-1]["candidates"][0]["finishReason"] == "STOP"

"""OpenAI's Conversations API belongs to the Responses API: a gateway whose first upstream is a
chat server sent ``POST /v1/conversations`` there (the Agents SDK's OpenAIConversationsSession
makes one per session), which answered its own 404 or, being lax, a 200 for a conversation
no Responses upstream holds (audit of the real Agents SDK, 2026-11-30)."""

from __future__ import annotations

import openai
import pytest

from tests.fakeupstream import FakeUpstream


async def test_a_conversation_goes_to_the_upstream_that_speaks_responses(make_gateway) -> None:  # type: ignore[no-untyped-def]
    fake = await FakeUpstream().start()
    try:
        upstreams = (f"  - {{name: chatty, base_url: '{fake.url}', api_key: sk-chat, apis: [chat]}}\n"
                     f"  - {{name: openai, base_url: '{fake.url}', api_key: sk-resp, apis: [responses]}}\n")
        gw = await make_gateway(fake=fake, upstreams=upstreams)
        client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
        conversation = await client.conversations.create(metadata={})
        await client.conversations.items.list(conversation.id)
        await client.close()
        assert [(r.path, r.headers["Authorization"]) for r in fake.requests] == [
            ("/v1/conversations", "Bearer sk-resp"), (f"/v1/conversations/{conversation.id}/items", "Bearer sk-resp")]
    finally:
        await fake.close()


async def test_a_conversation_with_no_responses_upstream_is_refused_in_openais_shape(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        await client.conversations.create(metadata={})
    await client.close()
    assert refused.value.code == "no_translation"
    assert "speaks chat, not responses" in refused.value.message
    assert gw.fake.requests == []

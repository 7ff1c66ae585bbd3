"""The fake upstream's Conversations API (gateway/fake/conversations.py): the calls the OpenAI
Agents SDK's OpenAIConversationsSession makes (create with no items, add a turn's items, list
them ascending, or descending with a limit, delete), a Responses turn run in a conversation
adding to it, each conversation its project's; and the 404 of the providers that have none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.fake import ScenarioUpstream
from gateway.fake.conversations import Conversations

# A turn as the SDK adds it: the user's easy input message, then the model's output items.
TURN = [{"content": "Weather in Paris?", "role": "user"},
        {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city":"Paris"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Paris"}]  # fmt: skip


def body(reply: Any) -> Any:
    assert reply.status == 200, reply.body
    return reply.body


def test_a_conversation_holds_the_items_added_listed_in_either_order() -> None:
    store = Conversations(clock=lambda: 1_700_000_000)
    made = body(store.answer("POST", "/v1/conversations", {}, {"items": []}, "p1"))
    assert made == {"id": made["id"], "object": "conversation", "created_at": 1_700_000_000, "metadata": {}}
    root = f"/v1/conversations/{made['id']}/items"
    added = body(store.answer("POST", root, {}, {"items": TURN}, "p1"))
    assert added["object"] == "list" and added["has_more"] is False and len(added["data"]) == 3
    message, call, result = added["data"]
    # The easy input message is kept as the API lists one: typed, with an id and parts.
    assert message["type"] == "message" and message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"] == [{"type": "input_text", "text": "Weather in Paris?"}]
    assert call["id"] == "fc_1" and result["id"].startswith("fco_")
    listed = body(store.answer("GET", root, {"order": "asc"}, {}, "p1"))
    assert [i["id"] for i in listed["data"]] == [message["id"], "fc_1", result["id"]]
    assert (listed["first_id"], listed["last_id"]) == (message["id"], result["id"])
    # The SDK's pop_item: the newest one, descending with limit 1, then deleted by id.
    newest = body(store.answer("GET", root, {"order": "desc", "limit": "1"}, {}, "p1"))
    assert [i["id"] for i in newest["data"]] == [result["id"]] and newest["has_more"] is True
    after = body(store.answer("GET", root, {"order": "asc", "after": message["id"]}, {}, "p1"))
    assert [i["id"] for i in after["data"]] == ["fc_1", result["id"]]
    assert body(store.answer("DELETE", f"{root}/{result['id']}", {}, {}, "p1"))["id"] == made["id"]
    assert len(body(store.answer("GET", root, {}, {}, "p1"))["data"]) == 2
    gone = body(store.answer("DELETE", f"/v1/conversations/{made['id']}", {}, {}, "p1"))
    assert gone == {"id": made["id"], "object": "conversation.deleted", "deleted": True}
    assert store.answer("GET", root, {}, {}, "p1").status == 404


def test_another_projects_conversation_is_not_found_and_bad_calls_are_refused() -> None:
    store = Conversations()
    cid = body(store.answer("POST", "/v1/conversations", {}, {"metadata": {"topic": "demo"}}, "p1"))["id"]
    other = store.answer("GET", f"/v1/conversations/{cid}/items", {}, {}, "p2")
    assert other.status == 404 and other.body["error"]["message"] == f"Conversation with id '{cid}' not found."
    too_many = store.answer("POST", f"/v1/conversations/{cid}/items", {}, {"items": [TURN[0]] * 21}, "p1")
    assert too_many.status == 400 and too_many.body["error"]["param"] == "items"
    assert store.answer("GET", f"/v1/conversations/{cid}/items", {"order": "up"}, {}, "p1").status == 400
    assert store.answer("GET", f"/v1/conversations/{cid}/items", {"limit": "0"}, {}, "p1").status == 400
    assert store.answer("PUT", f"/v1/conversations/{cid}", {}, {}, "p1").status == 404


@pytest.fixture
async def fake() -> AsyncIterator[tuple[ScenarioUpstream, aiohttp.ClientSession]]:
    f = ScenarioUpstream(log=lambda _: None)
    await f.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield f, http
    finally:
        await f.close()


async def test_a_responses_turn_in_a_conversation_adds_its_input_and_answer(fake: Any) -> None:
    f, http = fake
    root = f.url.removesuffix("/v1")
    async with http.post(f"{root}/v1/conversations", json={}) as r:
        cid = (await r.json())["id"]
    for stream in (False, True):
        async with http.post(f"{root}/v1/responses", json={"model": "gpt-5", "input": "hi", "stream": stream,
                                                           "conversation": cid}) as r:  # fmt: skip
            assert r.status == 200
            await r.read()
    async with http.get(f"{root}/v1/conversations/{cid}/items", params={"order": "asc"}) as r:
        items = (await r.json())["data"]
    assert [(i["type"], i["role"]) for i in items] == [("message", "user"), ("message", "assistant")] * 2
    assert items[1]["content"][0]["type"] == "output_text"


@pytest.mark.parametrize(("path", "headers", "ctype"), [
    ("/v1/conversations", {"x-api-key": "sk-ant-x", "anthropic-version": "2023-06-01"}, "application/json"),
    ("/v1beta/conversations", {"x-goog-api-key": "k"}, "text/html"),
])  # fmt: skip
async def test_a_provider_without_conversations_answers_404(fake: Any, path: str, headers: dict[str, str],
                                                            ctype: str) -> None:  # fmt: skip
    """What the gateway meets when it sends the SDK's conversation calls to a Messages or Gemini
    upstream: those APIs have no such path."""
    f, http = fake
    async with http.post(f.url.removesuffix("/v1") + path, json={"items": []}, headers=headers) as r:
        assert r.status == 404 and r.headers["Content-Type"].startswith(ctype)
        text = await r.text()
    assert "not_found_error" in text if ctype == "application/json" else f"<code>{path}</code>" in text
    assert not f.conversations.held

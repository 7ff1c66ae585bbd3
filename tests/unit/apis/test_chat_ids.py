"""Tool call ids as a chat upstream takes them (gateway/apis/chat/ids.py): the gateway's own
Gemini ids in a chat client's conversation go to a native chat upstream within OpenAI's 40
characters, the same on the call and its result; every other id as the client wrote it."""

from __future__ import annotations

import json

from gateway.apis import OPENAI_CHAT
from gateway.apis.base import Inbound
from gateway.apis.chat.ids import chat_request_ids, to_chat_id
from gateway.fake import chat_rules
from gateway.pipeline.admit import parse_json_object
from gateway.translate.chat_gemini import signature

CARRIED = signature.carry("call_5a1e", "CiRCAQUBQEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE")
OWN = "call_" + "x" * 40  # a client's own long id: its own to send


def conversation(*ids: str) -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "user", "content": "run ls"}, {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "Bash", "arguments": "{}"}} for i in ids]}]  # fmt: skip
    messages += [{"role": "tool", "tool_call_id": i, "content": "a.txt"} for i in ids]
    return {"model": "gpt-4o", "messages": messages}


def test_a_digest_is_at_most_40_and_the_same_for_the_same_id() -> None:
    assert to_chat_id("toolu_01ABCDEFGHJKLMNPQRSTUVWX") == "toolu_01ABCDEFGHJKLMNPQRSTUVWX"
    assert len(to_chat_id(CARRIED)) == 40 and to_chat_id(CARRIED) == to_chat_id(CARRIED) != to_chat_id(CARRIED + "A")


def test_the_gateways_gemini_ids_go_within_40_and_a_clients_own_as_it_wrote_them() -> None:
    doc = conversation(CARRIED, "call_1", OWN)
    out = chat_request_ids(doc)
    assert out is not None
    calls = out["messages"][1]["tool_calls"]
    assert [c["id"] for c in calls] == [to_chat_id(CARRIED), "call_1", OWN]
    assert [m["tool_call_id"] for m in out["messages"][2:]] == [to_chat_id(CARRIED), "call_1", OWN]
    assert doc == conversation(CARRIED, "call_1", OWN)  # the client's document is not changed
    assert chat_request_ids(conversation("call_1", OWN)) is None


def test_prepare_writes_them_only_when_the_bytes_carry_one() -> None:
    for ids, changed in (((CARRIED,), True), (("call_1",), False)):
        body = json.dumps(conversation(*ids)).encode()
        doc = parse_json_object(body)
        assert isinstance(doc, dict)
        inbound = OPENAI_CHAT.admit(body, doc)
        assert isinstance(inbound, Inbound)
        prepared, _ = OPENAI_CHAT.prepare(inbound, stream_usage=True)
        assert (prepared is not inbound.payload) is changed
        assert chat_rules.refusal("/v1/chat/completions", prepared) is None

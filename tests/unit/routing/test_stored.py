"""Which stored object a request names, and which an answer stores (gateway/routing/stored.py):
pure, never raising on what a client sends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.fake.responses import response_object
from gateway.routing.stored import (
    STORED_TTL_S,
    answer_id,
    continued,
    continued_in_body,
    key,
    named_in_path,
    stores,
)


@pytest.mark.parametrize(("payload", "named"), [
    ({"input": "more", "previous_response_id": "resp_1"}, "resp_1"),
    ({"input": "more", "conversation": "conv_1"}, "conv_1"),
    ({"input": "more", "conversation": {"id": "conv_2"}}, "conv_2"),
    ({"input": "more", "previous_response_id": "resp_1", "conversation": "conv_1"}, "resp_1"),
    ({"input": "hi"}, None),
    ({"previous_response_id": None, "conversation": None}, None),
    ({"previous_response_id": ""}, None),
    ({"previous_response_id": 7}, None),
    ({"previous_response_id": "resp 1/../x"}, None),  # no id the API writes
    ({"conversation": {"id": ["x"]}}, None),
    ([], None),
    ("resp_1", None),
])  # fmt: skip
def test_a_request_continues_its_previous_response_else_its_conversation(payload: Any, named: str | None) -> None:
    assert continued(payload) == named


@pytest.mark.parametrize(("path", "named"), [
    ("/v1/responses/resp_1", "resp_1"),
    ("/v1/responses/resp_1/input_items", "resp_1"),
    ("/v1/responses/resp_1/cancel", "resp_1"),
    ("/v1/conversations/conv_1", "conv_1"),
    ("/v1/conversations/conv_1/items", "conv_1"),
    ("/v1/conversations/conv_1/items/msg_1", "conv_1"),
    ("/v1/responses", None),
    ("/v1/responses/", None),
    ("/v1/responses/input_tokens", None),
    ("/v1/responses/compact", None),
    ("/v1/conversations", None),
    ("/v1/chat/completions", None),
    ("/v1/responses/a%20b", None),
])  # fmt: skip
def test_a_path_names_the_stored_object_under_it(path: str, named: str | None) -> None:
    assert named_in_path(path) == named


def test_counting_a_chained_turns_tokens_names_its_previous_response() -> None:
    body = json.dumps({"model": "gpt-4o", "input": "more", "previous_response_id": "resp_1"}).encode()
    assert continued_in_body("/v1/responses/input_tokens", body) == "resp_1"
    assert continued_in_body("/v1/responses/input_tokens", b'{"model": "gpt-4o", "input": "hi"}') is None
    assert continued_in_body("/v1/responses/input_tokens", b'{"previous_response_id": ') is None
    assert continued_in_body("/v1/embeddings", body) is None


def test_an_answer_stores_its_id_when_it_is_a_response_or_a_conversation() -> None:
    assert answer_id(json.dumps(response_object(rid="resp_7")).encode()) == "resp_7"
    # Written with the id elsewhere than first: parsed.
    assert answer_id(json.dumps({"object": "response", "id": "resp_8", "output": []}).encode()) == "resp_8"
    assert answer_id(b'{"id": "conv_1", "object": "conversation", "created_at": 1, "metadata": {}}') == "conv_1"
    assert answer_id(b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}') is None
    assert answer_id(b'{"object": "response", "id": ') is None
    assert answer_id(b"") is None


def test_only_a_response_asked_not_to_be_stored_is_not() -> None:
    assert stores({"input": "hi"}) and stores({"input": "hi", "store": True})
    assert not stores({"input": "hi", "store": False})


def test_keys_are_bounded_and_the_same_everywhere() -> None:
    long = "resp_" + "x" * 200
    assert key(long) == key(long) and len(key(long)) == 27 and key("resp_1") != key("resp_2")
    assert STORED_TTL_S == 30 * 24 * 3600

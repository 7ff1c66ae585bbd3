"""Which relayed requests a key with rules may make: decided by method and path (pure), and a
body is read for its model only when its media type is JSON."""

from __future__ import annotations

import pytest

from gateway.keys.registry import KeySpec
from gateway.pipeline.accounting import unheld_path
from gateway.pipeline.admit import is_json, model_of
from gateway.pipeline.outcome import RequestState

LIMITED = KeySpec("alice", models=("gpt-4o-mini*",))


def _state(key: KeySpec | None) -> RequestState:
    state = RequestState("req-1", 0.0)
    state.key = key
    return state


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/embeddings"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions/"),
    ("POST", "/v1/responses/compact"), ("POST", "/v1/messages/count_tokens"),
])  # fmt: skip
def test_a_post_naming_its_model_to_an_endpoint_answered_at_once_is_held(method: str, path: str) -> None:
    assert unheld_path(_state(LIMITED), method, path, "gpt-4o-mini") is None
    refused = unheld_path(_state(LIMITED), method, path, None)
    assert refused is not None and refused.status == 403


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/files"), ("DELETE", "/v1/files/file-1"), ("GET", "/v1/responses/resp_123"),
    ("GET", "/v1/messages/batches/b/results"), ("POST", "/v1/batches/b/cancel"), ("POST", "/v1/batches"),
    ("POST", "/v1/messages/batches"), ("GET", "/v1/embeddings"), ("PUT", "/v1/completions"),
    ("POST", "/v1/responses/resp_1/cancel"), ("POST", "/v1/chat/completions/chatcmpl-1"),
])  # fmt: skip
def test_anything_else_is_refused_whatever_model_its_body_names(method: str, path: str) -> None:
    refused = unheld_path(_state(LIMITED), method, path, "gpt-4o-mini")
    assert refused is not None and refused.status == 403
    assert refused.own is not None and refused.own.code == "path_not_allowed"


@pytest.mark.parametrize("key", [None, KeySpec("root", models=("gpt-4o-mini*",), admin=True), KeySpec("free")])
def test_an_admin_a_key_without_rules_and_no_key_relay_anything(key: KeySpec | None) -> None:
    assert unheld_path(_state(key), "GET", "/v1/files", None) is None


def test_model_listings_go_through() -> None:
    assert unheld_path(_state(LIMITED), "GET", "/v1/models", None) is None
    assert unheld_path(_state(LIMITED), "HEAD", "/v1/models/gpt-4o-mini", None) is None


@pytest.mark.parametrize(("ctype", "json"), [
    ("application/json", True), ("Application/JSON; charset=utf-8", True), (" application/json ;x=1", True),
    ("application/vnd.api+json", True), ("text/plain; a=json", False), ("application/jsonx", False),
    ("text/json-ish", False), ("", False), ("multipart/form-data; boundary=json", False),
])  # fmt: skip
def test_a_body_is_json_by_its_media_type_not_by_a_search_for_json(ctype: str, json: bool) -> None:
    assert is_json(ctype) is json
    assert (model_of(b'{"model": "m"}', ctype) == "m") is json

"""Text nested past json's recursion (``"[" * 3000``) where a translation parses arguments, and
a request too deep for a translation to walk: each was a RecursionError, a 500."""

from __future__ import annotations

import base64
from typing import Any

from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK
from gateway.translate.base import UNPARSED, Refusal, Target, call_arguments
from gateway.translate.depth import deepest_path, field_of, request_in
from gateway.translate.messages_chat.answer import INVALID_ARGUMENTS, tool_input
from gateway.translate.responses_chat.answer import custom_input
from gateway.translate.responses_chat.thinking import unseal
from gateway.translate.responses_chat.tool_search import call_item

DEEP = "[" * 3000 + "]" * 3000


def test_arguments_too_deep_to_parse_are_kept_as_their_text() -> None:
    assert call_arguments(DEEP) == {UNPARSED: DEEP}  # a client's past call
    assert tool_input(DEEP) == {INVALID_ARGUMENTS: DEEP}  # a chat upstream's call, to Messages
    assert custom_input(DEEP) == DEEP  # to a Responses client's custom tool
    assert call_item("ts_1", "c1", DEEP, "completed")["arguments"] == {}  # as a cut call's are


def test_sealed_thinking_too_deep_to_read_is_dropped_as_any_unreadable_is() -> None:
    sealed = GATEWAY_THINKING_MARK + base64.urlsafe_b64encode(DEEP.encode()).decode()
    assert unseal({"type": "reasoning", "encrypted_content": sealed}) == []


def _schema(levels: int) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"secret_name": s}}
    return s


def test_the_refusal_names_the_field_where_the_schema_begins_and_no_property() -> None:
    body = {"model": "m", "tools": [{"type": "function", "function": {"name": "f", "parameters": _schema(3)}}]}
    path = deepest_path(body)
    assert path[:5] == ["tools", 0, "function", "parameters", "properties"] and len(path) == 11
    assert field_of(path) == "tools[0].function.parameters"
    assert field_of(["metadata", "a", "b"]) == "metadata"  # no schema: the top-level member only


class _Recursing:
    def request(self, payload: Any, target: Target) -> dict[str, Any]:
        raise RecursionError


def test_a_translation_that_runs_out_of_recursion_is_a_refusal() -> None:
    body = {"model": "m", "response_format": {"type": "json_schema", "json_schema": {"schema": _schema(2)}}}
    refused = request_in(_Recursing(), body, Target("m"))  # type: ignore[arg-type]
    assert isinstance(refused, Refusal) and refused.code == "untranslatable_request"
    assert refused.message.startswith("response_format.json_schema.schema is nested too deeply")
    assert "secret_name" not in refused.message

"""apis/model_list.py: an upstream's list read whatever API it speaks, each entry written in
the shape the caller reads."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis import model_list
from gateway.apis.model_list import ANTHROPIC, GOOGLE, OPENAI

# One Model as Google's models.list describes it (https://ai.google.dev/api/models).
FLASH = {"name": "models/gemini-2.5-flash", "version": "001", "displayName": "Gemini 2.5 Flash",
         "inputTokenLimit": 1048576, "supportedGenerationMethods": ["generateContent", "countTokens"]}  # fmt: skip


def test_googles_list_is_read_by_name() -> None:
    doc = {"models": [FLASH, {"name": "tunedModels/x"}, {"name": "models/"}, "junk"], "nextPageToken": "t"}
    assert model_list.listed(doc) == ([("gemini-2.5-flash", FLASH)], False)


@pytest.mark.parametrize("doc", [
    {"object": "list", "data": [{"id": "gpt-4o", "object": "model"}, {"id": 5}, "x"]},
    {"data": [{"id": "gpt-4o", "type": "model"}], "has_more": True},
])  # fmt: skip
def test_openai_and_anthropic_lists_are_read_by_id(doc: dict[str, Any]) -> None:
    found = model_list.listed(doc)
    assert found is not None
    assert [mid for mid, _ in found[0]] == ["gpt-4o"] and found[1] is (doc.get("has_more") is True)


@pytest.mark.parametrize("doc", [None, [], {"error": {"code": 404}}, {"models": "x"}])
def test_anything_else_is_no_list(doc: Any) -> None:
    assert model_list.listed(doc) is None


def test_a_google_entry_in_each_shape() -> None:
    assert model_list.entry(FLASH, "gemini-2.5-flash", GOOGLE, "g") is FLASH  # as it came
    assert model_list.entry(FLASH, "gemini-2.5-flash", OPENAI, "g") == {
        "id": "gemini-2.5-flash", "object": "model", "created": 0, "owned_by": "g"}  # fmt: skip
    assert model_list.entry(FLASH, "gemini-2.5-flash", ANTHROPIC, "g") == {
        "type": "model", "id": "gemini-2.5-flash", "display_name": "Gemini 2.5 Flash",
        "created_at": "1970-01-01T00:00:00Z"}  # fmt: skip


def test_an_openai_entry_for_a_google_caller_is_a_gemini_model() -> None:
    made = model_list.entry({"id": "gpt-4o", "object": "model"}, "gpt-4o", GOOGLE, "o")
    assert made["name"] == "models/gpt-4o" and "generateContent" in made["supportedGenerationMethods"]

"""Attachments a request names by reference, in each API's shape (gateway/keys/references.py):
reserved at a set figure, since their bytes are not in the request."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.keys.references import ReferenceTokens, referenced

PNG = "data:image/png;base64,iVBORw0KGgo="


def messages(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": list(parts)}]}


@pytest.mark.parametrize(("payload", "counts"), [
    # Anthropic Messages: by URL and by Files API id; base64 and text are in the bytes.
    (messages({"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}), (1, 0)),
    (messages({"type": "document", "source": {"type": "file", "file_id": "file_011"}}), (1, 0)),
    (messages({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
              {"type": "image", "source": {"type": "file", "file_id": "file_012"}}), (0, 2)),
    (messages({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
              {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}), (0, 0)),
    # ... and inside a tool result, or the system prompt.
    (messages({"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/shot.png"}}]}), (0, 1)),
    ({"system": [{"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}],
      "messages": []}, (1, 0)),
    # OpenAI chat: an image URL (not a data: URL), a file by id (not file_data).
    (messages({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
              {"type": "image_url", "image_url": {"url": PNG}}), (0, 1)),
    (messages({"type": "file", "file": {"file_id": "file-abc"}},
              {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}}),
     (1, 0)),
    # OpenAI Responses.
    ({"input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-abc"},
        {"type": "input_file", "file_url": "https://example.com/a.pdf"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
        {"type": "input_image", "file_id": "file-img"},
        {"type": "input_image", "image_url": "https://example.com/a.png"},
        {"type": "input_image", "image_url": PNG},
        {"type": "input_text", "text": "compare"}]}]}, (2, 2)),
    ({"input": [{"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_image", "image_url": "https://example.com/shot.png"}]}]}, (0, 1)),
    ({"input": "just text"}, (0, 0)),
    # Gemini: fileData by its MIME type, inlineData in the bytes, cachedContent a document.
    ({"contents": [{"role": "user", "parts": [
        {"fileData": {"mimeType": "application/pdf", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/a"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://bucket/a.jpg"}},
        {"file_data": {"mime_type": "video/mp4", "file_uri": "https://www.youtube.com/watch?v=x"}},
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
        {"text": "what is this?"}]}]}, (2, 1)),
    ({"cachedContent": "cachedContents/abc", "contents": [{"role": "user", "parts": [{"text": "go on"}]}]}, (1, 0)),
    # Tool schemas are not content: a property named like a part is not one.
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"file": {"type": "file", "file": {
            "file_id": "x"}}}}}}]}, (0, 0)),
])  # fmt: skip
def test_each_apis_references_are_counted_by_kind(payload: dict[str, Any], counts: tuple[int, int]) -> None:
    assert referenced(payload) == counts


def test_the_reservation_is_the_configured_figure_per_reference() -> None:
    payload = messages({"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
                       {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                       {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}})
    assert ReferenceTokens().of(payload) == 25_000 + 2 * 2_500
    assert ReferenceTokens(document=1_000, image=10).of(payload) == 1_020
    assert ReferenceTokens().of({"messages": [{"role": "user", "content": "hi"}]}) == 0

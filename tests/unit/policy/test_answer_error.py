"""A 2xx body whose top level is an error document is an error of the status it names
(gateway/policy/answer_error.py); an answer is never one, whatever error it mentions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.upstream import COMPLETION, MESSAGES_BODY, RESPONSES_BODY
from gateway.fake import gemini
from gateway.fake.chat import chat_completion
from gateway.fake.messages import anthropic_message
from gateway.fake.responses import response_object
from gateway.fake.scenarios import OPENROUTER_ERROR_200
from gateway.policy.answer_error import error_status_of

# A live OpenRouter error as quoted in open-webui/computer#293 (metadata abridged).
OPENROUTER_429 = {"error": {"message": "Provider returned error", "code": 429, "metadata": {
    "raw": "z-ai/glm-5.3-flash is temporarily rate-limited upstream. Please retry shortly",
    "provider_name": "BaseTen", "limit_source": "upstream_provider_shared_pool"}}}  # fmt: skip


def _b(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("doc", "status"), [
    (OPENROUTER_ERROR_200, 502),
    (OPENROUTER_429, 429),
    ({**OPENROUTER_429, "user_id": "user_x"}, 429),  # OpenRouter adds the caller's id beside it
    ({"error": {"code": 402, "message": "Insufficient credits"}}, 402),
    # Another API's own error envelope under a 200: its status read as an error event's is.
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "r"}, 529),
    ({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}, 503),
    ({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}, 429),
    # No HTTP error status in it: the upstream failed without saying how.
    ({"error": {"message": "The server had an error", "type": "server_error", "code": None}}, 502),
    ({"error": {"code": 200, "message": "odd"}}, 502),
])  # fmt: skip
def test_an_error_document_stands_for_its_status(doc: dict[str, Any], status: int) -> None:
    assert error_status_of(_b(doc)) == status
    assert error_status_of(json.dumps(doc, indent=2).encode()) == status


@pytest.mark.parametrize("body", [
    COMPLETION, MESSAGES_BODY, RESPONSES_BODY,
    _b(chat_completion("m")), _b(anthropic_message()), _b(response_object()), _b(gemini.answer("g")),
    # A Responses response that failed is still a response: its client reads its status.
    _b({**response_object(), "status": "failed", "output": [], "error": {"code": "server_error", "message": "x"}}),
    # An answer carrying an error object somewhere, or quoting one in its text.
    _b({**chat_completion("m"), "error": {"message": "partial"}}),
    _b(chat_completion("m", 'the log said {"error": {"code": 500}}')),
    _b({"object": "response", "error": {"code": "x"}}),
    _b({"type": "message", "error": {"type": "x"}}),
    # Not an error object, or not a document at all.
    _b({"error": "boom"}), _b([{"error": {"code": 503}}]), b"<html>200 OK</html>", b"", b'{"error": {',
])  # fmt: skip
def test_an_answer_or_anything_else_is_no_error_document(body: bytes) -> None:
    assert error_status_of(body) is None

"""The ``error`` of a ``response.failed`` event the gateway writes, and the response around it.

A Responses client reads ``response.error.code`` against a closed set: openai-python's
``types/responses/response_error.py`` (3.57.0) types ``ResponseError.code`` as a ``Literal``
of ``SCHEMA_CODES`` below, so a client validating against it refuses an event that ends a
stream with the gateway's own ``stream_broken`` or an Anthropic upstream's ``overloaded_error``. Codex
(codex-rs ``codex-api/src/sse/responses.rs``, ``process_sse``) acts on four codes of a
``response.failed``: ``context_length_exceeded`` (it says the thread ran out of room in the
context window and does not retry), ``insufficient_quota`` and ``usage_not_included`` (it stops
with its own message), ``rate_limit_exceeded`` (it waits as long as the message's "try again in
Ns" says); any other code it retries as a broken stream. Three of those four are missing from
the SDK's set, yet Codex looks for them in this very event (and OpenAI sends the overflow there:
``openai-responses-stream-failed-context-length-exceeded`` in tests/corpus/wild.json): the
agent's behaviour decides, so an overflow and a spent budget keep them.

So ``code`` is the provider's own when Codex reads it, else the one the error's class has among
those (overflow, budget, rate limit), else the provider's own when the schema has it, else
``server_error``. The gateway's or provider's own code goes in ``x_llm_code``, beside
``x_llm_error_type`` and ``retryable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Ending
from gateway.errors import ErrorType

SCHEMA_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "misalignment_policy_violation", "vector_store_timeout", "invalid_image", "invalid_image_format",
    "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
    "unsupported_image_media_type", "empty_image_file", "failed_to_download_image", "image_file_not_found",
})  # fmt: skip
CODEX_CODES = frozenset(
    {"context_length_exceeded", "insufficient_quota", "usage_not_included", "rate_limit_exceeded"}
)
_BY_CLASS = {
    ErrorType.CONTEXT_OVERFLOW: "context_length_exceeded",
    ErrorType.BUDGET: "insufficient_quota",
    ErrorType.RATE_LIMIT: "rate_limit_exceeded",
}
_FALLBACK = "server_error"

# What a response object must carry to be read as one (openai-python's ``Response``: its
# required members), at the API's defaults for a request that did not set them.
_REQUIRED: dict[str, Any] = {"output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def failed_code(own: str, error_type: ErrorType) -> str:
    """The ``response.error.code`` for an error of this class whose own code is ``own``."""
    if own in CODEX_CODES:
        return own
    if error_type in _BY_CLASS:
        return _BY_CLASS[error_type]
    return own if own in SCHEMA_CODES else _FALLBACK


def failed_error(ending: Ending) -> dict[str, Any]:
    """``response.error`` for a stream the gateway ends."""
    c = ending.classification
    own = ending.code or c.provider_code or c.type.value
    return {
        "code": failed_code(own, c.type), "message": ending.message,
        "x_llm_code": own, "x_llm_error_type": c.type.value, "retryable": c.retryable,
    }  # fmt: skip


def failed_response(response: Mapping[str, Any], ending: Ending) -> dict[str, Any]:
    """``response`` (as the stream's ``response.created`` gave it) failed with ``ending``."""
    doc = {**_REQUIRED, **response, "object": "response", "status": "failed"}
    doc["error"] = failed_error(ending)
    return doc

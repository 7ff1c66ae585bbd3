"""The wire APIs the gateway speaks; see ``base.py`` for what a dialect owns."""

from __future__ import annotations

from gateway.apis.base import Dialect
from gateway.apis.chat.wire import OpenAIChat
from gateway.apis.gemini.wire import GeminiGenerate
from gateway.apis.messages.wire import AnthropicMessages
from gateway.apis.responses.wire import OpenAIResponses

OPENAI_CHAT: Dialect = OpenAIChat()
ANTHROPIC_MESSAGES: Dialect = AnthropicMessages()
OPENAI_RESPONSES: Dialect = OpenAIResponses()
GEMINI: Dialect = GeminiGenerate()

# Each gets the full pipeline at its path.
DIALECTS: tuple[Dialect, ...] = (OPENAI_CHAT, ANTHROPIC_MESSAGES, OPENAI_RESPONSES, GEMINI)


def dialect_for_errors(
    path: str, headers_have_anthropic_version: bool, gemini_caller: bool = False
) -> Dialect:
    """Which envelope a gateway-made error takes on a path without a full dialect:
    Anthropic clients always send ``anthropic-version``, and read only Anthropic's shape;
    ``/v1beta/`` is the Gemini API's alone, and so is a caller with a Gemini key
    (``x-goog-api-key`` or ``?key=``) on ``/v1/models``, a path OpenAI's API has too."""
    if path.startswith("/v1/messages") or headers_have_anthropic_version:
        return ANTHROPIC_MESSAGES
    if path.startswith("/v1beta/") or gemini_caller:
        return GEMINI
    return OPENAI_CHAT


# By the names config uses in ``upstreams[].apis``.
DIALECT_FOR_API: dict[str, Dialect] = {d.api: d for d in DIALECTS}


def gemini_call(method: str, path: str) -> bool:
    """A POST to ``/v1/models/{model}:{method}``, the Gemini API's call of a model's method
    under ``/v1/`` that matches no route of the gateway's (google-genai sends a model "a/b" as
    ``/v1/models/a/b:generateContent``). OpenAI's API has no POST there (its
    ``/v1/models/{id}`` takes GET and DELETE, and a fine-tune's id holds colons)."""
    return method == "POST" and path.startswith("/v1/models/") and ":" in path.rpartition("/")[2]


# The Gemini API's resources under ``/v1/`` beside its models (google-genai's caches, files,
# batches, tunings, file search stores): none is OpenAI's, Anthropic's or a translation's, so
# routed to an upstream that does not speak Gemini each is refused there in Google's words.
# Before, a chat upstream was sent them with the operator's key, and the SDK got that server's
# OpenAI-shaped 404 (``caches.create``: one upstream call, ``APIError 404 None``).
_GEMINI_ROOTS = ("/v1/cachedContents", "/v1/tunedModels", "/v1/fileSearchStores", "/v1/operations",
                 "/v1/corpora", "/v1/auth_tokens", "/v1/generatedFiles")  # fmt: skip
# OpenAI's API has these two as well: Gemini's only for a caller with a Gemini key.
_GEMINI_CALLER_ROOTS = ("/v1/files", "/v1/batches")


def gemini_resource(path: str, gemini_caller: bool) -> bool:
    """A path of the Gemini API's resources other than a model's methods (``gemini_call``)."""
    roots = _GEMINI_ROOTS + _GEMINI_CALLER_ROOTS if gemini_caller else _GEMINI_ROOTS
    return any(path == root or path.startswith((root + "/", root + ":")) for root in roots)


def api_of_path(path: str) -> str | None:
    """The API a ``/v1/...`` path belongs to, for the paths that belong to one API only
    (``/v1/models`` and ``/v1/embeddings`` do not). OpenAI's Conversations API holds
    Responses turns and has no counterpart elsewhere: sent to a chat or Messages upstream, it
    was answered by whichever upstream came first (a chat server's 404, or a fake's 200)."""
    for root, api in (("/v1/messages", "messages"), ("/v1/responses", "responses"), ("/v1/chat", "chat"),
                      ("/v1/conversations", "responses")):  # fmt: skip
        if path == root or path.startswith(root + "/"):
            return api
    return None

"""Which conversation a request belongs to, so that a pool sends every turn of it to the
deployment whose prompt cache already holds its prefix.

The evidence, strongest first; the first found decides:

1. A session id the client names in a header. Claude Code: ``X-Claude-Code-Session-Id``
   (tests/corpus/requests/claude-code-*.json). Codex 0.169: ``session-id`` and ``thread-id``,
   equal to each other and constant over a run's turns (tests/corpus/requests/codex-*.json).
   Earlier Codex sent ``session_id`` (openai/codex, codex-rs/codex-api/src/requests/headers.rs
   at 546585f) and, around 0.50, ``conversation_id`` with the same value (as proxies that
   imitate that Codex send it). Not ``x-client-request-id``, named for one request, nor
   ``x-codex-window-id``, whose ``:N`` suffix counts compactions.
2. An id in the body. Anthropic ``metadata.user_id`` as Claude Code fills it: a JSON string
   whose ``session_id`` is the header's id (2.1.197), or ``user_<hash>_account_<uuid>
   _session_<uuid>`` in older versions; any other user_id is taken whole. The Responses
   ``conversation`` (an id, or ``{"id": ...}``; ConversationParam in openai-client-base, made
   from OpenAI's API spec: https://docs.rs/crate/openai-client-base/latest/source/docs/
   ConversationParam.md). ``prompt_cache_key``, which Codex sets to its session id.
3. The conversation's opening: the system prompt and the first user message, text only.
   Later turns append to a conversation and never change its opening, and Claude Code moves
   ``cache_control`` between blocks from turn to turn, so block metadata is left out; so is
   Claude Code's ``x-anthropic-billing-header`` system line, which differs between runs of
   one version (``cc_version=2.1.197.b79`` / ``.001`` in the corpus).

A Responses request chained by ``previous_response_id`` carries only its new turn: its
opening is not the conversation's, so without an id it gets no key rather than a wrong one.
Where it goes is not affinity's to decide anyway: only the key that stored its previous response
can read it (routing/stored.py; pipeline/pool.py's ``stored_route``).

Keys are ``id:`` or ``open:`` and 24 hex digits of a SHA-256: bounded, and never the client's
text. An id found in a header and the same id found in the body give the same key, so a
conversation keeps its key whichever of them a turn carries.

Pure: no I/O; a malformed body yields None or a weaker key, never an exception.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

# In the order they are trusted; looked up in lower case (CIMultiDictProxy matches any case).
# session-id before thread-id: should a Codex sub-agent ever get a thread of its own, keeping
# the whole session on one deployment costs some spreading of load but never a cache hit.
_SESSION_HEADERS = (
    "x-claude-code-session-id",
    "session-id",
    "thread-id",
    "session_id",
    "conversation_id",
)

_BILLING_LINE = "x-anthropic-billing-header:"
_SYSTEM_ROLES = frozenset({"system", "developer"})


def _digest(prefix: str, parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return prefix + h.hexdigest()[:24]


def _utf8(text: str) -> bytes:
    # surrogatepass: JSON may carry lone surrogates, and headers decoded with surrogateescape.
    return text.encode("utf-8", "surrogatepass")


def _id_key(value: str) -> str:
    return _digest("id:", (_utf8(value),))


def _claude_code_session(user_id: str) -> str:
    """The session id inside Claude Code's metadata.user_id, else the whole user_id."""
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return user_id
        session = parsed.get("session_id") if isinstance(parsed, dict) else None
        return session if isinstance(session, str) and session else user_id
    _, found, session = user_id.rpartition("_session_")
    return session if found and session else user_id


def _body_id(api: str, payload: Mapping[str, Any]) -> str | None:
    if api == "messages":
        metadata = payload.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, Mapping) else None
        if isinstance(user_id, str) and user_id.strip():
            return _claude_code_session(user_id.strip())
    if api == "responses":
        conversation = payload.get("conversation")
        if isinstance(conversation, Mapping):
            conversation = conversation.get("id")
        if isinstance(conversation, str) and conversation.strip():
            return conversation.strip()
    cache_key = payload.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key.strip():
        return cache_key.strip()
    return None


def _texts(content: Any) -> Iterator[str]:
    """The text of a message's content: a string, or the text of its parts and blocks."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, Mapping) and isinstance(text := part.get("text"), str):
                yield text


def _role(item: Any) -> Any:
    return item.get("role") if isinstance(item, Mapping) else None


def _opening(api: str, payload: Mapping[str, Any]) -> tuple[list[str], list[str]] | None:
    """The (system, first user) texts that open the conversation; None when it has none."""
    system: list[str] = []
    if api == "messages":
        system.extend(t for t in _texts(payload.get("system")) if not t.startswith(_BILLING_LINE))
        turns = payload.get("messages")
    elif api == "responses":
        system.extend(_texts(payload.get("instructions")))
        turns = payload.get("input")
        if isinstance(turns, str):
            return system, [turns]
    elif api == "gemini":
        return _gemini_opening(payload)
    else:
        turns = payload.get("messages")
    if not isinstance(turns, list):
        return (system, []) if system else None
    for item in turns:
        if _role(item) not in _SYSTEM_ROLES:
            break
        system.extend(_texts(item.get("content")))
    user = next((item for item in turns if _role(item) == "user"), None)
    return system, list(_texts(user.get("content"))) if user is not None else []


def _gemini_opening(payload: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A Gemini request's ``systemInstruction`` (either spelling, a Content or a string) and
    its first user turn's text parts (Gemini CLI's session context, then the prompt)."""
    instruction = payload.get("systemInstruction") or payload.get("system_instruction")
    system = list(_texts(instruction.get("parts") if isinstance(instruction, Mapping) else instruction))
    contents = payload.get("contents")
    turns = contents if isinstance(contents, list) else []
    user = next((c for c in turns if isinstance(c, Mapping) and c.get("role", "user") == "user"), None)
    return system, list(_texts(user.get("parts"))) if user is not None else []


def _opening_key(api: str, payload: Mapping[str, Any]) -> str | None:
    opening = _opening(api, payload)
    if opening is None or opening == ([], []):
        return None
    system, user = opening

    def parts() -> Iterator[bytes]:
        # A tag per text keeps "system A, user B" apart from "system A B".
        for tag, texts in ((b"\x00s", system), (b"\x00u", user)):
            for text in texts:
                yield tag
                yield _utf8(text)

    return _digest("open:", parts())


def conversation_key(api: str, headers: Mapping[str, str], payload: Mapping[str, Any]) -> str | None:
    """The same short key for every turn of one conversation, and another for each other
    conversation; None when the request carries nothing to tell. ``api`` is "chat",
    "messages", "responses" or "gemini"; a header id decides without reading the body."""
    for name in _SESSION_HEADERS:
        value = headers.get(name)
        if value and (value := value.strip()):
            return _id_key(value)
    if not isinstance(payload, Mapping):
        return None
    if (found := _body_id(api, payload)) is not None:
        return _id_key(found)
    if api == "responses" and payload.get("previous_response_id"):
        return None
    return _opening_key(api, payload)


# Roles a conversation has before any answer: the instructions and the user's own turns.
_OPENING_ROLES = frozenset({"system", "developer", "user"})


def opens_conversation(api: str, payload: Mapping[str, Any]) -> bool:
    """Whether the request is certainly its conversation's first turn: it carries no earlier
    answer (no assistant or model turn, no tool call or its result, no reasoning item) and
    points to none held by the provider (a Responses ``previous_response_id`` or
    ``conversation``). Batch and evaluation traffic is mostly such one-turn requests, each a
    conversation of its own; a pool claims no shared home for one (gateway/state/affinity.py).
    When in doubt, False: a later turn taken for a first one could move off its cache."""
    if not isinstance(payload, Mapping):
        return False
    if api == "responses":
        if payload.get("previous_response_id") or payload.get("conversation"):
            return False
        turns = payload.get("input")
        if isinstance(turns, str):
            return True
        # An item without a type is a message (EasyInputMessage); any other type (function_call,
        # function_call_output, reasoning, item_reference, ...) comes of an earlier answer.
        return isinstance(turns, list) and all(
            isinstance(item, Mapping) and item.get("type", "message") == "message"
            and item.get("role") in _OPENING_ROLES for item in turns
        )  # fmt: skip
    if api == "gemini":
        contents = payload.get("contents")
        # A function response needs the model's call before it: a model turn is an answer.
        return isinstance(contents, list) and all(
            isinstance(c, Mapping) and c.get("role", "user") == "user"
            and not any(isinstance(p, Mapping) and ("functionResponse" in p or "function_response" in p)
                        for p in (c.get("parts") or ()))
            for c in contents
        )  # fmt: skip
    turns = payload.get("messages")
    if not isinstance(turns, list):
        return False
    if api == "messages":
        # A tool_result answers an assistant's tool_use: its turn is not the first either.
        return all(_role(m) == "user" and not any(
            isinstance(b, Mapping) and b.get("type") == "tool_result"
            for b in (m.get("content") if isinstance(m.get("content"), list) else ()))
            for m in turns)  # fmt: skip
    return all(_role(m) in _OPENING_ROLES for m in turns)

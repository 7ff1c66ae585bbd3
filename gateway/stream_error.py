"""The first error event of a recorded stream body, found the way the gateway's readers find it.

Used where a whole stream is at hand (``llm-gateway classify --stream``, the corpus tests), so
that an error event is read by the same dialect reader and classified by the same rules as in
``pipeline/attempt.py`` and ``pipeline/relay.py``.
"""

from __future__ import annotations

from typing import Any

from gateway.apis import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES
from gateway.apis.base import Dialect, EventKind
from gateway.sse import EventSplitter

DIALECT_BY_API: dict[str, Dialect] = {
    "chat": OPENAI_CHAT, "messages": ANTHROPIC_MESSAGES, "responses": OPENAI_RESPONSES,
}  # fmt: skip


def first_error_event(api: str, body: bytes) -> dict[str, Any] | None:
    """The error payload the ``api`` dialect's reader reports for ``body``, or None."""
    reader = DIALECT_BY_API[api].reader(False)
    splitter = EventSplitter()
    for raw in [*splitter.feed(body), *splitter.feed(b"\n\n")]:
        if reader.kind(raw, committed=False) is EventKind.ERROR:
            return reader.error
    return None

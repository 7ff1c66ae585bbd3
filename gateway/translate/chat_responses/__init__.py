"""OpenAI chat completions clients on an OpenAI Responses upstream (OpenAI's Responses-only
models, gpt-5-codex and its kin; a server that speaks only Responses), and through chat every
other client API the gateway translates to chat (Messages, Gemini).

``request.py`` carries the request, ``answer.py`` the buffered answer, ``stream.py`` the stream
back. What is carried, dropped or refused, and why: docs/translation/chat_responses.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.translate.base import Context, Known, Refusal, Target, held
from gateway.translate.chat_responses.answer import chat_completion
from gateway.translate.chat_responses.request import function_names, to_responses
from gateway.translate.chat_responses.stream import ChatStream

# The chat request's fields that no answer translated back to chat reads.
UNREAD = frozenset({"messages", "tools", "functions"})
# The tools stay for the answer only when it has names to give back (translate/names.py).
UNREAD_NAMED = UNREAD - {"tools"}


class ChatToResponses:
    client = "chat"
    upstream = "responses"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        return to_responses(payload, target)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()  # its table's drops are said there, not per request

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return chat_completion(doc, ctx, int(self._clock()))

    def stream(self, ctx: Context, known: Known | None = None) -> ChatStream:
        return ChatStream(ctx, int(self._clock()), known)

    def held(self, ctx: Context) -> Context:
        # Its answers read ``stream_options``, and the tools when names were mapped.
        return held(ctx, UNREAD_NAMED if function_names(ctx.request.get("tools")).mapped else UNREAD)


__all__ = ["ChatStream", "ChatToResponses"]

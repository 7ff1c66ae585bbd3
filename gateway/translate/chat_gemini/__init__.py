"""OpenAI chat completions clients on a Gemini API upstream, and through chat every other
client API (Messages, Responses) the gateway translates to chat.

``request.py`` carries the request, ``answer.py`` the buffered answer and the stream back,
``signature.py`` says where a Gemini thoughtSignature rides meanwhile. What is carried,
dropped or refused, and why: docs/translation/chat_gemini.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.translate.base import Context, Known, Refusal, Target, held
from gateway.translate.chat_gemini.answer import ChatStream, chat_completion
from gateway.translate.chat_gemini.request import function_names, to_gemini

# The chat request's fields that no answer translated back to chat reads.
UNREAD = frozenset({"messages", "tools", "functions"})
# The tools stay for the answer only when it has names to give back (translate/names.py).
UNREAD_NAMED = UNREAD - {"tools"}


class ChatToGemini:
    client = "chat"
    upstream = "gemini"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        return to_gemini(payload, target)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()  # its table's drops are said there, not per request

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return chat_completion(doc, ctx, int(self._clock()))

    def stream(self, ctx: Context, known: Known | None = None) -> ChatStream:
        return ChatStream(ctx, int(self._clock()), known)

    def held(self, ctx: Context) -> Context:
        # Its answers read ``stream_options``, and the tools when names were mapped.
        return held(ctx, UNREAD_NAMED if function_names(ctx.request.get("tools")).mapped else UNREAD)


__all__ = ["ChatStream", "ChatToGemini"]

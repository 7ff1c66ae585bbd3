"""Gemini API clients (Gemini CLI, the google-genai SDKs) on an OpenAI chat completions
upstream, and through chat on every other API the gateway translates to.

``request.py`` carries the request, ``answer.py`` a buffered answer back, ``stream.py`` a
stream back event by event. What is carried, dropped or refused, and why:
docs/translation/gemini_chat.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate.base import Context, Known, Refusal, Target, held
from gateway.translate.gemini_chat.answer import answer, estimate_input_tokens
from gateway.translate.gemini_chat.names import calls_kept, names_for
from gateway.translate.gemini_chat.request import to_chat
from gateway.translate.gemini_chat.stream import GeminiStream

UNREAD = frozenset({"contents", "systemInstruction", "system_instruction", "tools"})
# The tools stay for the answer only when it has names to give back (gemini_chat/names.py),
# and of the conversation the names its calls give.
UNREAD_NAMED = UNREAD - {"tools"}


class GeminiToChat:
    client = "gemini"
    upstream = "chat"

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        return to_chat(payload, target)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()  # its table's drops are said there, not per request

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return answer(doc, ctx)

    def stream(self, ctx: Context, known: Known | None = None) -> GeminiStream:
        return GeminiStream(ctx, known)

    def held(self, ctx: Context) -> Context:
        # Its answers read ``generationConfig`` and the prompt estimate, made now.
        tools, contents = ctx.request.get("tools"), ctx.request.get("contents")
        named = names_for(tools, contents).mapped
        estimate = estimate_input_tokens(ctx.request, ctx.request_bytes)
        kept = held(ctx, UNREAD_NAMED if named else UNREAD, estimate)
        if named and contents is not None:
            kept.request = {**kept.request, "contents": calls_kept(contents)}
        return kept


__all__ = ["GeminiStream", "GeminiToChat"]

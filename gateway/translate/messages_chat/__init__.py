"""Anthropic Messages clients (Claude Code, the anthropic SDKs) on an OpenAI chat
completions upstream (llama.cpp, llama-cpp-python, vLLM, TGI, OpenAI-compatible hosts).

``request.py`` carries the request, ``answer.py`` a buffered answer back, ``stream.py`` a
stream back event by event. What is carried, dropped or refused, and why:
docs/translation/messages_chat.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate.base import Context, Known, held
from gateway.translate.messages_chat.answer import answer, estimate_input_tokens
from gateway.translate.messages_chat.request import declared_tools, function_names, to_chat
from gateway.translate.messages_chat.stream import ChatToMessagesStream

UNREAD = frozenset({"messages", "system", "tools"})
# The tools stay for the answer only when it has names to give back (translate/names.py).
UNREAD_NAMED = UNREAD - {"tools"}


class MessagesToChat:
    client = "messages"
    upstream = "chat"
    # The module's functions themselves, not methods that call them: a Python frame fewer on
    # every translated request and answer (~500 instructions each on 3.11, issue #38).
    request = staticmethod(to_chat)
    answer = staticmethod(answer)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()  # its table's drops are said there, not per request

    def stream(self, ctx: Context, known: Known | None = None) -> ChatToMessagesStream:
        return ChatToMessagesStream(ctx, known)

    def held(self, ctx: Context) -> Context:
        # Its answers read ``stop_sequences`` and the prompt estimate, made now.
        tools = declared_tools(ctx.request)
        named = function_names(tools).mapped
        estimate = estimate_input_tokens(ctx.request, ctx.request_bytes)
        kept = held(ctx, UNREAD_NAMED if named else UNREAD, estimate)
        if named and tools is not ctx.request.get("tools"):
            # The tools the system messages added, whose messages are not kept.
            kept.request = {**kept.request, "tools": tools}
        return kept


__all__ = ["ChatToMessagesStream", "MessagesToChat"]

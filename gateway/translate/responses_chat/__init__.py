"""OpenAI Responses clients (Codex, the OpenAI Agents SDK, ``client.responses.create``) on an
OpenAI chat completions upstream (llama.cpp, llama-cpp-python, vLLM's chat route, TGI, most
OpenAI-compatible hosts). Codex refuses ``wire_api = "chat"``, so on such a server it works
only through this translator.

``request.py`` carries the request, ``tools.py`` the tools and their names both ways,
``answer.py`` a buffered answer back (and the pieces of a ``response`` the stream shares),
``stream.py`` a stream back event by event. What is carried, dropped or refused, and why:
docs/translation/responses_chat.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate.base import Context, Known, Refusal, Target, held
from gateway.translate.responses_chat import additional_tools, tool_search
from gateway.translate.responses_chat.answer import answer
from gateway.translate.responses_chat.request import to_chat
from gateway.translate.responses_chat.stream import ResponsesStream
from gateway.translate.responses_chat.tools import hosted

UNREAD = frozenset({"input"})


class ResponsesToChat:
    client = "responses"
    upstream = "chat"

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        return to_chat(payload, target)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return hosted(additional_tools.declared(payload))

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return answer(doc, ctx)

    def stream(self, ctx: Context, known: Known | None = None) -> ResponsesStream:
        return ResponsesStream(ctx, known)

    def held(self, ctx: Context) -> Context:
        # Its answers echo the request's settings (``instructions``, ``tools``...) and
        # estimate a missing usage from ``request_bytes``: the conversation is not read, but
        # for the items that declare tools (the client's tool searches' outputs, the
        # ``additional_tools`` items), which the answer's calls are named by.
        kept = held(ctx, UNREAD)
        items = ctx.request.get("input")
        if not isinstance(items, list):
            return kept
        searched = tool_search.client_search(additional_tools.declared(ctx.request)) is not None
        declaring = [i for i in items if isinstance(i, dict) and (
            i.get("type") == additional_tools.ITEM or (searched and i.get("type") == "tool_search_output"))]
        if declaring:
            kept.request = {**kept.request, "input": declaring}
        return kept


__all__ = ["ResponsesStream", "ResponsesToChat"]

"""Which chat ``tool`` message a further result for a call joins.

A client may send several results for one call: Codex's code mode sends a script's output and
each ``notify()`` it made as outputs of one ``call_id``. OpenAI refuses two tool messages for one
id ("Invalid parameter: Duplicate value for 'tool_call_id' of 'call_…', in messages[7] and
messages[8].", agno-agi/agno#5116, anomalyco/opencode#1211), so the translations that build chat
messages fold such results into one. But an assistant turn may itself call twice under one id (a
chat upstream that repeats an id, given back by the client as it came), and then OpenAI wants as
many tool messages as calls ("...tool_call_ids did not have response messages"): a result is
folded only once every call with its id has its own message, the order pairing them.
"""

from __future__ import annotations

from typing import Any


def folded_into(messages: list[dict[str, Any]], call_id: str) -> dict[str, Any] | None:
    """The tool message, in the run of them ending ``messages``, that a further result for
    ``call_id`` is joined to; None when the result takes a message of its own."""
    latest: dict[str, Any] | None = None
    answers = 0
    for m in reversed(messages):
        if m["role"] != "tool":
            calls = m.get("tool_calls") if m["role"] == "assistant" else None
            made = sum(1 for c in calls or () if c.get("id") == call_id)
            return latest if answers >= made else None
        if m["tool_call_id"] == call_id:
            answers += 1
            latest = latest or m
    return latest

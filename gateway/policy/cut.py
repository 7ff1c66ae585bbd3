"""Head + tail cutting of a chat message's text, shared by the rescue and the opt-in cap on
single tool outputs (``cap_tool_outputs``).

Only text is ever cut: a string ``content`` or the ``text`` of list-of-parts content.
Tool-call arguments are JSON and stay whole; images and any other part stay as they are,
and every other key of a message or part is carried over (the dialect adapters keep
their bookkeeping there). Nothing here mutates its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.tokens import BYTES_PER_TOKEN

MIN_KEEP_TOKENS = 300  # a message the rescue cuts keeps at least this much of its head and tail
MARKER_TOKENS = 16  # the "…truncated by llm-gateway, N more bytes…" line a cut adds
MIN_PART_BYTES = 64  # each text part a cut reaches keeps at least a glimpse of itself


def text_tokens(m: dict[str, Any]) -> float:
    """Tokens of the part of a message a cut can shorten (its text)."""
    content = m.get("content")
    if isinstance(content, str):
        return len(content.encode()) / BYTES_PER_TOKEN
    if isinstance(content, list):
        return sum(
            len(p["text"].encode()) / BYTES_PER_TOKEN
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return 0.0


def truncate(m: dict[str, Any], keep_tokens: float) -> tuple[dict[str, Any], int]:
    """The message with its text cut to about ``keep_tokens`` (plus the marker), and the
    bytes removed; the message itself when nothing had to go. Text parts share that room
    by ``water_level``: the smaller ones stay whole and the largest are cut alike."""
    content = m.get("content")
    keep = int(max(keep_tokens, 0) * BYTES_PER_TOKEN)
    if isinstance(content, str):
        text, removed = cut_text(content, keep)
        return ({**m, "content": text}, removed) if removed else (m, 0)
    if isinstance(content, list):
        texts = [p for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        sizes = {id(p): len(p["text"].encode()) / BYTES_PER_TOKEN for p in texts}
        # The parts share the room as the rescue's messages do: several tool results in one
        # turn (Gemini's functionResponse parts, Anthropic's tool_result blocks) keep a small
        # one whole beside a huge one, as separate chat ``tool`` messages would; in proportion,
        # a config file beside a 200 KB log lost 60 % of itself. The caller's ``keep_tokens``
        # leaves out the one marker it counts, so the parts get that back.
        room = max(keep_tokens, 0) + MARKER_TOKENS
        level = water_level(list(sizes.values()), room, MIN_PART_BYTES / BYTES_PER_TOKEN)
        parts, removed = [], 0
        for p in content:
            if sizes.get(id(p), 0.0) > level:
                text, r = cut_text(p["text"], int(level * BYTES_PER_TOKEN))
                parts.append({**p, "text": text} if r else p)
                removed += r
            else:
                parts.append(p)
        return ({**m, "content": parts}, removed) if removed else (m, 0)
    return m, 0


def cut_text(text: str, keep_bytes: int) -> tuple[str, int]:
    """``text`` cut to about ``keep_bytes`` of head and tail with the marker between, and the
    bytes removed; ``text`` itself (0 removed) when that would not make it shorter."""
    data = text.encode()
    if len(data) <= keep_bytes:
        return text, 0
    # Tool output's end (errors, summaries) tends to matter as much as its start.
    head_n = keep_bytes * 3 // 5
    tail_n = keep_bytes - head_n
    head = data[:head_n].decode("utf-8", "ignore")
    tail = data[len(data) - tail_n :].decode("utf-8", "ignore")
    removed = len(data) - len(head.encode()) - len(tail.encode())
    marker = f"\n…truncated by llm-gateway, {removed} more bytes…\n"
    if removed <= len(marker.encode()):
        # A 72-byte listing cut to 64 came back at 106 bytes, its middle the marker.
        return text, 0
    return f"{head}{marker}{tail}", removed


def water_level(sizes: list[float], room: float, floor: float = MIN_KEEP_TOKENS) -> float:
    """The largest cap c (>= ``floor``) with sum(min(s, c)) plus a marker per cut <= room."""
    if sum(sizes) <= room:
        return float("inf")
    ordered = sorted(sizes)
    below = 0.0
    for n, s in enumerate(ordered):
        remaining = len(ordered) - n
        cap = (room - below) / remaining - MARKER_TOKENS
        if cap <= s:
            return max(floor, cap)
        below += s
    return max(floor, room)


MIN_CAP_TOKENS = 64  # below this a capped output would be little more than its marker
TOOL_ROLES = ("tool", "function")  # "function": the legacy name of a tool result


def cap_tool_outputs(
    payload: Mapping[str, Any], max_tokens: int
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Cut every single tool output whose text is above ``max_tokens`` to head + tail.

    Opt-in and proactive: applied before the first send, on the chat-shaped view of any
    dialect. A tool output is a ``tool`` (or legacy ``function``) message; its text is a
    string ``content`` or the ``text`` of its parts, which share the cap as ``truncate``
    shares it (each part cut keeps a glimpse, so a many-part output may end slightly above
    the cap). Nothing else changes:
    other messages and parts are the same objects. Returns the new payload, or None when
    nothing was cut, and counts (never content). An adapter whose view puts several
    results in one ``tool`` message (Anthropic's tool_result blocks of one user turn)
    gives each result its own view message to cap them one by one.
    """
    if max_tokens < MIN_CAP_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_CAP_TOKENS}, got {max_tokens}")
    report = {"outputs_capped": 0, "bytes_removed": 0}
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None, report
    out: list[Any] | None = None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in TOOL_ROLES or text_tokens(m) <= max_tokens:
            continue
        cut, removed = truncate(m, max_tokens - MARKER_TOKENS)  # the marker counts against the cap
        if removed:
            out = out if out is not None else list(messages)
            out[i] = cut
            report["outputs_capped"] += 1
            report["bytes_removed"] += removed
    return ({**payload, "messages": out} if out is not None else None), report


def cap_content(content: Any, max_tokens: int) -> tuple[Any, int]:
    """One tool output's content (a string, or a list of parts with ``text``) capped at
    ``max_tokens``, and the bytes removed; the content itself when it fits. For dialects
    whose tool outputs are not chat messages (Anthropic ``tool_result`` blocks, Responses
    ``*_output`` items)."""
    if max_tokens < MIN_CAP_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_CAP_TOKENS}, got {max_tokens}")
    view = {"content": content}
    if text_tokens(view) <= max_tokens:
        return content, 0
    cut, removed = truncate(view, max_tokens - MARKER_TOKENS)
    return cut["content"], removed

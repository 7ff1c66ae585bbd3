"""Head + tail cutting of a chat message's text, shared by the rescue and the tool-output cap.

Only text is ever cut: a string ``content`` or the ``text`` of list-of-parts content.
Tool-call arguments are JSON and stay whole; images and any other part stay as they are,
and every other key of a message or part is carried over (the dialect adapters keep
their bookkeeping there). Nothing here mutates its input.
"""

from __future__ import annotations

from typing import Any

from gateway.policy.tokens import BYTES_PER_TOKEN

MIN_KEEP_TOKENS = 300  # a message the rescue cuts keeps at least this much of its head and tail
MARKER_TOKENS = 16  # the "…truncated by llm-gateway, N more bytes…" line a cut adds
MIN_PART_BYTES = 64  # each text part of a cut message keeps a glimpse of itself


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
    bytes removed; the message itself when nothing had to go."""
    content = m.get("content")
    keep = int(max(keep_tokens, 0) * BYTES_PER_TOKEN)
    if isinstance(content, str):
        text, removed = cut_text(content, keep)
        return ({**m, "content": text}, removed) if removed else (m, 0)
    if isinstance(content, list):
        texts = [p for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        text_ids = {id(p) for p in texts}
        total = sum(len(p["text"].encode()) for p in texts) or 1
        parts, removed = [], 0
        for p in content:
            if id(p) in text_ids:
                share = max(int(keep * len(p["text"].encode()) / total), MIN_PART_BYTES)
                text, r = cut_text(p["text"], share)
                parts.append({**p, "text": text} if r else p)
                removed += r
            else:
                parts.append(p)
        return ({**m, "content": parts}, removed) if removed else (m, 0)
    return m, 0


def cut_text(text: str, keep_bytes: int) -> tuple[str, int]:
    data = text.encode()
    if len(data) <= keep_bytes:
        return text, 0
    # Tool output's end (errors, summaries) tends to matter as much as its start.
    head_n = keep_bytes * 3 // 5
    tail_n = keep_bytes - head_n
    head = data[:head_n].decode("utf-8", "ignore")
    tail = data[len(data) - tail_n :].decode("utf-8", "ignore")
    removed = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n…truncated by llm-gateway, {removed} more bytes…\n{tail}", removed


def water_level(sizes: list[float], room: float) -> float:
    """The largest cap c (>= MIN_KEEP_TOKENS) with sum(min(s, c)) plus a marker per cut <= room."""
    if sum(sizes) <= room:
        return float("inf")
    ordered = sorted(sizes)
    below = 0.0
    for n, s in enumerate(ordered):
        remaining = len(ordered) - n
        cap = (room - below) / remaining - MARKER_TOKENS
        if cap <= s:
            return max(MIN_KEEP_TOKENS, cap)
        below += s
    return max(MIN_KEEP_TOKENS, room)

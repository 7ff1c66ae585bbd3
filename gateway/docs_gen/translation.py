"""The translation pages' tables of constants: default budgets, effort budgets, finish reasons.

Each is a section of a hand-written page under ``docs/translation/`` (``sections.py``), written
from the constant the translator reads, so the page says what the code does. The rules around
them (when thinking is left off, which turn is a tool call) stay prose on the page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.docs_gen.markdown import cell
from gateway.docs_gen.sections import Section
from gateway.translate.chat_gemini.answer import FINISH_REASON as GEMINI_TO_CHAT_FINISH
from gateway.translate.chat_gemini.request import EFFORT_BUDGET as GEMINI_EFFORT_BUDGET
from gateway.translate.chat_messages import request as chat_messages_request
from gateway.translate.chat_messages.answer import FINISH_REASON as MESSAGES_TO_CHAT_FINISH
from gateway.translate.gemini_chat.answer import FINISH_REASON as CHAT_TO_GEMINI_FINISH


def _table(head: Iterable[str], align: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _grouped(mapping: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """``mapping`` inverted: each value once, with the keys that map to it, in first-seen order."""
    out: dict[str, list[str]] = {}
    for key, value in mapping.items():
        out.setdefault(value, []).append(key)
    return [(keys, value) for value, keys in out.items()]


def _codes(words: Iterable[str]) -> str:
    return ", ".join(f"`{w}`" for w in words)


def chat_messages_default_max_tokens() -> str:
    r = chat_messages_request
    rows = [(f"`{family}`", f"{tokens:,}") for family, tokens in r.DEFAULT_MAX_TOKENS]
    rows.append(("any other name", f"{r.FALLBACK_MAX_TOKENS:,}"))
    head = ["the upstream model's name contains (first match)", "`max_tokens` when the client sets none"]
    buffered = f"A buffered (not streamed) request's default is at most {r.BUFFERED_MAX_TOKENS:,}."
    return _table(head, ["---", "---:"], rows) + "\n\n" + buffered


def chat_messages_effort() -> str:
    r = chat_messages_request
    rows = [(f"`{effort}`", f"{budget:,}", f"`{r.ADAPTIVE_EFFORT[effort]}`")
            for effort, budget in r.EFFORT_BUDGET.items()]  # fmt: skip
    rows.append(("`none`", "no thinking", "no thinking"))
    return _table(["`reasoning_effort`", "`budget_tokens` (leaving the answer `max(1,024, max_tokens ÷ 4)`)",
                   "adaptive models: `output_config.effort`"], ["---", "---:", "---"], rows)  # fmt: skip


def chat_messages_finish_reason() -> str:
    rows = [(_codes(keys), f"`{value}`") for keys, value in _grouped(MESSAGES_TO_CHAT_FINISH)]
    rows.append(("any other", "`stop`"))
    return _table(["Messages `stop_reason`", "chat `finish_reason`"], ["---", "---"], rows)


def chat_gemini_effort() -> str:
    rows = [(f"`{effort}`", f"{budget:,}") for effort, budget in GEMINI_EFFORT_BUDGET.items()]
    rows.append(("`none`", "the least the model thinks ([above](#request)): 0 where it can stop"))
    head = ["`reasoning_effort`", "`thinkingBudget` (leaving the answer `max(1,024, maxOutputTokens ÷ 4)`)"]
    return _table(head, ["---", "---:"], rows)


def chat_gemini_finish_reason() -> str:
    rows = [(_codes(keys), f"`{value}`") for keys, value in _grouped(GEMINI_TO_CHAT_FINISH)]
    rows.append(("any other", "`stop`"))
    return _table(["Gemini `finishReason`", "chat `finish_reason`"], ["---", "---"], rows)


def gemini_chat_finish_reason() -> str:
    rows = [(_codes(keys), f"`{value}`") for keys, value in _grouped(CHAT_TO_GEMINI_FINISH)]
    rows.append(("any other, or none", "`STOP`"))
    return _table(["chat `finish_reason`", "Gemini `finishReason`"], ["---", "---"], rows)


SECTIONS = (
    Section("translation/chat_messages.md", "default-max-tokens", chat_messages_default_max_tokens),
    Section("translation/chat_messages.md", "effort-budgets", chat_messages_effort),
    Section("translation/chat_messages.md", "finish-reasons", chat_messages_finish_reason),
    Section("translation/chat_gemini.md", "effort-budgets", chat_gemini_effort),
    Section("translation/chat_gemini.md", "finish-reasons", chat_gemini_finish_reason),
    Section("translation/gemini_chat.md", "finish-reasons", gemini_chat_finish_reason),
)

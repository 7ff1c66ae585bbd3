"""``docs/reference/prices.md``: the prices the gateway ships, from ``gateway.keys.prices.SHIPPED``.

Budgets and spend are counted at these unless the operator's ``prices:`` names the model first
(a bare ``"*"`` of the operator's is tried after them). The sources of each price are cited
beside it in ``gateway/keys/prices.py``; the page states the figures, so that prose elsewhere can
link here instead of restating one.
"""

from __future__ import annotations

from gateway.docs_gen.markdown import cell, generated_header
from gateway.keys.prices import DEFAULT_SEARCHES, SHIPPED, Price


def _usd(value: float) -> str:
    text = f"{value:,.3f}"
    return "$" + (text[:-1] if text.endswith("0") else text)  # cents, or a tenth of a cent


def _row(glob: str, p: Price) -> str:
    read = _usd(p.cache_read) if p.cache_read is not None else f"{_usd(p.input)} (input)"
    write = _usd(p.cache_write) if p.cache_write is not None else f"{_usd(p.input)} (input)"
    # Only Anthropic reports 1-hour cache writes (``cache_creation.ephemeral_1h_input_tokens``).
    hour = "–" if not glob.startswith("claude") else _usd(p.hour_write) + (
        "" if p.cache_write_1h is not None else " (2× input)")
    long = ""
    if p.long is not None:
        above, q = p.long
        long = f"above {above:,} prompt tokens: {_usd(q.input)} in, {_usd(q.output)} out"
        if q.cache_read is not None:
            long += f", {_usd(q.cache_read)} cache read"
        if q.cache_write is not None:
            long += f", {_usd(q.cache_write)} cache write"
        if q.cache_write_1h is not None:
            long += f" ({_usd(q.cache_write_1h)} for 1 h)"
    search = "–" if not p.web_search else _usd(p.web_search * 1000) + (
        " / 1,000 answers" if p.web_search_per_request else "")
    cells = [f"`{glob}`", _usd(p.input), _usd(p.output), read, write, hour, long, search]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def render() -> str:
    lines = [
        generated_header(),
        "# Shipped prices",
        "",
        "What a gateway key's spend and budget are counted at, in USD per million tokens, when the",
        "operator's `prices:` does not name the model first ([keys and budgets](../keys.md)). The",
        "first glob that matches the model the upstream is sent wins; a bare `\"*\"` of the operator's",
        "is tried after this table. Each price's source is cited beside it in",
        "`gateway/keys/prices.py`. A model no glob matches has no price: a key with a budget is",
        "refused it (`model_not_priced`) until the operator prices it. A cache price not stated is",
        "the input price; only Anthropic reports 1-hour cache writes.",
        "",
        "*web search* is the fee per 1,000 web searches a server-side tool makes, on top of the",
        "tokens (usage kind `web_search`): Anthropic's `server_tool_use.web_search_requests`, the",
        "Responses API's `web_search_call` items, Gemini's grounding queries (per 1,000 grounded",
        "answers for Gemini 2.5). The fee is the model family's (`FEES`), so an operator's price",
        "for a model of that family keeps it unless it names its own `web_search` (USD per search);",
        "a family with none (–) counts its searches at nothing. A request declaring a search tool",
        "reserves its `max_uses` or `max_tool_calls` searches, else `accounting.reserved_searches` "
        f"({DEFAULT_SEARCHES} unless set).",
        "",
        "| model | input | output | cache read | cache write (5 min) | cache write (1 h) | long prompts"
        " | web search |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    lines += [_row(glob, price) for glob, price in SHIPPED]
    return "\n".join(lines) + "\n"

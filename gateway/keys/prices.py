"""What a request costs: a price per model and the provider's usage. Pure, table-tested.

Prices are USD per million tokens, per kind: input (prompt tokens not read from or written to
a cache), output (completion, reasoning included), cache reads and cache writes. The shipped
table covers the common models; an operator's ``prices:`` (config) come first, glob by glob.
A model with no price costs nothing *and says so* (``priced`` is False): its tokens are still
counted, and the log line and metrics mark it, so a missing price is never a silent zero.

Sources, read 2026-11-28:

- Anthropic: "Pricing", platform.claude.com/docs/en/about-claude/pricing ("Model pricing":
  base input, 5-minute cache writes, cache hits, output). A 5-minute cache write is the
  default; 1-hour writes (twice the input price) are not told apart in usage, so they are
  counted at the 5-minute price.
- OpenAI: "Pricing", developers.openai.com/api/docs/pricing (input, cached input, output;
  standard tier, not batch or flex), as quoted by copies of that page dated 2026-03 to 2026-06.
  OpenAI has no cache-write price: a cache write costs the input price. gpt-5.2 and o3-pro,
  read 2026-11-29 from copies of that page (nicolalazzari.ai/articles/openai-api-pricing-explained-2026,
  evolink.ai/blog/gpt-5-2-api-guide-pricing-setup-vs-gpt-5-4; modelpedia.dev/openai/o3-pro).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. A cache price left out is the input price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


# First match wins: the more specific globs come first.
SHIPPED: tuple[tuple[str, Price], ...] = (
    # Anthropic
    ("claude-opus-4-1*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-0*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-2025*", Price(15.0, 75.0, 1.50, 18.75)),  # Claude Opus 4, dated id
    ("claude-opus-4*", Price(5.0, 25.0, 0.50, 6.25)),  # 4.5 to 4.8
    ("claude-opus-5*", Price(5.0, 25.0, 0.50, 6.25)),
    ("claude-3-opus*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-sonnet-4*", Price(3.0, 15.0, 0.30, 3.75)),  # 4, 4.5, 4.6
    ("claude-3-7-sonnet*", Price(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-4-5*", Price(1.0, 5.0, 0.10, 1.25)),
    ("claude-3-5-haiku*", Price(0.80, 4.0, 0.08, 1.0)),
    ("claude-3-haiku*", Price(0.25, 1.25, 0.03, 0.30)),
    # OpenAI
    ("gpt-5.5-pro*", Price(30.0, 180.0)),
    ("gpt-5.5*", Price(5.0, 30.0, 0.50)),
    ("gpt-5.4-pro*", Price(30.0, 180.0)),
    ("gpt-5.4-mini*", Price(0.75, 4.50, 0.075)),
    ("gpt-5.4-nano*", Price(0.20, 1.25, 0.02)),
    ("gpt-5.4*", Price(2.50, 15.0, 0.25)),
    ("gpt-5.2-pro*", Price(21.0, 168.0)),
    ("gpt-5.2*", Price(1.75, 14.0, 0.175)),
    ("gpt-5-pro*", Price(15.0, 120.0)),
    ("gpt-5-mini*", Price(0.25, 2.0, 0.025)),
    ("gpt-5-nano*", Price(0.05, 0.40, 0.005)),
    ("gpt-5.1*", Price(1.25, 10.0, 0.125)),
    ("gpt-5*", Price(1.25, 10.0, 0.125)),  # gpt-5, gpt-5-codex
    ("gpt-4.1-mini*", Price(0.40, 1.60, 0.10)),
    ("gpt-4.1-nano*", Price(0.10, 0.40, 0.025)),
    ("gpt-4.1*", Price(2.0, 8.0, 0.50)),
    ("gpt-4o-mini*", Price(0.15, 0.60, 0.075)),
    ("gpt-4o*", Price(2.50, 10.0, 1.25)),
    ("o4-mini*", Price(1.10, 4.40, 0.275)),
    ("o3-mini*", Price(1.10, 4.40, 0.55)),
    ("o3-pro*", Price(20.0, 80.0)),
    ("o3*", Price(2.0, 8.0, 0.50)),
)


@dataclass(frozen=True, slots=True)
class PriceTable:
    """The operator's prices, then the shipped ones; a lookup per distinct model is cached
    (a few dozen globs tried per request cost more than the rest of the accounting)."""

    overrides: tuple[tuple[str, Price], ...] = ()
    shipped: tuple[tuple[str, Price], ...] = SHIPPED
    _found: dict[str, Price | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, overrides: Mapping[str, Price] | Iterable[tuple[str, Price]]) -> PriceTable:
        items = overrides.items() if isinstance(overrides, Mapping) else overrides
        return cls(tuple(items))

    def price_for(self, model: str | None) -> Price | None:
        if not model:
            return None
        if model in self._found:
            return self._found[model]
        tables = (*self.overrides, *self.shipped)
        found = next((price for pattern, price in tables if fnmatchcase(model, pattern)), None)
        if len(self._found) < 1024:  # model names come from clients
            self._found[model] = found
        return found


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float
    priced: bool  # False: no price is known for the model (usd is 0 and means "unknown")


def cost_of(price: Price | None, usage: Mapping[str, int]) -> Cost:
    """``usage`` as the gateway counts it: ``prompt`` (every input token, cached or not),
    ``completion``, and of the prompt ``cache_read`` and ``cache_write``."""
    if price is None:
        return Cost(0.0, False)
    prompt = usage.get("prompt", 0)
    read = min(usage.get("cache_read", 0), prompt)
    write = min(usage.get("cache_write", 0), prompt - read)
    fresh = prompt - read - write
    usd = (fresh * price.input
           + read * (price.input if price.cache_read is None else price.cache_read)
           + write * (price.input if price.cache_write is None else price.cache_write)
           + usage.get("completion", 0) * price.output) / 1_000_000  # fmt: skip
    return Cost(usd, True)


def worst_case(price: Price | None, prompt_tokens: float, max_output_tokens: int) -> float:
    """What a request may cost at most: its whole prompt at the dearer of the input and the
    cache-write price (a prompt written to Anthropic's cache costs 1.25× the input price), and
    every output token it may generate. Reserved before sending, so that concurrent requests
    cannot overspend."""
    if price is None:
        return 0.0
    per_prompt_token = max(price.input, price.cache_write or 0.0)
    return (prompt_tokens * per_prompt_token + max_output_tokens * price.output) / 1_000_000

"""What a request costs: a price per model and the provider's usage. Pure, table-tested.

Prices are USD per million tokens, per kind: input (prompt tokens not read from or written to
a cache), output (completion, reasoning included), cache reads and cache writes. The shipped
table covers the common models; an operator's ``prices:`` (config) come first, glob by glob.
A model with no price costs nothing *and says so* (``priced`` is False): its tokens are still
counted, and the log line and metrics mark it, so a missing price is never a silent zero; a key
with a budget is refused such a model (``model_not_priced``, pipeline/accounting.py), which its
budget could not hold. Some prices change above a prompt size (Gemini 2.5 Pro's "prompts > 200k
tokens"): the whole request is priced at the dearer rate then (``Price.long``).

Sources, read 2026-11-28 (the agents' own default models, 2026-11-30: below):

- Anthropic: "Pricing", platform.claude.com/docs/en/about-claude/pricing ("Model pricing":
  base input, 5-minute cache writes, cache hits, output). A 5-minute cache write is the
  default; a 1-hour write costs twice the input price ("5-minute cache writes: 1.25x ... 1-hour
  cache writes: 2x the base input tokens price", the prompt-caching guide,
  https://platform.claude.com/docs/en/build-with-claude/prompt-caching, as tabled per model in
  https://claudecodeguides.com/claude-prompt-caching-pricing-and-cost-savings/: Sonnet 4.6 $3.00
  in, $3.75 5m write, $6.00 1h write). Usage tells the two apart
  (``cache_creation.ephemeral_1h_input_tokens``, read as ``cache_write_1h``); they were counted
  at the 5-minute price ($3.225 for a claude-sonnet-4-5 answer that cost $3.90).
- OpenAI: "Pricing", developers.openai.com/api/docs/pricing (input, cached input, output;
  standard tier, not batch or flex), as quoted by copies of that page dated 2026-03 to 2026-06.
  Priority processing costs more (gpt-5.4 "$5.00 ... $30.00" per million in and out,
  https://openai.com/api-priority-processing/, against $2.50 and $15): an answer's
  ``service_tier`` is not read, so an answer served at priority is counted at the standard price.
  Cache writes, read 2026-11-30 from OpenAI's "Prompt caching" guide
  (developers.openai.com/api/docs/guides/prompt-caching): "Cache write charges | 1.25× the
  uncached input token rate" for "GPT-5.6 and later", "No additional cache-write fee" for
  earlier models, whose rows name no cache-write price (a write costs the input price); the
  usage reports them as ``cache_write_tokens``, a part of the prompt ("2,000 tokens were read
  from the cache and 400 additional tokens were written. The remaining 200 input tokens were
  neither read nor written"). gpt-5.2 and o3-pro,
  read 2026-11-29 from copies of that page (nicolalazzari.ai/articles/openai-api-pricing-explained-2026,
  evolink.ai/blog/gpt-5-2-api-guide-pricing-setup-vs-gpt-5-4; modelpedia.dev/openai/o3-pro).
  Read 2026-11-30: o4-mini-deep-research, $2.00 in, $0.50 cached, $8.00 out
  (https://developers.openai.com/ja-JP/api/docs/models/o4-mini-deep-research; it had taken
  o4-mini*'s $1.10 / $4.40); o3-deep-research, $10 / $2.50 / $40
  (https://modelpedia.dev/openai/o3-deep-research/changes, "Standard $10 $2.5 $40"; "$10/1M
  input tokens and $40/1M output tokens for o3" in OpenAI's announcement,
  https://community.openai.com/t/deep-research-in-the-api-webhooks-and-web-search-with-o3/1299919;
  it had taken o3*'s $2 / $8); o1 (and o1-preview), $15 / $7.50 / $60 (OpenAI's pricing page as
  quoted in https://community.openai.com/t/how-to-correct-compute-the-cost-of-an-o1-model-api-call/1099176
  and https://docs.flexprice.io/docs/product-catalogue/plans/use-cases/clone-openai-pricing.md);
  o1-pro, $150 / $600, no cached price (https://aipromptshub.co/model/o1-pro, "Verified against
  OpenAI docs"); text-embedding-3-small $0.02 and -large $0.13, no output
  (https://chatgptpricing-akr.pages.dev/api-pricing, from developers.openai.com/api/docs/pricing).
  o1-mini, gpt-4-turbo, gpt-4, gpt-3.5-turbo and chatgpt-4o-latest have none: no copy of a
  current price was found.
- Google, read 2026-11-30 (ai.google.dev/gemini-api/docs/pricing, as quoted; paid tier, text):
  Gemini 2.5 Pro $1.25 in, $10 out, prompts <= 200k tokens; $2.50 and $15 above
  (https://deploybase.ai/articles/gemini-api-pricing, "Data from Google's official pricing
  page"); its cached input $0.125, $0.25 above 200k
  (https://discuss.ai.google.dev/t/question-about-gemini-api-caching-pricing/107349). Gemini
  2.5 Flash $0.30 in ("text / image / video"; audio is $1.00, counted here at the text price)
  and $2.50 out; Gemini 2.5 Flash-Lite $0.10 and $0.40; Gemini 3.1 Pro Preview $2.00 and $12.00,
  $4.00 and $18.00 above 200k (https://raw.githubusercontent.com/api-evangelist/deepmind/refs/heads/main/plans/deepmind-plans-pricing.yml,
  transcribed from that page 2026-10-07, for Flash-Lite's output and 3.1 Pro;
  https://hivebook.wiki/wiki/gemini-2-5-google-s-multimodal-flagship-family for Flash-Lite's
  $0.10 in; deploybase, above, for Flash). No cache price was found for these three: a cached
  token is counted at the input price, more than Google charges. Only these exact names are
  priced: a Gemini name with a suffix (``-image``, ``-tts``, ``-live``) is priced otherwise.
- The agents' default models, read 2026-11-30, so that a budgeted key serves them (they were
  refused, ``model_not_priced``: Claude Code's ``sonnet``/``haiku``/``opusplan``, Codex with no
  model set). Anthropic's model pages ("Pricing": input, output, 5m and 1h cache writes, cache
  read): Sonnet 5.5 (and Sonnet 5) $2 / $10, writes $2.50 / $4, read $0.20
  (https://platform.claude.com/docs/zh-CN/models/sonnet-5-5/overview,
  https://platform.claude.com/docs/zh-CN/models/sonnet-5/overview); Opus 5.5 $4 / $20, writes
  $5 / $8, read $0.20 (https://platform.claude.com/docs/zh-CN/models/opus-5-5/overview; Opus 5
  keeps $5 / $25); Haiku 5.5 "$0.10 / MTok for prompts up to 100,000 tokens$0.50 / MTok for
  prompts over 100,000 tokens", output $0.50 and $2.50, 5m write $0.125 and $0.625, 1h write
  $0.20 up to 100,000 (https://platform.claude.com/docs/en/models/haiku-5-5/overview; no cache
  read price was quoted: a read is counted at the input price). OpenAI's gpt-6.2-sol (Codex's
  default): $2.00 in, $0.10 cached, $2.50 cache writes, $10.00 out; "For requests with more than
  272K input tokens, input and cache rates double and output costs 1.5 times the short-context
  rate for the full request" (https://developers.openai.com/api/docs/models/gpt-6.2-sol).
  Gemini CLI's gemini-3.5-flash-lite and gemini-3.8-flash have none: only resellers' prices were
  found (docs.apiyi.com, vercel.com/ai-gateway), the latter possibly a launch discount (Gemini
  3.7 Flash launched at half its price, github.com/BerriAI/litellm/discussions/36799); a
  price below Google's would let a budget overspend, so the operator prices them.
- Gemini 3 Flash Preview, read 2026-11-30 from a copy of Google's pricing page
  (ai.google.dev/gemini-api/docs/pricing, quoted at https://factquire.com/models/google/gemini-3-flash-preview.json,
  accessed there 2026-07-04): "Gemini 3 Flash Preview `gemini-3-flash-preview` ... Input price
  ... $0.50 (text / image / video) $1.00 (audio) Output price (including thinking tokens) ...
  $3.00 Context caching price ... $0.05 (text / image / video)" (audio counted at the text
  price, as for 2.5 Flash). Gemini CLI's ``google_web_search`` tool posts there whatever model
  the session uses, and a budgeted key was refused it (``model_not_priced``; audit).
- Claude Sonnet 4 and 4.5 above 200k prompt tokens (their 1M-context beta), read 2026-11-30
  from copies of Anthropic's "Pricing" page (platform.claude.com/docs/en/about-claude/pricing,
  "Long context pricing"): "$6 / MTok" in and "$22.50 / MTok" out; "Prompt caching multipliers
  apply on top of long context pricing" (so writes $7.50, or $12 for an hour, and reads $0.60);
  "The 200k threshold is based solely on input tokens (including cache reads/writes)", which is
  ``cost_of``'s prompt. "Claude Opus 4.6 and Sonnet 4.6 include the full 1M token context
  window at standard pricing": they have no such tier.
- gpt-4o-2024-05-13, $5 in and $15 out, no cached price: its row of the standard table
  ("gpt-4o-2024-05-13 | $5.00 | - | - | $15.00"), developers.openai.com/api/docs/pricing as
  quoted in copies of that page, read 2026-11-30. gpt-4o's audio, realtime, search and
  transcribe variants bill audio tokens (gpt-4o-audio-preview's text rows are gpt-4o's; its
  audio is not) or each search otherwise: they are left unpriced (``gpt-4o*`` priced them all
  as gpt-4o's text).

Server-side tools bill each call on top of tokens (``web_search`` in the usage, a count of
calls: ``FEES``), read 2026-11-30:

- Anthropic: "Web search is available on the Claude API for $10 per 1,000 searches, plus
  standard token costs"; "If an error occurs during web search, the web search will not be
  billed" (platform.claude.com/docs/en/agents-and-tools/tool-use/web-search-tool, "Usage and
  pricing"): ``usage.server_tool_use.web_search_requests``. Web fetch has "no additional
  charges".
- OpenAI: "Web search (all models) $10.00 / 1k calls + search content tokens billed at model
  rates"; "Web search preview (non-reasoning models) $25.00 / 1k calls + search content tokens
  are free" (developers.openai.com/api/docs/pricing, "Built-in tools", as quoted in copies of
  that page). Each ``web_search_call`` output item with a ``search`` action is a call ("Search
  actions incur a tool call cost", the web search guide). The answer does not say which tool
  searched: every model is counted at the GA tool's $10, the one current clients declare
  (counted at the preview's $25, a gpt-4o or gpt-4.1 request with the GA tool paid 2.5 times its
  fee; review). The preview tool on those two is undercounted: ``prices:`` may say
  ``web_search: 0.025`` for them.
- Google: Gemini 2.5 "1,500 RPD free, then $35 / 1,000 grounded prompts", Gemini 3 "5,000
  prompts per month free ..., then $14 / 1,000 search queries" (ai.google.dev/gemini-api/docs/
  pricing, "Grounding with Google Search", as quoted in copies of that page). The queries are
  ``candidates[].groundingMetadata.webSearchQueries``; a 2.5 model's grounded answer is one
  call however many it ran (``Fee.per_request``). The free allowances are the provider
  account's, not a key's: every call is counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. A cache price left out is the input price, but a 1-hour cache
    write's, which is twice the input price (Anthropic's rule; no other provider reports such
    writes). ``long``: a prompt of more tokens than its first member is priced at its second,
    every token of the request."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None
    long: tuple[int, Price] | None = None
    # USD per web search (a server-side tool's call, on top of tokens); None: the shipped fee
    # of the model's family (``FEES``), if any. Not per million.
    web_search: float | None = None
    web_search_per_request: bool = False  # billed once for an answer that searched at all

    @property
    def hour_write(self) -> float:
        return 2 * self.input if self.cache_write_1h is None else self.cache_write_1h

    def for_prompt(self, prompt_tokens: float) -> Price:
        if self.long is not None and prompt_tokens > self.long[0]:
            return self.long[1]
        return self


# First match wins: the more specific globs come first.
SHIPPED: tuple[tuple[str, Price], ...] = (
    # Anthropic
    ("claude-opus-4-1*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-0*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-2025*", Price(15.0, 75.0, 1.50, 18.75)),  # Claude Opus 4, dated id
    ("claude-opus-4*", Price(5.0, 25.0, 0.50, 6.25)),  # 4.5 to 4.8
    ("claude-opus-5-5*", Price(4.0, 20.0, 0.20, 5.0, 8.0)),  # before Opus 5's glob
    ("claude-opus-5*", Price(5.0, 25.0, 0.50, 6.25)),
    ("claude-3-opus*", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-sonnet-5*", Price(2.0, 10.0, 0.20, 2.50, 4.0)),  # 5, 5.5
    ("claude-sonnet-4-6*", Price(3.0, 15.0, 0.30, 3.75)),  # its 1M window at this price
    ("claude-sonnet-4*", Price(3.0, 15.0, 0.30, 3.75,  # 4, 4.5: dearer above 200k prompt tokens
                               long=(200_000, Price(6.0, 22.50, 0.60, 7.50, 12.0)))),
    ("claude-3-7-sonnet*", Price(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-5-5*", Price(0.10, 0.50, cache_write=0.125, cache_write_1h=0.20,
                                long=(100_000, Price(0.50, 2.50, cache_write=0.625)))),
    ("claude-haiku-4-5*", Price(1.0, 5.0, 0.10, 1.25)),
    ("claude-3-5-haiku*", Price(0.80, 4.0, 0.08, 1.0)),
    ("claude-3-haiku*", Price(0.25, 1.25, 0.03, 0.30)),
    # OpenAI
    ("gpt-6.2-sol*", Price(2.0, 10.0, 0.10, 2.50, long=(272_000, Price(4.0, 15.0, 0.20, 5.0)))),
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
    ("gpt-4o-mini", Price(0.15, 0.60, 0.075)),
    ("gpt-4o-mini-20*", Price(0.15, 0.60, 0.075)),  # dated ids; not -audio, -realtime, -search...
    ("gpt-4o-2024-05-13", Price(5.0, 15.0)),
    ("gpt-4o", Price(2.50, 10.0, 1.25)),
    ("gpt-4o-20*", Price(2.50, 10.0, 1.25)),
    ("o4-mini-deep-research*", Price(2.0, 8.0, 0.50)),
    ("o4-mini*", Price(1.10, 4.40, 0.275)),
    ("o3-mini*", Price(1.10, 4.40, 0.55)),
    ("o3-pro*", Price(20.0, 80.0)),
    ("o3-deep-research*", Price(10.0, 40.0, 2.50)),
    ("o3*", Price(2.0, 8.0, 0.50)),
    ("o1-pro*", Price(150.0, 600.0)),
    ("o1", Price(15.0, 60.0, 7.50)),  # not o1-mini, priced otherwise
    ("o1-20*", Price(15.0, 60.0, 7.50)),
    ("o1-preview*", Price(15.0, 60.0, 7.50)),
    ("text-embedding-3-small*", Price(0.02, 0.0)),
    ("text-embedding-3-large*", Price(0.13, 0.0)),
    # Google
    ("gemini-2.5-pro", Price(1.25, 10.0, 0.125, long=(200_000, Price(2.50, 15.0, 0.25)))),
    ("gemini-2.5-flash", Price(0.30, 2.50)),
    ("gemini-2.5-flash-lite", Price(0.10, 0.40)),
    ("gemini-3.1-pro-preview", Price(2.0, 12.0, long=(200_000, Price(4.0, 18.0)))),
    ("gemini-3-flash-preview", Price(0.50, 3.0, 0.05)),  # Gemini CLI's web search model
)


@dataclass(frozen=True, slots=True)
class Fee:
    """A server-side tool's price per call, USD; ``per_request``: once for an answer that
    called it at all."""

    usd: float
    per_request: bool = False


# The web search fee of a priced model whose price names none, by family (sources above);
# first match wins. A family not here (Gemini 2.0, others) has none: its searches cost nothing
# counted, as the docs say.
FEES: tuple[tuple[str, Fee], ...] = (
    ("claude-*", Fee(0.01)),
    # gpt-oss is OpenAI's open-weight model, served by whoever runs it (vLLM, Ollama), never by
    # OpenAI's search tool: a $0 price for gpt-oss-120b on vLLM took OpenAI's fee, and Codex on
    # it, declaring web_search, was refused on a $0.05 key that had spent nothing (audit).
    ("gpt-oss*", Fee(0.0)),
    ("gpt-*", Fee(0.01)),  # the GA tool's, for every model (above)
    ("o[1-9]*", Fee(0.01)),
    ("gemini-2.5*", Fee(0.035, per_request=True)),
    ("gemini-3*", Fee(0.014)),
)

# The searches reserved for a request that declares a search tool with no bound of its own
# (Anthropic's ``max_uses``, OpenAI's ``max_tool_calls``): ``accounting.reserved_searches``'s
# default. Codex declares ``web_search`` on every turn and rarely searches: 5 held on each
# ($0.05 beside its tokens) refused a $0.10 key's second concurrent turn with $0.0855 left
# (audit). A turn that searches more is charged in full at its settle.
DEFAULT_SEARCHES = 1


def with_fee(name: str, price: Price) -> Price:
    """``price`` with its family's web search fee (``FEES``, matched on ``name``) where it
    names none of its own. A price whose tokens are free (input and output 0: the operator's
    own model, served locally) takes no family's fee: the provider whose fee it is does not
    serve it."""
    if price.web_search is not None or (price.input == 0 and price.output == 0):
        return price
    fee = next((fee for pattern, fee in FEES if fnmatchcase(name, pattern)), None)
    if fee is None:
        return price
    return replace(price, web_search=fee.usd, web_search_per_request=fee.per_request)


SHIPPED = tuple((glob, with_fee(glob, price)) for glob, price in SHIPPED)


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
        # A catch-all ``"*"`` of the operator's comes after the shipped table: what the load
        # warning tells an operator to add for the models nothing prices, not a price for all.
        tables = (*(o for o in self.overrides if o[0] != "*"), *self.shipped,
                  *(o for o in self.overrides if o[0] == "*"))  # fmt: skip
        found = next((price for pattern, price in tables if fnmatchcase(model, pattern)), None)
        if found is not None:
            found = with_fee(model, found)  # an operator's price naming no fee: its family's
        if len(self._found) < 1024:  # model names come from clients
            self._found[model] = found
        return found


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float
    priced: bool  # False: no price is known for the model (usd is 0 and means "unknown")


def cost_of(price: Price | None, usage: Mapping[str, int]) -> Cost:
    """``usage`` as the gateway counts it: ``prompt`` (every input token, cached or not),
    ``completion``, of the prompt ``cache_read`` and ``cache_write``, and of ``cache_write``
    ``cache_write_1h``, written for an hour; ``web_search``, the searches a server-side tool
    made, each at the price's fee."""
    if price is None:
        return Cost(0.0, False)
    fees = search_fees(price, usage.get("web_search", 0))
    prompt = usage.get("prompt", 0)
    price = price.for_prompt(prompt)
    read = min(usage.get("cache_read", 0), prompt)
    write = min(usage.get("cache_write", 0), prompt - read)
    hour = min(usage.get("cache_write_1h", 0), write)
    fresh = prompt - read - write
    usd = (fresh * price.input
           + read * (price.input if price.cache_read is None else price.cache_read)
           + (write - hour) * (price.input if price.cache_write is None else price.cache_write)
           + hour * price.hour_write
           + usage.get("completion", 0) * price.output) / 1_000_000  # fmt: skip
    return Cost(usd + fees, True)


def search_fees(price: Price, searches: int) -> float:
    """What ``searches`` web searches cost at ``price``'s fee (the base price's: a long-prompt
    tier does not change it)."""
    if searches <= 0 or not price.web_search:
        return 0.0
    return price.web_search * (1 if price.web_search_per_request else searches)


def worst_case(price: Price | None, prompt_tokens: float, max_output_tokens: int,
               hour_cache: bool = False, searches: int = 0) -> float:  # fmt: skip
    """What a request may cost at most: its whole prompt at the dearer of the input and the
    cache-write price (a prompt written to Anthropic's cache costs 1.25× the input price; 2×
    written for an hour, for a request that asks for that: ``hour_cache``), and every output
    token it may generate. Reserved before sending, so that concurrent requests cannot
    overspend. ``searches``: the web searches the request may make (``declared_searches``)."""
    if price is None:
        return 0.0
    fees = search_fees(price, searches)
    # The rate of the prompt's size as estimated (3.5 bytes a token, more tokens than most text
    # has): a prompt estimated just below a threshold and counted above it costs more than this.
    price = price.for_prompt(prompt_tokens)
    per_prompt_token = max(price.input, price.cache_write or 0.0, price.hour_write if hour_cache else 0.0)
    return (prompt_tokens * per_prompt_token + max_output_tokens * price.output) / 1_000_000 + fees


# The search tools a request declares, by API: Anthropic's versioned ``web_search_…`` types
# (web_search_20250305, web_search_20260209), the Responses API's, and Gemini's (camelCase or
# snake_case, as ``gemini/fields.py`` reads them; ``googleSearchRetrieval``: Gemini 1.5's).
_RESPONSES_SEARCH = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26",
                               "web_search_preview_2025_03_11"})  # fmt: skip
_GEMINI_SEARCH = ("googleSearch", "google_search", "googleSearchRetrieval", "google_search_retrieval")


def declared_searches(payload: Mapping[str, Any], reserved: int = DEFAULT_SEARCHES) -> int:
    """How many web searches a request may be billed, for its reservation: 0 without a search
    tool; Anthropic's ``max_uses`` (each tool's, summed), else OpenAI's ``max_tool_calls``, else
    ``reserved`` (``accounting.reserved_searches``)."""
    tools = payload.get("tools")
    searches = 0
    unbounded = False
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if isinstance(kind, str) and kind.startswith("web_search_") and kind not in _RESPONSES_SEARCH:
            uses = tool.get("max_uses")
            if isinstance(uses, int) and not isinstance(uses, bool) and uses > 0:
                searches += min(uses, 1000)
            else:
                unbounded = True
        elif kind in _RESPONSES_SEARCH or any(name in tool for name in _GEMINI_SEARCH):
            unbounded = True
    if unbounded:
        cap = payload.get("max_tool_calls")
        if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
            searches += min(cap, 1000)
        else:
            searches += reserved
    return searches


# Where Anthropic takes a ``cache_control`` (and chat clients put one, carried to Anthropic):
# the request's own (automatic caching), a tool, a system block, a message's content block and
# a tool result's.
_CACHED_LISTS = ("system", "tools")


def asks_hour_cache(payload: Mapping[str, Any]) -> bool:
    """Whether a request asks for anything to be cached for an hour (``cache_control: {"type":
    "ephemeral", "ttl": "1h"}``), which costs twice the input price to write: its reservation
    takes its prompt at that price. Read where a ``cache_control`` goes, not in text."""
    if _hour(payload.get("cache_control")):
        return True
    if any(_any_hour(payload.get(name)) for name in _CACHED_LISTS):
        return True
    messages = payload.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        if _any_hour(content) or any(_any_hour(b.get("content")) for b in content
                                     if isinstance(b, dict) and b.get("type") == "tool_result"):  # fmt: skip
            return True
    return False


def _any_hour(blocks: Any) -> bool:
    if not isinstance(blocks, list):
        return False
    return any(_hour(b.get("cache_control")) for b in blocks if isinstance(b, dict))


def _hour(marker: Any) -> bool:
    return isinstance(marker, dict) and marker.get("ttl") == "1h"

"""A gateway key's rules on a request: the models it may use, its limits and its budget.

    admit   after the body is read: a model the key may not use is refused (403 auth); a key
            with limits or a budget reserves the request's worst case (gateway/keys/ledger.py)
            or is answered by the gateway, never sent: 429 rate_limit for a limit, 402 budget
            for a spent budget, each in the client's API's envelope with the reset
    settle  when the request is done (observe): the cost from the provider's usage, for the
            log line and the metrics, and the reservation turned into that spend

Codex stops at once only on a 429 whose error is ``usage_limit_reached`` with ``resets_at``
(measured with Codex 0.169: it retries a 402 and a 403 five times), so Codex is answered a
spent budget in that shape; every other client gets the 402 it stops on. The classification
headers (``budget``, not retryable, the reset) are the same for all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from gateway.apis import output_budget
from gateway.apis.base import Dialect, Inbound
from gateway.apis.gemini.fields import field
from gateway.errors import Classification, ErrorType
from gateway.keys.ledger import Accounts, LimitHit, Reservation
from gateway.keys.periods import iso
from gateway.keys.prices import (
    DEFAULT_SEARCHES,
    Cost,
    Price,
    PriceTable,
    asks_hour_cache,
    cost_of,
    declared_searches,
)
from gateway.keys.registry import KeySpec
from gateway.keys.soft import SoftCrossing
from gateway.pipeline.outcome import Failure, Leg, RequestState, bad_request, gateway_failure
from gateway.policy.retry_after import reset_at_ms
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.services import Services
from gateway.tracing.attrs import P
from gateway.translate import NoLeg
from gateway.translate.chat_gemini.request import EFFORT_BUDGET
from gateway.translate.chat_messages import default_max_tokens

log = logging.getLogger("gateway.keys")

_CODEX = ("codex_cli_rs", "codex_exec")
FLUSH_AFTER_S = 0.005  # settles of requests that end this close together share one round trip


async def admit(svc: Services, state: RequestState, headers: Mapping[str, str],
                inbound: Inbound) -> Failure | None:  # fmt: skip
    limited = state.key is not None and state.key.limited
    sent = _as_sent(svc, state.dialect, inbound) if limited else None
    searches = _searches_sent(svc, state.dialect, inbound) if limited else 0
    return await admit_request(svc, state, headers, inbound.model, inbound.size, inbound.payload, sent,
                               searches)


def _searches_sent(svc: Services, dialect: Dialect | None, inbound: Inbound) -> int:
    """The web searches a request may be billed (``declared_searches``), where some upstream of
    its route takes it in its own API: a translation sends no provider's search tool on (the
    Responses-to-chat one drops hosted tools, and Codex declares ``web_search`` on every
    request), so a route that only translates it searches nothing."""
    unbounded = svc.accounts.reserved_searches if svc.accounts is not None else DEFAULT_SEARCHES
    searches = declared_searches(inbound.payload, unbounded)
    route = svc.chain_for(inbound.model) if searches and inbound.model else None
    if route is None or dialect is None or inbound.model is None:
        return searches
    for up in route.upstreams:
        leg = up.leg_for(svc.translations, dialect, inbound.model)
        if not isinstance(leg, NoLeg) and not leg.translated:
            return searches
    return 0


def _as_sent(svc: Services, dialect: Dialect | None, inbound: Inbound) -> tuple[str | None, int | None]:
    """What the route will send a dialect's request, as far as its key's rules care: the model
    its price is read under, and the most output it can be given when it names none.

    Admission runs before routing picks an upstream, so this reads the route the request will
    take (``chain_for``, cached) for every upstream it may reach: a pool's members and the
    fallbacks. The price is the upstream's model's (after ``model_map``), the client's name where
    that has none: `fast` mapped to claude-haiku-4-5 was refused as unpriced (review). Of several
    priced, the dearest, for the worst case. A request that names no output limit is sent one
    by the translation to Messages (``chat_messages.default_max_tokens``, 128,000 for Claude
    5.x, 64,000 for Sonnet 4):
    reserving ``accounting.default_max_tokens`` (4,096) in its place let 8 such requests at once
    spend $7.20 of a $0.50 budget (review). None where the route has nothing to add."""
    model = inbound.model
    route = svc.chain_for(model) if model else None
    if route is None or dialect is None or model is None:
        return None, None
    best: tuple[float, float, str] | None = None
    output: int | None = None
    asked = output_budget.ceiling(inbound.payload)
    for up in route.upstreams:
        leg = up.leg_for(svc.translations, dialect, model)
        if isinstance(leg, NoLeg):
            continue
        sent = leg.model or model
        prices = svc.accounts.prices if svc.accounts is not None else None
        named = sent if prices is not None and prices.price_for(sent) is not None else model
        price = prices.price_for(named) if prices is not None else None
        if price is not None and (best is None or (price.output, price.input) > best[:2]):
            best = (price.output, price.input, named)
        if asked is None and leg.translated and leg.wire.api == "messages":
            default = default_max_tokens(sent, inbound.stream)
            cap = up.cfg.max_output_tokens
            default = min(default, cap) if cap is not None else default
            output = default if output is None else max(output, default)
        elif asked is None and leg.wire.api == "gemini" and svc.accounts is not None:
            thinks = svc.accounts.default_max_tokens + gemini_thinking(inbound.payload, leg.translated)
            output = thinks if output is None else max(output, thinks)
    first = route.upstreams[0].leg_for(svc.translations, dialect, model)
    unpriced = first.model if not isinstance(first, NoLeg) and first.model else model
    return (best[2] if best is not None else unpriced), output


# Gemini 2.5 thinks by default, "Auto (up to 8,192 tokens)" (Google's thinking guide, the
# table of budgets per model, as quoted in juspay/neurolink#1707), and bills thoughts as output
# ("response pricing is the sum of output tokens and thinking tokens",
# ai.google.dev/gemini-api/docs/thinking).
GEMINI_AUTO_THINKING = 8192


def gemini_thinking(payload: Mapping[str, Any], translated: bool) -> int:
    """The thought tokens a request that names no output limit may be billed on a Gemini
    upstream, on top of its answer: Gemini CLI 0.61 sends ``thinkingBudget: 8192`` and no
    ``maxOutputTokens`` (tests/corpus/requests/gemini-cli-0.61-first.json), and admission held
    4,096 tokens for 8,192 of thoughts and an answer: 50 such streams at once spent $0.10 of a
    $0.05 key (audit). A limit the request names bounds thoughts and answer together (Gemini
    counts thoughts against ``maxOutputTokens``: googleapis/python-genai#782, #2062), so this
    is only for one that names none. ``translated``: a chat or Responses request, sent the
    ``thinkingBudget`` its effort maps to (``chat_gemini.EFFORT_BUDGET``)."""
    if translated:
        effort = payload.get("reasoning_effort")
        reasoning = payload.get("reasoning")
        if effort is None and isinstance(reasoning, Mapping):
            effort = reasoning.get("effort")
        if effort is None:
            return GEMINI_AUTO_THINKING
        return EFFORT_BUDGET.get(effort, 0) if isinstance(effort, str) else GEMINI_AUTO_THINKING
    config = field(payload, "generationConfig")
    thinking = field(config, "thinkingConfig") if isinstance(config, Mapping) else None
    budget = field(thinking, "thinkingBudget") if isinstance(thinking, Mapping) else None
    named = output_budget.count(budget)
    # -1 is "dynamic thinking", the model's own choice; absent, Google's default: both automatic.
    return named if named is not None and named >= 0 else GEMINI_AUTO_THINKING


async def admit_request(svc: Services, state: RequestState, headers: Mapping[str, str], model: str | None,
                        size: int, payload: Mapping[str, Any],
                        sent: tuple[str | None, int | None] | None = None,
                        searches: int = 0) -> Failure | None:  # fmt: skip
    """``admit`` for any request: one of a dialect's own, or one forwarded as it is
    (``/v1/embeddings``, ``/v1/responses/compact``, ``/v1/completions``…), which spends the
    operator's provider keys as much and is held to the same rules. ``sent``: the model priced
    and the output a request naming none is sent (``_as_sent``); a request relayed as it is
    goes with the client's model, and names its own limit or gets the provider's default.
    ``searches``: the web searches it may be billed (``_searches_sent``); none for a request
    relayed as it is (a token count declares the tools it counts, and searches nothing)."""
    held = _held_key(svc, state, model, headers)
    if not isinstance(held, tuple):
        return held  # a refusal for the model, or None: no limit applies
    key, accounts = held
    priced, sent_output = sent if sent is not None and sent[0] is not None else (model, None)
    if priced and (key.budget is not None or key.team_budget is not None) \
            and accounts.prices.price_for(priced) is None:  # fmt: skip
        svc.telemetry.child(svc.telemetry.key_refusals, key.name, "unpriced").inc()
        return _unpriced(key, priced, headers)
    if key.counts_tokens and payload.get("background") is True:
        svc.telemetry.child(svc.telemetry.key_refusals, key.name, "background").inc()
        return _background(key.name)
    prompt = size / BYTES_PER_TOKEN
    if key.counts_tokens:
        # What the request names without sending (a PDF by URL, a file_id) is read by the
        # provider as prompt all the same: its bytes are not here to estimate from.
        prompt += accounts.references.of(payload)
    budgeted = key.budget is not None or key.team_budget is not None
    output = output_budget.ceiling(payload) or sent_output
    if output is not None and output_budget.named_loosely(payload):
        output = max(output, accounts.default_max_tokens)  # (named_loosely says why)
    got = await accounts.admit(key, priced, prompt, output, _answers(payload),
                                   budgeted and asks_hour_cache(payload),
                                   searches if budgeted else 0)  # fmt: skip
    if isinstance(got, Reservation):
        state.reservation = got
        return None
    return _refused(svc, state, headers, got)


def _held_key(svc: Services, state: RequestState, model: str | None,
              headers: Mapping[str, str]) -> tuple[KeySpec, Accounts] | Failure | None:  # fmt: skip
    """The key whose limits and budget hold this request; its refusal for a model it may not
    use; None: none applies (no key, or one without limits, or no accounts)."""
    key = state.key
    if key is None:
        return None
    if not key.allows(model):
        return _not_allowed(svc, key, model, headers)
    if not key.limited or svc.accounts is None:
        return None
    return key, svc.accounts


# The token counts relayed as they are (Gemini's ``countTokens`` has its own handler).
COUNT_PATHS = frozenset({"/v1/messages/count_tokens", "/v1/responses/input_tokens"})


async def admit_count(svc: Services, state: RequestState, headers: Mapping[str, str],
                      model: str | None) -> Failure | None:  # fmt: skip
    """``admit`` for a token count, of any of the three APIs: the key's models, its ``parallel``
    and a spent budget refuse it (an expired or revoked key is refused before, as any request);
    its minute's requests and tokens and its budget's reservations are not taken
    (``Accounts.admit_count`` says why). Nor is an unpriced model refused: a count costs
    nothing."""
    held = _held_key(svc, state, model, headers)
    if not isinstance(held, tuple):
        return held  # a refusal for the model, or None: no limit applies
    key, accounts = held
    got = await accounts.admit_count(key)
    if got is None:
        return None
    return _refused(svc, state, headers, got)


def _not_allowed(svc: Services, key: KeySpec, model: str | None, headers: Mapping[str, str]) -> Failure:
    svc.telemetry.child(svc.telemetry.key_refusals, key.name, "model").inc()
    shown = (model or "")[:128]
    c = Classification.of(ErrorType.AUTH)
    message = f"key '{key.name}' may not use model '{shown}'; it may use: {', '.join(key.models)}"
    if is_codex(headers):
        # Codex retries a 403 five times (6 requests, 7 s, measured with 0.169) and stops
        # at once on a 400: the same refusal, as a 400.
        return gateway_failure(400, c, message, "model_not_allowed", final=True)
    return gateway_failure(403, c, message, "model_not_allowed", final=True)


# The relayed endpoints a key's rules can hold: each names its model in its JSON body and is
# answered at once, with its usage in the answer (or, counting tokens, nothing spent). The
# three APIs' own paths are here for a trailing slash, which reaches the relay. Nothing else
# is, whatever its body names: a dummy ``{"model": ...}`` on ``GET /v1/files`` read as the
# request's model let a key with rules list the provider account's files.
HELD_PATHS = frozenset({
    "/v1/chat/completions", "/v1/messages", "/v1/responses",
    "/v1/completions", "/v1/embeddings", "/v1/moderations", "/v1/responses/compact",
    "/v1/responses/input_tokens", "/v1/messages/count_tokens",
})  # fmt: skip


def unheld_path(state: RequestState, method: str, path: str, model: str | None) -> Failure | None:
    """A relayed request from a key with rules (``models``, a limit or a budget) and not an
    admin's that its rules cannot hold: anything but a ``POST`` naming its model to one of
    ``HELD_PATHS``. A batch names its models inside (Anthropic's ``requests[].params``) or in
    a file (OpenAI's), holds up to 100,000 requests, and is spent later at the provider, with
    no usage in its answer; files, stored responses and batch results are the whole provider
    account's, whichever key made them. Only a model listing goes through."""
    key = state.key
    if key is None or key.admin or (key.models == ("*",) and not key.limited):
        return None
    if method in ("GET", "HEAD") and (path == "/v1/models" or path.startswith("/v1/models/")):
        return None
    if model and method == "POST" and path.rstrip("/") in HELD_PATHS:
        return None
    c = Classification.of(ErrorType.AUTH)
    message = (f"key '{key.name}' may not use {method} {path[:128]}: the request names no model its models, "
               "limits and budget can be held to (batches, files, stored objects; such a key may relay "
               "only a POST naming its model to /v1/completions, /v1/embeddings and the like); "
               "ask for an admin key")  # fmt: skip
    return gateway_failure(403, c, message, "path_not_allowed", final=True)


def settle(svc: Services, state: RequestState) -> None:
    """At the end of a request: its cost now (the log line carries it), the store later."""
    key = state.key
    accounts = svc.accounts
    if key is None or accounts is None:
        return
    reservation = state.reservation
    used: dict[str, int] = {}
    costs: list[Cost] = []
    parts = _charged_parts(accounts.prices, state)
    for charged, price, _, _ in parts:
        costs.append(cost_of(price, charged))
        for kind, n in charged.items():
            used[kind] = used.get(kind, 0) + n
    cost = Cost(sum(c.usd for c in costs), all(c.priced for c in costs))
    if len(parts) > 1 or _counts(parts[0][0]) != _counts(state.usage):
        # The log line's usage is what the upstreams reported, under the client's model: with
        # legs at other models and estimated prompts beside it, it did not explain the cost
        # (a chat stream cut and finished by a gpt-5-mini fallback: $0.075286 beside a usage
        # of 21,000 prompt tokens, 35,059 charged; audit), nor one part charged an estimate (a
        # request left before its first byte: a cost and no usage at all; audit). Only where
        # one part was charged what was reported does the log line's usage say it alone.
        state.cost_legs = tuple({"model": model, "usage": charged, "cost_usd": round(c.usd, 6),
                                 **({"estimated": list(guessed)} if guessed else {}),
                                 **({} if c.priced else {"priced": False})}
                                for (charged, _, model, guessed), c
                                in zip(parts, costs, strict=True))  # fmt: skip
    # Nothing used (a listing, a refused request) has nothing to price: not "unpriced".
    state.cost_usd, state.priced = cost.usd, cost.priced or not any(used.values())
    attrs: dict[str, str | float | bool] = {f"{P}key": key.name, f"{P}cost_usd": round(cost.usd, 6),
                                           f"{P}cost_priced": cost.priced}  # fmt: skip
    if key.team:
        attrs[f"{P}team"] = key.team
    svc.tracing.annotate(state, attrs)  # on the request's span, before it ends
    t = svc.telemetry
    model = t.model_label(state.model)
    if cost.usd:
        t.child(t.key_spend, key.name, key.team or "", model).inc(cost.usd)
    for kind, n in used.items():
        t.child(t.key_tokens, key.name, model, kind, "true" if cost.priced else "false").inc(n)
    for held in state.holds:  # what they held comes back; what it paid for is in ``cost``
        if not held.settled:
            accounts.settle_later(held, {}, Cost(0.0, True))
    if reservation is not None and not reservation.settled:
        accounts.settle_later(reservation, used, cost)
    if accounts.has_pending():
        if accounts.flusher is None or accounts.flusher.done():
            # Off the request's path, a few milliseconds later with whatever else has ended
            # by then; shutdown waits for it (server.py).
            task = asyncio.get_running_loop().create_task(_flush_soon(accounts))
            accounts.flusher = task
            svc.life.settling.add(task)
            task.add_done_callback(svc.life.settling.discard)


async def hold_abandoned(svc: Services, state: RequestState) -> Failure | None:
    """Before another attempt of a request an earlier attempt of which the provider took and
    the gateway left (``attempt._abandoned``: a first-byte or first-token timeout): that one is
    charged its prompt besides whatever answers next, which the reservation's one worst case
    does not hold. Held on the key's budgets first, as an admission is checked, else the
    request ends here with the budget's refusal, not sent again: eight requests at once at a
    $3,000 budget's edge, each attempt timed out and retried, spent $5,298 (review)."""
    reservation, accounts = state.reservation, svc.accounts
    if reservation is None or accounts is None or not reservation.budgets:
        return None
    left = [leg for leg in state.legs if leg.unread][state.legs_held:]
    for leg in left:
        charged, _ = _charged(reservation, leg, True)
        usd = cost_of(_served_price(accounts.prices, state, leg.model), charged).usd
        got = await accounts.hold_again(reservation, usd)
        if isinstance(got, LimitHit):
            why = (" (an attempt of this request timed out after the provider took it: sent again, it would "
                   "pay its prompt again)")  # fmt: skip
            hit = LimitHit(got.kind, got.message + why, got.retry_after_s, got.reset_at_s)
            state.key_refusal = _refused(svc, state, {"user-agent": state.user_agent or ""}, hit)
            return state.key_refusal
        state.legs_held += 1
        if got is not None:
            state.holds += (got,)
    return None


def _counts(usage: Mapping[str, int]) -> dict[str, int]:
    return {kind: n for kind, n in usage.items() if n}


def _charged_parts(
    prices: PriceTable, state: RequestState
) -> list[tuple[dict[str, int], Price | None, str | None, tuple[str, ...]]]:
    """What the key pays for, part by part, each at its own price: every stream relayed (a
    continued answer's legs, each at the model its upstream was sent: a cut stream of a
    $30/$180 model continued by gpt-5-nano on a fallback was charged all at nano's price,
    571 shown tokens of the first for $0.0002 instead of $0.10; audit), then what no stream
    counted (a buffered answer, a relayed one, a continuation the client left before its first
    words), at the model last sent. A part that used nothing is left out unless nothing was
    used at all. Each with its model: the one it was sent, else the client's; and the kinds of
    its usage that are estimates (``_charged``)."""
    rest = dict(state.usage)
    for leg in state.legs:
        for kind, n in leg.usage.items():
            rest[kind] = rest.get(kind, 0) - n
    last = Leg({k: n for k, n in rest.items() if n}, state.sent_model, state.completion_estimated)
    parts = [(leg, leg.unread) for leg in state.legs] + [(last, state.answered_uncounted)]
    charged = [(*_charged(state.reservation, leg, left), _served_price(prices, state, leg.model),
                leg.model or state.model) for leg, left in parts]  # fmt: skip
    out = [(used, price, model, guessed) for used, guessed, price, model in charged]
    return [part for part in out if any(part[0].values())] or out[-1:]


def _charged(reservation: Reservation | None, leg: Leg,
             unread: bool) -> tuple[dict[str, int], tuple[str, ...]]:  # fmt: skip
    """One part's usage with the estimates the key pays for beside the provider's counts (a
    copy: ``state.usage`` stays what the upstreams reported, for tokens_total and the log line,
    whatever the keys section says: an estimate there made the same request count differently
    per config). ``unread``: the provider took a request whose usage was never read (left
    before its first words, relayed with a usage that could not be read). With the kinds that
    are estimates: ``prompt`` as admission estimated it, ``completion`` from the text shown."""
    used = leg.usage
    if reservation is None:
        return used, ()
    guessed: tuple[str, ...] = ()
    if not used.get("prompt") and (used.get("completion") or unread):
        # An answer cut before the provider counted it (chat and Responses streams count the
        # prompt only at their end: each leg of a continued one, whoever cut it, was read and
        # billed), left by its client (or a timeout) before its first words, or relayed with a
        # usage that could not be read: the prompt was read all the same. Estimated as
        # admitting estimated it; the key would otherwise pay only for the words it was shown,
        # or nothing. (A continuation's own prompt, the first's and the text shown, is counted
        # by its stream, or estimated the same where it was cut too.)
        used = {**used, "prompt": reservation.tokens}
        guessed = ("prompt",)
    if leg.estimated and reservation.output_asked is not None:
        # Text over bytes/3.5 is a guess ("word word ..." reads as 1.4x its tokens); what the
        # provider can bill is at most what was asked for, which admission reserved: a $0.01
        # budget's books showed $0.0146 for answers the provider billed $0.0101. Leg by leg:
        # capped as a sum, a continued answer lost the tokens its continuation was billed.
        used = {**used, "completion": min(used.get("completion", 0), reservation.output_asked)}
    if leg.estimated and used.get("completion"):
        guessed += ("completion",)
    return used, guessed


def _served_price(prices: PriceTable, state: RequestState, sent: str | None) -> Price | None:
    """The price of the model ``sent``: the model the answering upstream was sent (its
    ``model_map``'s, the client's name where that has none priced, as ``_as_sent`` reads it).
    Admission reserved at the dearest of the route, which a cheaper pool deployment or the
    primary of a dearer fallback does not cost: `fast` answered by claude-haiku-4-5 was settled
    at claude-opus-4-1's $15/$75 for its fallback, 15x what the provider billed (review). The
    reservation's price where nothing was sent (an answer replayed from the cache), else the
    client's model's."""
    for named in (sent, state.model) if sent is not None else ():
        price = prices.price_for(named)
        if price is not None:
            return price
    reservation = state.reservation
    if reservation is not None and reservation.price is not None:
        return reservation.price
    return prices.price_for(state.model)


def soft_limit_line(c: SoftCrossing) -> None:
    """The one warning of a budget's soft limit reached this period (names and dollars only)."""
    log.warning({"event": "budget_soft_limit", "kind": c.kind, "name": c.name, "key": c.key, "team": c.team,
                 "period": c.period, "period_start": c.period_name, "spent_usd": c.spent_usd,
                 "soft_usd": c.soft_usd, "usd": c.usd, "resets_at": iso(c.resets_at)})  # fmt: skip


async def _flush_soon(accounts: Accounts) -> None:
    await asyncio.sleep(FLUSH_AFTER_S)
    await accounts.flush()


def _unpriced(key: KeySpec, model: str, headers: Mapping[str, str]) -> Failure:
    """A model with no price, asked for by a key with a budget (its own or its team's): refused.
    Its cost would be $0 ("priced": false), so the budget would not hold at all: an audit's
    $0.05 key ran gpt-4-turbo, o1 and every Gemini model at no spend. Only the gateway's
    operator can price it (``prices:``): the message says so and names the model. As a model
    the key may not use, a 403, and a 400 to Codex, which retries a 403."""
    shown = model[:128]
    whose = f"key '{key.name}'" if key.budget is not None else f"key '{key.name}' (team '{key.team}')"
    example = f'prices: {{"{shown}": {{input: <usd>, output: <usd>}}}}'
    message = (f"{whose} has a budget, and model '{shown}' has no price, so what it spends could not be "
               f"counted against it; the gateway's operator can add one under `prices:` in the config "
               f"(USD per million tokens: {example})")  # fmt: skip
    c = Classification.of(ErrorType.AUTH)
    if is_codex(headers):
        return gateway_failure(400, c, message, "model_not_priced", final=True)
    return gateway_failure(403, c, message, "model_not_priced", final=True)


def _background(name: str) -> Failure:
    """A Responses request with ``background: true``, from a key with a budget or
    ``tokens_per_minute``: refused, not reserved at a worst case. OpenAI answers such a request
    at once, ``queued`` and without usage, runs it afterwards and bills it
    (https://developers.openai.com/api/docs/guides/background: "Background mode kicks off these
    tasks asynchronously, and developers can poll response objects"); its usage is only in
    what a poll answers, and a key with rules may not poll (``unheld_path``: a stored response is
    the whole provider account's). So its reservation could never be settled to what it cost,
    and a worst case has no bound to take: a request that names no ``max_output_tokens`` may
    run to the model's whole output, and a deep-research run reads millions of tokens of search
    results besides. Charging a guess forever, or $0, are both wrong spend; the client is told
    to send it in the foreground, which is metered (a stream is the way to a long task there)."""
    message = (f"key '{name}' may not start a background response (`background: true`): its budget and "
               "token limits are held to each answer's usage, and a background response is answered "
               "before it runs, without usage, and billed later at the provider; send it without "
               "`background` (stream it for a long task), or ask for a key without a budget")  # fmt: skip
    return bad_request(message, "background_not_metered")


def _answers(payload: Mapping[str, Any]) -> int:
    """How many answers a request may be billed output for, each up to every output token
    asked for: chat's and /v1/completions' ``n``, /v1/completions' ``best_of`` (which "generates
    best_of completions server-side", each billed, and is at least ``n``: openai-python's
    ``types/completion_create_params.py``) and Gemini's ``candidateCount``; times the prompts of
    a /v1/completions request (``prompt`` "encoded as a string, array of strings, array of
    tokens, or array of token arrays", ``n`` completions "for each prompt", the same file).
    Reading only ``n``, 40 requests at once with ``best_of: 20``, or ``"prompt": ["hi"] * 20``,
    were each reserved one answer and spent $40 of a $2 budget (audit). The prompts' own tokens
    need nothing more: the body's bytes, which the prompt is estimated from, hold each of them."""
    config = payload.get("generationConfig") or payload.get("generation_config")
    nested = config if isinstance(config, dict) else {}
    each = 1
    for value in (payload.get("n"), payload.get("best_of"), nested.get("candidateCount"),
                  nested.get("candidate_count")):  # fmt: skip
        value = output_budget.count(value)  # ``n: "3"`` is three answers to a lax server
        if value is not None and value > each:
            each = min(value, 128)  # OpenAI's own bound on n
    return each * _prompts(payload.get("prompt"))


def _prompts(prompt: Any) -> int:
    """The prompts a /v1/completions ``prompt`` names: a list of strings or of token lists is
    one each; a string, or one list of token ids, is one. (The Responses API's ``prompt`` is a
    template object: one.)"""
    if not isinstance(prompt, list) or not prompt:
        return 1
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return 1  # one prompt as token ids
    return len(prompt)


def _refused(svc: Services, state: RequestState, headers: Mapping[str, str], r: LimitHit) -> Failure:
    """The client's answer to a refusal of its key (counted and logged)."""
    name = state.key.name if state.key else ""
    svc.telemetry.child(svc.telemetry.key_refusals, name, r.kind).inc()
    log.info({"request_id": state.request_id, "event": "key_refused", "key": name, "reason": r.kind})
    now = svc.wall()
    if r.kind in ("budget", "team_budget"):
        reset = r.reset_at_s or now
        c = Classification(ErrorType.BUDGET, False, None, round(reset * 1000), "budget_exhausted", r.message,
                           f"key '{state.key.name if state.key else ''}' {r.kind}")  # fmt: skip
        state.retries_settled = True
        if is_codex(headers):
            return _codex_usage_limit(c, r.message, reset)
        return gateway_failure(402, c, r.message, "budget_exhausted", final=True)
    wait = r.retry_after_s or 1.0
    if r.kind == "store_down":
        c = Classification(ErrorType.PROVIDER_UNAVAILABLE, True, wait, reset_at_ms(wait, now),
                           "accounting_unavailable", r.message)  # fmt: skip
        return gateway_failure(503, c, r.message, "accounting_unavailable", final=True)
    c = Classification(ErrorType.RATE_LIMIT, True, wait, reset_at_ms(wait, now), r.kind, r.message)
    if r.kind == "parallel":
        return gateway_failure(429, c, r.message, "key_parallel_limit", final=True)
    if r.kind == "budget_held":
        return gateway_failure(429, c, r.message, "key_budget_held", final=True)
    if r.kind == "tpm":
        return gateway_failure(429, c, r.message, "key_tokens_per_minute", final=True)
    if r.kind == "tpm_held":
        return gateway_failure(429, c, r.message, "key_tokens_held", final=True)
    return gateway_failure(429, c, r.message, "key_requests_per_minute", final=True)


def is_codex(headers: Mapping[str, str]) -> bool:
    return headers.get("originator", "") in _CODEX or headers.get("user-agent", "").startswith(_CODEX)


def _codex_usage_limit(c: Classification, message: str, reset_s: float) -> Failure:
    """Codex's own usage-limit error (its ``usage_limit_reached`` with ``resets_at``, epoch
    seconds): Codex stops at once on it and tells its user when the limit resets."""
    # (The message names the reset already: "...; resets 2026-11-30T00:00:00Z".)
    body = {"error": {"type": "usage_limit_reached", "code": "budget_exhausted",
                      "message": message, "resets_at": int(reset_s)}}  # fmt: skip
    return Failure(c, 429, [("Content-Type", "application/json")], json.dumps(body).encode(), final=True)


"""What one ledger operation carries (gateway/keys/ledger.py asks, the stores answer)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerAdmit:
    key: str  # the gateway key's name
    minute: int  # epoch minute: requests and tokens per minute are counted per minute
    requests_per_minute: int | None
    tokens_per_minute: int | None
    tokens: int  # the request's estimated prompt tokens (settled to the real count)
    parallel: int | None
    slot: str  # this request's slot among the key's requests in flight
    now_ms: int
    slot_ttl_ms: int  # a replica that dies mid-request frees its slot after this long
    budgets: tuple[tuple[str, float], ...]  # (period budget's store key, its USD limit)
    reserve_usd: float  # the request's worst case, held against every budget until settled
    budget_ttl_s: float


@dataclass(frozen=True, slots=True)
class LedgerSettle:
    key: str
    minute: int
    token_delta: int  # the real tokens less the estimate counted at admission
    slot: str
    budgets: tuple[str, ...]
    reserve_usd: float
    cost_usd: float
    budget_ttl_s: float
    # What admission counted into the minute as held by this request in flight (its ``tokens``),
    # given back here: a tokens-per-minute refusal tells tokens held from tokens used.
    held_tokens: int = 0


@dataclass(frozen=True, slots=True)
class LedgerKeep:
    """A request still running: its slot (and its reservation on each budget) held on until
    ``until_ms``, so that a request longer than ``LedgerAdmit.slot_ttl_ms`` still counts."""

    key: str
    minute: int  # its admission's
    slot: str
    budgets: tuple[str, ...]
    reserve_usd: float
    until_ms: int
    slot_ttl_ms: int


# (requests, tokens) this minute, requests in flight, (spent, reserved) USD per budget.
LedgerState = tuple[int, int, int, list[tuple[float, float]]]

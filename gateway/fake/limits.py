"""Per-credential rate limits and key states for the fake upstream: pure, clock injected.

The fake tells deployments apart by the credential a request carries. Per key it can hold
requests-per-minute and tokens-per-minute limits, and a state a test sets: limited until an
instant, revoked, or out of credit. Nothing here speaks HTTP; :mod:`gateway.fake.keyed`
renders it in each API's own headers and error bodies.

The limits are buckets refilled continuously (capacity per minute, 1/60 of it per second),
not windows reset once a minute: that is how both providers meter. OpenAI documents
``x-ratelimit-reset-requests`` as the time until the limit "resets to its initial state"
and answers ``12ms`` with 4999 of 5000 requests left, 60 s / 5000: one request's refill.
Anthropic's rate-limit docs say its limits are "continuously replenished" token buckets
and ``anthropic-ratelimit-*-reset`` is when the bucket is full again. A once-a-minute
window would be laxer than either right after a burst, and hide a gateway that hammers.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]  # epoch seconds; tests pass a fake one
MINUTE_S = 60.0


@dataclass
class Bucket:
    capacity: int
    level: float = -1.0  # full when created (set in __post_init__)
    at: float = 0.0  # when ``level`` was last brought up to date

    def __post_init__(self) -> None:
        if self.level < 0:
            self.level = float(self.capacity)

    def refill(self, now: float) -> None:
        # A clock that steps back (tests reuse instants) refills nothing rather than draining.
        self.level = min(float(self.capacity), self.level + max(0.0, now - self.at) * self.capacity / MINUTE_S)
        self.at = max(self.at, now)

    def remaining(self) -> int:
        return max(0, math.floor(self.level + 1e-9))

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` fits (0 when it fits now)."""
        return max(0.0, (amount - self.level) * MINUTE_S / self.capacity)

    def full_in(self) -> float:
        """Seconds until the bucket is full again: what both APIs call the reset."""
        return max(0.0, (self.capacity - self.level) * MINUTE_S / self.capacity)

    def take(self, amount: float) -> None:
        # Usage reported after the answer may exceed what was left: the bucket empties, no
        # further (a negative remaining is not something either API ever shows).
        self.level = max(0.0, self.level - amount)


@dataclass
class Snapshot:
    """One key's limits as the headers of an answer report them, after that answer."""

    requests: Bucket | None
    tokens: Bucket | None


@dataclass
class Verdict:
    """Why a request is refused, or ``None`` in its place when it is admitted."""

    reason: str  # "revoked" | "exhausted" | "limited" | "requests" | "tokens" | "too_large"
    wait_s: float = 0.0  # how long until it would be admitted (retry-after)
    used: int = 0  # tokens already counted in the bucket (OpenAI's message states them)
    requested: int = 0  # tokens this request needs


@dataclass
class KeyLimits:
    """Per-credential limits and states. ``None`` stands for a request without a credential."""

    clock: Clock = time.time
    buckets: dict[str, Snapshot] = field(default_factory=dict)
    limited: dict[str, float] = field(default_factory=dict)  # key -> epoch seconds
    # Token counting limited, key -> epoch seconds: Anthropic's "Token counting and message
    # creation have separate and independent rate limits. Usage of one does not count against
    # the limits of the other." (https://docs.anthropic.com/en/docs/build-with-claude/token-counting)
    counting_limited: dict[str, float] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    exhausted: set[str] = field(default_factory=set)
    calls: Counter[str | None] = field(default_factory=Counter)
    # Whether an OpenAI-style 429 carries ``retry-after`` (Anthropic's always does: its
    # rate-limits page documents it). The real 429 in tests/corpus/wild.json
    # (wrtnlabs/autobe#136) has it; openai-node#1477 quotes one without it, and
    # openai/openai-openapi#564 calls it optional: False answers as that one does, the wait in
    # the body's "Please try again in" and the x-ratelimit-* headers alone.
    retry_after: bool = True

    def limit(self, key: str, rpm: int | None = None, tpm: int | None = None) -> None:
        """Give ``key`` these limits (either may be None: that dimension is unlimited), full."""
        now = self.clock()
        self.buckets[key] = Snapshot(Bucket(rpm, at=now) if rpm else None, Bucket(tpm, at=now) if tpm else None)

    def limited_until(self, key: str, epoch_s: float) -> None:
        self.limited[key] = epoch_s

    def counting_limited_until(self, key: str, epoch_s: float) -> None:
        """Its token counting refused until then, its messages not (nor the reverse)."""
        self.counting_limited[key] = epoch_s

    def revoke(self, key: str) -> None:
        self.revoked.add(key)

    def exhaust(self, key: str) -> None:
        self.exhausted.add(key)

    def restore(self, key: str) -> None:
        """Undo revoke, exhaust, limited_until and counting_limited_until (the limits stay)."""
        self.revoked.discard(key)
        self.exhausted.discard(key)
        self.limited.pop(key, None)
        self.counting_limited.pop(key, None)

    def named(self, key: str) -> bool:
        """Whether ``key`` was given to the fake by name (limits, a state): a name its operator
        chose (``--keys k1=60``), shown as it is in the log, where any other credential is masked."""
        return any(key in d for d in (self.buckets, self.limited, self.counting_limited, self.revoked,
                                      self.exhausted))  # fmt: skip

    def snapshot(self, key: str | None) -> Snapshot | None:
        snap = self.buckets.get(key) if key is not None else None
        if snap is not None:
            now = self.clock()
            for b in (snap.requests, snap.tokens):
                if b is not None:
                    b.refill(now)
        return snap

    def check(self, key: str | None) -> Verdict | None:
        """The key's state, before any limit: revoked, out of credit, limited for a while."""
        if key is None:
            return None
        if key in self.revoked:
            return Verdict("revoked")
        if key in self.exhausted:
            return Verdict("exhausted")
        until = self.limited.get(key)
        if until is not None and (wait := until - self.clock()) > 0:
            return Verdict("limited", wait)
        return None

    def check_counting(self, key: str | None) -> Verdict | None:
        """A token-counting request's own limit (``counting_limited_until``)."""
        until = self.counting_limited.get(key) if key is not None else None
        if until is not None and (wait := until - self.clock()) > 0:
            return Verdict("limited", wait)
        return None

    def admit(self, key: str | None, tokens: int) -> Verdict | None:
        """Count one request needing about ``tokens``; a Verdict when a limit refuses it.

        A refused request is still counted against the requests limit when it got that far
        (OpenAI: "unsuccessful requests contribute to your per-minute limit")."""
        snap = self.snapshot(key)
        if snap is None:
            return None
        req, tok = snap.requests, snap.tokens
        if req is not None:
            if req.level < 1:
                return Verdict("requests", req.wait_for(1))
            req.take(1)
        if tok is not None:
            if tokens > tok.capacity:  # never fits, however long one waits
                return Verdict("too_large", 0.0, tok.capacity - tok.remaining(), tokens)
            if tokens > tok.level:
                return Verdict("tokens", tok.wait_for(tokens), tok.capacity - tok.remaining(), tokens)
        return None

    def charge(self, key: str | None, tokens: int) -> None:
        """Count the tokens an admitted answer used (its own usage numbers)."""
        snap = self.snapshot(key)
        if snap is not None and snap.tokens is not None:
            snap.tokens.take(tokens)

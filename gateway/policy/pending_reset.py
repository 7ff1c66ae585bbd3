"""A rate limit's reset still to come on one target, and what it means for the next request.

A target is what a provider's rate limit applies to: an upstream (a pool's deployment: one
key) and the model it is sent as (after ``model_map``). OpenAI, Anthropic and Google count
their limits per model and per organisation / project, so two client models mapped to one
upstream model share one limit, and two deployments do not.

Once a request has ended its attempts on a target with a 429 whose reset the provider stated,
that reset is pending for everyone. A *different* request sent there before it comes gets one
attempt: a 429 from it is final, not waited out with the class's retries, because the
retries were just spent on that very reset. An agent's turn is often several requests to one
target (Gemini CLI's "auto" mode asks a flash-lite model to route, then the answer's model,
both mapped to one upstream model): without this each bought the gateway's whole round.
The attempt still goes (the reset may come early; a limit on tokens may let a small request
through): a pending reset refuses nothing, like the outage note (pipeline/send.py).

Pure: the clock is passed in; the store that keeps the notes is the caller's.
"""

from __future__ import annotations

import hashlib

from gateway.errors import Classification, ErrorType
from gateway.policy.breaker import circuit_key

# Store key prefix (the state store's resets): apart from the chain's steering resets, which
# are kept per client model.
PREFIX = "limited:"


def target(upstream: str, model: str | None, credential: str | None = None) -> str:
    """The store key of a target: its upstream and the model it is sent as (bounded), and the
    client's own credential when the upstream forwards it (its limit is that client's, not
    another's): only a hash of it, never the credential."""
    key = PREFIX + circuit_key(upstream, model)
    if credential is None:
        return key
    return f"{key}|{hashlib.sha256(credential.encode()).hexdigest()[:16]}"


def reset_of(c: Classification, now_s: float) -> int | None:
    """The epoch ms at which the rate limit ``c`` says it resets; None: ``c`` is no rate limit,
    or the provider stated no wait (a backoff of our own is no reset to hold others to)."""
    if c.type is not ErrorType.RATE_LIMIT:
        return None
    if c.reset_at_ms is not None:
        return c.reset_at_ms
    if c.retry_after_s is not None:
        return round((now_s + c.retry_after_s) * 1000)
    return None


def pending_s(noted_ms: int | None, now_s: float) -> float | None:
    """The seconds until a noted reset comes; None when none is noted or it has come."""
    if noted_ms is None:
        return None
    left = noted_ms / 1000 - now_s
    return left if left > 0 else None


def final_wait_s(c: Classification, noted_ms: int | None, now_s: float) -> float | None:
    """Whether a request's first failure ``c`` on a target with ``noted_ms`` pending is final:
    the wait to answer it with (its own stated wait, else the pending reset's), or None when it
    is retried by the class's rule (no rate limit, or no reset pending)."""
    if c.type is not ErrorType.RATE_LIMIT:
        return None
    left = pending_s(noted_ms, now_s)
    if left is None:
        return None
    return c.retry_after_s if c.retry_after_s is not None else left

"""The error taxonomy: errors are data, not exceptions.

Every failure the gateway sees, from the upstream or of its own making, ends up
as one :class:`Classification`. The tree of what maps where::

    upstream reply / transport failure
    ├── budget                 402; 429 insufficient_quota; billing / credit balance; per-day quota
    ├── rate_limit             429 (and provider-specific throttling codes)       retryable
    ├── provider_unavailable   5xx, 529, connect error, reset, first-byte/token timeout retryable
    ├── context_overflow       "context_length_exceeded", "prompt is too long", ...
    ├── auth                   401, 403
    └── unknown                400, 404, 413 byte limits, 422, anything else

The enum values are exactly the values of the ``x-llm-error-type`` header.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ErrorType(enum.StrEnum):
    BUDGET = "budget"
    RATE_LIMIT = "rate_limit"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    CONTEXT_OVERFLOW = "context_overflow"
    AUTH = "auth"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        return self in (ErrorType.RATE_LIMIT, ErrorType.PROVIDER_UNAVAILABLE)


class TransportError(enum.StrEnum):
    """Failures with no upstream response to classify; mapped once, by each sender (gateway/upstream/)."""

    CONNECT = "connect"  # could not open a connection (refused, unreachable, DNS)
    CONNECT_TIMEOUT = "connect_timeout"  # no connection within timeouts.connect_s: a silent host
    RESET = "reset"  # connection dropped before the response head arrived
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # no response head within timeouts.first_byte_s
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"  # a stream showed nothing within first_token_s
    IDLE_TIMEOUT = "idle_timeout"  # a stream went silent for timeouts.idle_s
    STREAM_BROKEN = "stream_broken"  # connection dropped in the middle of a body


# The status an upstream's error event stands for when it states none (a chat error chunk, an
# Anthropic event of a type it does not document): the one its class is answered with.
EVENT_STATUS = {
    ErrorType.RATE_LIMIT: 429,
    ErrorType.BUDGET: 402,
    ErrorType.CONTEXT_OVERFLOW: 400,
    ErrorType.AUTH: 401,
    ErrorType.PROVIDER_UNAVAILABLE: 503,
    ErrorType.UNKNOWN: 502,
}


@dataclass(frozen=True, slots=True)
class Classification:
    type: ErrorType
    retryable: bool
    retry_after_s: float | None = None  # how long the server asked us to wait, when it said
    reset_at_ms: int | None = None  # epoch ms at which retrying makes sense, when known
    provider_code: str | None = None  # the provider's own code/type, for logs
    message: str | None = None  # the provider's message (may quote limits; never logged)
    evidence: str | None = None  # what decided the class: a code, numbers, a header, wording; logged
    # The failure is the model asked for's, not the key's: an ``auth`` refusal naming the model,
    # a quota counted per model (Google's ``PerModel`` quota ids). A pool sits the key out for it alone.
    one_model: bool = False
    # A 404 saying the model asked for is not there (no such deployment, not pulled, no access
    # for this key): another deployment of a pool may have it.
    model_missing: bool = False
    # A ``context_overflow`` against a tokens-per-minute window, not the model's context window
    # (OpenAI's and Groq's "Request too large ... tokens per min (TPM): Limit N, Requested M",
    # Azure's token-rate 429 asking a day): the limit is the deployment's or key's own, so a
    # sibling or a fallback with more may take the request whatever its context window, and
    # dropping turns is no remedy when the output budget asked is what does not fit.
    per_minute: bool = False

    @classmethod
    def of(cls, type_: ErrorType, **kw: object) -> Classification:
        return cls(type=type_, retryable=type_.retryable, **kw)  # type: ignore[arg-type]

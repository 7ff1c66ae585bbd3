"""Admission and usage pieces more than one dialect shares."""

from __future__ import annotations

import json
from typing import Any

from gateway.apis.base import ForeignError, Inbound, Rejection
from gateway.policy import per_minute_fit

# The longest model name admitted. Anthropic refuses a longer one: "model: String should have
# at most 256 characters" (a 400 invalid_request_error, quoted in
# https://github.com/anthropics/claude-code/issues/5676); no provider's names come near it (an
# OpenAI fine-tune's "ft:gpt-4o-mini-2024-07-18:org:suffix:id" is about 50). A name is a key of
# the gateway's caches (routes, legs, upstream URLs: Gemini's path holds it) and each keeps it
# whole: without a bound, ten requests naming a 20 MB model held 1 GB of a worker for good.
MODEL_MAX = 256


def model_too_long(model: str) -> Rejection | None:
    """A client's model name (from a body or a URL path) that no provider would take."""
    if len(model) <= MODEL_MAX:
        return None
    message = f"the model name is {len(model)} characters long; it may be at most {MODEL_MAX} characters"
    return Rejection(message, "invalid_model")


def admit_fields(body: bytes, payload: dict[str, Any]) -> Inbound | Rejection:
    """``model`` a non-empty string (all three APIs require it: without one, the request is
    the client's mistake, not something to route, send and retry) and ``stream`` a boolean."""
    model = payload.get("model")
    if model is None or model == "":
        return Rejection("'model' is required: the name of the model to use", "missing_model")
    if not isinstance(model, str):
        return Rejection("'model' must be a string", "invalid_model")
    too_long = model_too_long(model)
    if too_long is not None:
        return too_long
    stream = payload.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return Rejection("'stream' must be true or false", "invalid_stream")
    return Inbound(body, payload, model, bool(stream))


def admit_messages(body: bytes, payload: dict[str, Any]) -> Inbound | Rejection:
    """A ``messages`` list of objects (chat completions, Messages), then the common fields."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return Rejection("'messages' must be a list of message objects", "invalid_messages")
    for m in messages:  # a loop, not all() over a generator: ~1,500 instructions less a request
        if not isinstance(m, dict):
            return Rejection("every item of 'messages' must be an object", "invalid_messages")
    return admit_fields(body, payload)


# The code of the error event a reader makes of an event it cannot decode (JSON cut or garbled):
# relayed, it would crash the client's parser (the openai and anthropic SDKs raise a
# JSONDecodeError), so it ends the stream like any other break, and continuation.py asks
# another upstream first.
MALFORMED_EVENT = "malformed_event"


def malformed_event_error() -> dict[str, Any]:
    return {"error": {"message": "the upstream sent a malformed stream event", "code": MALFORMED_EVENT,
                      "status": 502}}  # fmt: skip


# Where each API details its prompt count (chat completions, Responses).
_DETAILS = {"prompt_tokens": "prompt_tokens_details", "input_tokens": "input_tokens_details"}


def token_counts(usage: Any, prompt_key: str, completion_key: str) -> dict[str, int]:
    """``{"prompt": n, "completion": m}`` from an OpenAI usage object, ``cache_read``: the
    prompt tokens read from the provider's cache (``prompt_tokens_details.cached_tokens`` in
    chat completions, ``input_tokens_details.cached_tokens`` in Responses), which cost less, and
    ``cache_write``: those written to it (``cache_write_tokens`` beside them), which cost more on
    GPT-5.6 and later and on OpenRouter's Claude. Both are parts of the prompt, never on top of
    it: OpenAI's prompt-caching guide counts "input_tokens": 2600 with "cached_tokens": 2000 and
    "cache_write_tokens": 400 as "The remaining 200 input tokens were neither read nor written"
    (developers.openai.com/api/docs/guides/prompt-caching, "Measure cache reads and writes"),
    and ``keys/prices.cost_of`` prices the rest of the prompt at the input price. What is not a
    count is skipped."""
    out: dict[str, int] = {}
    if isinstance(usage, dict):
        # Unrolled, without a loop or a key built per answer: this reads every answer's usage.
        prompt = usage.get(prompt_key)
        if isinstance(prompt, int) and prompt >= 0:
            out["prompt"] = prompt
        completion = usage.get(completion_key)
        if isinstance(completion, int) and completion >= 0:
            out["completion"] = completion
        details = usage.get(_DETAILS[prompt_key])
        if isinstance(details, dict):
            cached = details.get("cached_tokens")
            if isinstance(cached, int) and cached > 0:
                out["cache_read"] = cached
            written = details.get("cache_write_tokens")
            if isinstance(written, int) and written > 0:
                out["cache_write"] = written
    return out


def add_shown_tokens(usage: Any, completion_key: str, shown: int) -> bool:
    """Adds to a continuation's usage the estimated tokens of the broken part the client
    already has (the provider counted only the rest); False when ``usage`` has no count."""
    if not isinstance(usage, dict) or not isinstance(usage.get(completion_key), int):
        return False
    usage[completion_key] += shown
    if isinstance(usage.get("total_tokens"), int):
        usage["total_tokens"] += shown
    return True


class ShownText:
    """What a stream reader keeps so that a break can be continued: the text shown, and
    whether something that cannot be continued from text (a tool call, …) started. Kept only
    after ``track()``: the relay asks for it only where an upstream declares continuation."""

    __slots__ = ("texts", "tool_started", "tracking")

    def __init__(self) -> None:
        self.tracking = False
        self.texts: list[str] = []
        self.tool_started = False

    def track(self) -> None:
        self.tracking = True

    def partial(self) -> str | None:
        if not self.tracking or self.tool_started:
            return None
        return "".join(self.texts) or None

    def shown_text(self) -> str:
        return "".join(self.texts)


UPSTREAM_BODY_MAX = 4096  # of a non-JSON upstream error body (an HTML page, say)


def upstream_detail(e: ForeignError) -> dict[str, Any]:
    """The provider's own answer, kept inside a translated error as ``x_llm_upstream`` so that
    nothing the provider said is lost; clients read only the envelope around it."""
    try:
        body: Any = json.loads(e.upstream_body)
    except ValueError:
        body = e.upstream_body[:UPSTREAM_BODY_MAX].decode("utf-8", "replace")
    return {"api": e.upstream_api, "status": e.upstream_status, "body": body}


# The code a chat or Responses client is given for a per-minute overflow: a gateway's own, no
# client acts on it (OpenAI's ``context_length_exceeded`` is what makes Codex and opencode
# compact, which cannot help a request whose output budget is what does not fit).
PER_MINUTE_CODE = "tokens_per_minute_exceeded"


def told_per_minute(e: ForeignError) -> bool:
    """Whether an overflow is told as one of its upstream's tokens per minute
    (``per_minute_message``): only where an output budget might fit. One whose prompt alone is
    over the window (the refusal's numbers leave no budget) is told in the API's overflow
    sentence, on which an agent compacts: told "a smaller max_tokens may fit" for 45,765 tokens
    requested, 8,000 of them output, against a 30,000 TPM, Claude Code never compacted and every
    later turn met the same refusal (review)."""
    c = e.classification
    return c.per_minute and not per_minute_fit.fitted_output(c.message, e.output_tokens).prompt_over


def per_minute_message(e: ForeignError, budget_field: str = "max_tokens") -> str:
    """What a client is told of a request over its upstream's tokens per minute whose output
    budget is what does not fit (``told_per_minute``): the provider's own words and what they
    mean, the budget named by the client API's own field, never an API's overflow sentence.
    "prompt is too long: N tokens > M maximum" made Claude Code compact a conversation of a few
    tokens (or stop, "cannot be compacted"), and its next turn, with the same ``max_tokens``,
    met the same refusal (review)."""
    said = e.classification.message or f"the upstream answered {e.upstream_status}"
    budget = f"{budget_field} {e.output_tokens}" if e.output_tokens else f"its {budget_field}"
    fits = per_minute_fit.fitted_output(e.classification.message, e.output_tokens).max_tokens
    # The numbers, where the refusal states them (OpenAI's, Groq's); Azure's states none.
    smaller = f"a {budget_field} of at most {fits}" if fits else f"a smaller {budget_field}"
    return (f"The request, with {budget}, is larger than the upstream deployment's tokens per minute: "
            f"{smaller} may fit. The upstream said: {said}")


def overflow_numbers(e: ForeignError) -> tuple[int, int]:
    r"""Request size and limit for an overflow message ("prompt is too long: N tokens > M
    maximum" and the other APIs' own sentences), which agents read as numbers: Claude Code
    2.1.332 takes N and M with ``/prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)/i``,
    shows "the request is ~N tokens (limit M)", and, when its own summarising request
    overflows, drops its oldest messages until they hold N - M tokens (20% of them when the
    numbers are missing): functions ``aPe`` and ``Hhe`` in its binary.

    The limit is the window the provider stated, else the upstream's ``context_window``: a
    window, never a number made up from the request. The size is the provider's count, else
    the gateway's estimate of what it sent, but never at or under the limit, which would
    contradict "too long": an estimate that says the request fits is wrong by at least the
    difference (the provider counted more: tokens the estimate misses, the output budget), so
    the size said is the limit plus one, the least that is true. With no limit known either,
    the limit is taken as one token under the size: all an agent needs to know is that it is
    too long."""
    prompt = e.prompt_tokens or 0
    limit = e.limit_tokens
    if not limit:
        prompt = max(prompt, 1)
        return prompt, prompt - 1
    return max(prompt, limit + 1), limit
